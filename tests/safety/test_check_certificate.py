"""``--check-certificate`` cannot be fooled (issue 26 part 2, issue 29 part 1): each command solves once
per module, then every kind of tampering with its folder — an entry of the manifest changed, duplicated,
deleted or moved; a transfer shortened, deleted, duplicated or resized; overlapping ops; the upper bound,
a lower bound (above the upper bound, NaN, negative) or the gap changed; another model's folder; a
malformed manifest (an array, ``{}``, a wrong type, deep nesting); a missing folder or certificate —
must exit 2 with one ``error:`` line and name the problem, touching nothing, while an untampered copy
exits 0. Partition, remat, and schedule with both objectives.

The problems each refusal names are read from ``--json`` (``problems``: all of them; the error line
names the first), so a test asserts its tampering is caught whatever else it breaks on the way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.safety.harness import DIAMOND, Guard, error_line, run_cli

TRANSFORMER = FIXTURES / "transformer_block.onnx"
UNET = FIXTURES / "unet.onnx"
#: two identical CPUs on a fast link, switching free: the diamond's branches run on both, with transfers
TWO_CPUS = """devices:
  - {name: cpu, spec: cpu, count: 2, batch_sizes: [1, 2, 4], switch: 0}
links:
  default: {bandwidth: 1000GB/s, latency: 0}
"""

#: command, model, the options that define the instance (solve and check alike), the manifest's name,
#: a numeric top-level field of the manifest (for the wrong-type case), extra solve options
KINDS = {
    "partition": ("partition", DIAMOND, ["-k", "2"], "manifest.json", "bottleneck", []),
    "remat": ("remat", TRANSFORMER, ["--budget", "139264"], "sequence.json", "duration", []),
    "latency": ("schedule", DIAMOND, ["--system", "{system}"], "manifest.json", "makespan", []),
    "throughput": ("schedule", DIAMOND, ["--system", "{system}"], "manifest.json", "makespan",
                   ["--objective", "throughput", "--batch", "4", "--method", "sa"]),
}

Tamper = Callable[[dict, dict], object]


class Folder:
    """One command's solved output folder and how to check a tampered copy of it."""

    def __init__(self, kind: str, root: Path, system: Path):
        self.command, self.model, options, self.manifest_name, self.number, extra = KINDS[kind]
        self.options = [o.format(system=system) for o in options]
        self.inputs = (self.model, system)
        self.out = root / kind
        proc = run_cli(self.command, self.model, *self.options, *extra, "--time-limit", "2", "-o", self.out,
                       cwd=root / f"{kind}-cwd")
        assert proc.returncode == 0, proc.stderr[-2000:]

    def read(self) -> tuple[dict, dict]:
        return (json.loads((self.out / self.manifest_name).read_text()),
                json.loads((self.out / "certificate.json").read_text()))

    def copy(self, tmp_path: Path, tamper: Tamper | None = None) -> Path:
        """manifest + certificate in a fresh folder, ``tamper(manifest, certificate)`` applied first."""
        folder = tmp_path / "checked"
        folder.mkdir(parents=True)
        manifest, cert = self.read()
        if tamper is not None:
            tamper(manifest, cert)
        (folder / self.manifest_name).write_text(json.dumps(manifest))
        (folder / "certificate.json").write_text(json.dumps(cert))
        return folder

    def refused(self, tmp_path: Path, folder: Path, model: Path | None = None) -> str:
        """Check ``folder`` (against ``model``, default this folder's): exit 2, one ``error:`` line, nothing
        touched. -> the error line and every problem ``--json`` lists, one a line."""
        guard = Guard(tmp_path / "cwd", (*self.inputs, folder))
        proc = guard.run(self.command, model or self.model, *self.options, "--check-certificate", folder, "--json")
        assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
        line = error_line(proc)
        guard.assert_untouched()
        problems = json.loads(proc.stdout)["problems"] if proc.stdout.strip() else []
        return "\n".join([line, *problems])


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Folder]:
    root = tmp_path_factory.mktemp("solved")
    system = root / "two_cpus.yaml"
    system.write_text(TWO_CPUS)
    made = {kind: Folder(kind, root, system) for kind in KINDS}
    latency, _ = made["latency"].read()
    throughput, _ = made["throughput"].read()
    assert latency["transfers"] and throughput["transfers"], "the fixtures must move tensors between devices"
    return made


def test_untampered_copy_passes(folders, tmp_path):
    for kind, folder in folders.items():
        copy = folder.copy(tmp_path / kind)
        proc = Guard(tmp_path / f"{kind}-cwd", (*folder.inputs, copy)).run(
            folder.command, folder.model, *folder.options, "--check-certificate", copy)
        assert proc.returncode == 0 and "certificate ok" in proc.stdout, (kind, proc.stdout, proc.stderr)


# ------------------------------------------------------------------- what every command shares
def _lower_bound(value: float) -> Tamper:
    def tamper(_, cert):
        cert["lower_bounds"][0]["value"] = value(cert) if callable(value) else value
    return tamper


SHARED: dict[str, tuple[Tamper, str]] = {
    "upper bound lowered": (lambda m, c: c.update(upper_bound=c["upper_bound"] * 0.9), "certificate upper bound"),
    "lower bound above the upper bound": (_lower_bound(lambda c: c["upper_bound"] * 2), "exceeds the upper bound"),
    "lower bound NaN": (_lower_bound(math.nan), "lower_bounds[0].value: must be a finite number"),
    "lower bound negative": (_lower_bound(-1e-6), "lower_bounds[0].value: must be greater than"),
    "gap changed": (lambda m, c: c.update(gap=min(1.0, (c["gap"] or 0.0) + 0.25)), "certificate gap"),
    "best lower bound changed": (lambda m, c: c.update(best_lower_bound=c["upper_bound"] / 3),
                                 "certificate best_lower_bound"),
    "manifest's model hash changed": (lambda m, c: m["model"].update(sha256="0" * 64), "made from another model"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", SHARED)
def test_shared_tampering_is_caught(folders, tmp_path, kind, case):
    tamper, mention = SHARED[case]
    folder = folders[kind]
    assert mention in folder.refused(tmp_path, folder.copy(tmp_path, tamper))


@pytest.mark.parametrize("kind", KINDS)
def test_another_models_folder_is_refused(folders, tmp_path, kind):
    folder = folders[kind]
    other = UNET if folder.model != UNET else DIAMOND
    caught = folder.refused(tmp_path, folder.copy(tmp_path), model=other)
    assert caught.startswith("error: certificate check failed: the manifest was made from another model"), caught
    assert "instance sha256 differs" in caught, caught


MALFORMED: dict[str, tuple[Callable[[Folder], str], str]] = {
    "an array": (lambda f: "[]", "(top level): expected a mapping, got []"),
    "an empty object": (lambda f: "{}", ": missing"),
    "a wrong type": (lambda f: json.dumps({**f.read()[0], f.number: str(f.read()[0][f.number])}),
                     "must be a valid number"),
    "deeply nested": (lambda f: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_manifest_is_refused(folders, tmp_path, kind, case):
    text, mention = MALFORMED[case]
    folder = folders[kind]
    copy = folder.copy(tmp_path)
    (copy / folder.manifest_name).write_text(text(folder))
    caught = folder.refused(tmp_path, copy)
    assert mention in caught and folder.manifest_name in caught, caught
    if case == "a wrong type":
        assert f": {folder.number}:" in caught, caught  # the field is named


@pytest.mark.parametrize("kind", KINDS)
def test_missing_folder_or_certificate_is_refused(folders, tmp_path, kind):
    folder = folders[kind]
    assert "the folder does not exist" in folder.refused(tmp_path, tmp_path / "nowhere")
    copy = folder.copy(tmp_path)
    (copy / "certificate.json").unlink()
    caught = folder.refused(tmp_path / "2", copy)
    assert "certificate" in caught and "does not exist" in caught, caught


# ---------------------------------------------------------------------------------- partition
def _move_last_op(m, _):
    m["stages"][1]["ops"].insert(0, m["stages"][0]["ops"].pop())


PARTITION: dict[str, tuple[Tamper, str]] = {
    "op in two stages": (lambda m, c: m["stages"][1]["ops"].append(m["stages"][0]["ops"][0]), "in two stages"),
    "op deleted": (lambda m, c: m["stages"][1]["ops"].pop(), "in no stage"),
    "op moved to the next stage": (_move_last_op, "stages[0]."),
    "stage cost changed": (lambda m, c: m["stages"][1].update(cost=m["stages"][1]["cost"] * 0.5), "stages[1].cost"),
    "stage transfer time changed": (lambda m, c: m["stages"][1].update(io_in=0.0), "stages[1].io_in"),
    "bottleneck changed": (lambda m, c: m.update(bottleneck=m["bottleneck"] * 0.5), "bottleneck "),
}


@pytest.mark.parametrize("case", PARTITION)
def test_partition_tampering_is_caught(folders, tmp_path, case):
    tamper, mention = PARTITION[case]
    assert mention in folders["partition"].refused(tmp_path, folders["partition"].copy(tmp_path, tamper))


# -------------------------------------------------------------------------------------- remat
def _duplicate_event(m, _):
    m["events"].insert(2, dict(m["events"][1]))


REMAT: dict[str, tuple[Tamper, str]] = {
    "event duplicated": (_duplicate_event, "certificate upper bound"),
    "event deleted": (lambda m, c: m["events"].pop(), "the sequence is not valid"),
    "event duration changed": (lambda m, c: m["events"][3].update(duration=m["events"][3]["duration"] / 2),
                               "events[3].duration"),
    "event memory changed": (lambda m, c: m["events"][3].update(memory_bytes=0.0), "events[3].memory_bytes"),
    "peak changed": (lambda m, c: m.update(peak_bytes=m["peak_bytes"] / 2), "peak_bytes"),
    "budget below the peak": (lambda m, c: m.update(budget_bytes=int(m["peak_bytes"]) - 1), "over the budget"),
    "certificate details malformed": (lambda m, c: c["details"].update(instance_order=5), "details: instance_order"),
}


@pytest.mark.parametrize("case", REMAT)
def test_remat_tampering_is_caught(folders, tmp_path, case):
    tamper, mention = REMAT[case]
    assert mention in folders["remat"].refused(tmp_path, folders["remat"].copy(tmp_path, tamper))


# ------------------------------------------------------------------------- schedule, both objectives
def _transfer(change: Callable[[dict], object]) -> Tamper:
    def tamper(m, _):
        change(m["transfers"][0])
    return tamper


def _overlap(m, _):
    """The second op on the first device starts with the first (its own duration kept)."""
    device = m["ops"][0]["device"]
    first, second = [op for op in m["ops"] if op["device"] == device][:2]
    second["end"] += first["start"] - second["start"]
    second["start"] = first["start"]


def _other_device(m, _):
    """The last op run whole on one device moves to another."""
    devices = [d["name"] for d in m["system"]["devices"]]
    names = [op["name"] for op in m["ops"]]
    op = next(op for op in reversed(m["ops"]) if names.count(op["name"]) == 1)
    op["device"] = next(d for d in devices if d != op["device"])


SCHEDULE: dict[str, tuple[Tamper, str]] = {
    "transfer shortened to 0.1 µs": (_transfer(lambda t: t.update(end=t["start"] + 1e-7)), "].end "),
    "transfer deleted": (lambda m, c: m["transfers"].pop(0), "] is missing"),
    "transfer listed twice": (lambda m, c: m["transfers"].append(dict(m["transfers"][0])), "listed twice"),
    "transfer bytes changed": (_transfer(lambda t: t.update(bytes=t["bytes"] * 2)), "].bytes "),
    "transfer invented": (lambda m, c: m["transfers"].append({**m["transfers"][0], "src_op": m["ops"][-1]["name"]}),
                          "is not in the recomputed result"),
    "op duplicated": (lambda m, c: m["ops"].append(dict(m["ops"][0])), "listed twice"),
    "op deleted": (lambda m, c: m["ops"].pop(), "missing"),
    "op moved to another device": (_other_device, "before its input"),
    "op duration changed": (lambda m, c: m["ops"][0].update(end=m["ops"][0]["end"] * 1.5), "runs"),
    "ops overlap": (_overlap, "overlap on"),
    "makespan changed": (lambda m, c: m.update(makespan=m["makespan"] * 1.1), "makespan "),
    "device busy time changed": (lambda m, c: m["devices"][0].update(busy=0.0), "].busy "),
    "piece changed": (lambda m, c: m["pieces"][0].update(end=m["pieces"][0]["end"] * 2), "pieces[0].end "),
    "certificate details malformed": (lambda m, c: c["details"].update(options=[]), "details: options"),
}


@pytest.mark.parametrize("kind", ["latency", "throughput"])
@pytest.mark.parametrize("case", SCHEDULE)
def test_schedule_tampering_is_caught(folders, tmp_path, kind, case):
    tamper, mention = SCHEDULE[case]
    assert mention in folders[kind].refused(tmp_path, folders[kind].copy(tmp_path, tamper))
