"""Where a command may write (README, "Output folders"), on the real command line: ``-o`` over any file the
run reads is refused before solving (exit 2, the file named, every input byte-identical) — even with
``--force --clean``; ``--force`` replaces only what onnxpart wrote, ``--force --clean`` anything; a
folder that cannot be written is refused before solving; nothing is ever written outside ``-o``."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import onnx
import pytest

from tests.conftest import FIXTURES
from tests.safety.harness import DIAMOND, STRATEGIES, STRATEGY_ARGS, Guard, run_cli

WRITERS = (*STRATEGIES, "annotate")
#: Options (appended, so they win) for runs that solve DIAMOND: a budget that fits (the harness's is
#: below what it needs) and a short limit (the answer does not matter here).
SOLVABLE = {command: ["--time-limit", "0.5"] for command in STRATEGIES}
SOLVABLE["remat"] = ["--budget", "100%", "--time-limit", "0.5"]
DEVICE_SPEC = Path(str(resources.files("onnxpart.cost_models") / "devices" / "a100.yaml"))


@dataclass
class Case:
    """A run whose ``-o`` is ``output``: the model argument, the files it reads, a name the refusal must
    mention, and the options that make the run read the rest."""

    model: Path
    output: Path
    inputs: tuple[Path, ...]
    mention: str
    extra: tuple = ()


def command_line(command: str, model: Path, output: Path, *extra) -> list:
    """``command model <its least options> extra -o output`` (a later ``--system`` replaces the default)."""
    return [command, model, *STRATEGY_ARGS.get(command, []), *extra, "-o", output]


def copy_model(folder: Path, name: str = "m.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(DIAMOND, folder / name))


def costs_file(path: Path, model: Path) -> Path:
    """``onnxpart annotate``'s costs.json for ``model``, written in-process (no extra subprocess)."""
    from onnxpart.costs_io import graph_to_costs
    from onnxpart.loading import load_costed

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(graph_to_costs(load_costed(model).graph, str(model))))
    return path


def _model(tmp: Path, command: str) -> Case:
    model = copy_model(tmp / "work")
    return Case(model, model if command == "annotate" else model.parent, (model,), "m.onnx")


def _above(tmp: Path, command: str) -> Case:
    model = copy_model(tmp / "a" / "b")
    return Case(model, tmp / "a", (model,), "m.onnx")


def _external(tmp: Path, command: str) -> Case:
    """A model whose weights are in ``weights/w.bin`` beside it."""
    model = onnx.load(str(FIXTURES / "external" / "mlp.onnx"))
    (tmp / "work" / "weights").mkdir(parents=True)
    path, data = tmp / "work" / "m.onnx", tmp / "work" / "weights" / "w.bin"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights/w.bin", size_threshold=0)
    return Case(path, data if command == "annotate" else data.parent, (path, data), "w.bin")


def _costs(tmp: Path, command: str) -> Case:
    model = copy_model(tmp / "work")
    costs = costs_file(tmp / "c" / "costs.json", model)
    return Case(model, costs.parent, (model, costs), "costs.json", ("--costs", costs))


def _device(tmp: Path, command: str) -> Case:
    model = copy_model(tmp / "work")
    (tmp / "d").mkdir()
    spec = Path(shutil.copyfile(DEVICE_SPEC, tmp / "d" / "dev.yaml"))
    return Case(model, spec if command == "annotate" else spec.parent, (model, spec), "dev.yaml", ("--device", spec))


def _system(which: str):
    """A system file naming a device spec file (``specs/``) and a measured costs file (``costs/``);
    ``-o`` over the folder of ``which`` of the three."""

    def build(tmp: Path, command: str) -> Case:
        model = copy_model(tmp / "work")
        folder = tmp / "s"
        (folder / "specs").mkdir(parents=True)
        spec = Path(shutil.copyfile(DEVICE_SPEC, folder / "specs" / "dev.yaml"))
        costs = costs_file(folder / "costs" / "gpu.json", model)
        system = folder / "sys.yaml"
        system.write_text("devices:\n  - {name: cpu, spec: specs/dev.yaml}\n  - {name: gpu, costs: costs/gpu.json}\n"
                          "links:\n  default: {bandwidth: 16GB/s}\n")
        named = {"sys.yaml": system, "dev.yaml": spec, "gpu.json": costs}[which]
        return Case(model, named.parent, (model, system, spec, costs), which, ("--system", system))

    return build


def _graph(tmp: Path, command: str) -> Case:
    graph = costs_file(tmp / "g" / "graph.json", copy_model(tmp / "work"))
    return Case(graph, graph.parent, (graph,), "graph.json")


def _program(tmp: Path, command: str) -> Case:
    (tmp / "p").mkdir()
    program = tmp / "p" / "program.json"
    program.write_text('{"program": [{"out": "C", "op": "mul", "in": ["A", "B"]}]}')
    return Case(program, program.parent, (program,), "program.json")


def _symlink(tmp: Path, command: str) -> Case:
    real = copy_model(tmp / "real")
    (tmp / "links").mkdir()
    link = tmp / "links" / "m.onnx"
    link.symlink_to(real)
    return Case(link, real if command == "annotate" else real.parent, (real, link), "m.onnx")


def _hard_link(tmp: Path, command: str) -> Case:
    model = copy_model(tmp / "work")
    (tmp / "h").mkdir()
    other = tmp / "h" / "copy.onnx"
    os.link(model, other)
    return Case(model, other if command == "annotate" else other.parent, (model, other),
                "hard link" if command == "annotate" else "copy.onnx")


#: Each input kind, the commands that read it, and how to set it up.
KINDS = {
    "model": (WRITERS, _model),
    "external data": (WRITERS, _external),
    "--costs": (STRATEGIES, _costs),
    "--device file": (WRITERS, _device),
    "--system file": (("schedule",), _system("sys.yaml")),
    "device file the system names": (("schedule",), _system("dev.yaml")),
    "costs file the system names": (("schedule",), _system("gpu.json")),
    "graph file": (("partition",), _graph),
    "matrix program": (("tile",), _program),
    "folder above the model": (("partition", "annotate"), _above),
    "real folder of a symlinked model": (("partition", "annotate"), _symlink),
    "hard link of the model": (("partition", "annotate"), _hard_link),
}
OVERLAPS = [(kind, command) for kind, (commands, _) in KINDS.items() for command in commands]


@pytest.mark.parametrize("kind, command", OVERLAPS, ids=[f"{c}-{k}" for k, c in OVERLAPS])
def test_output_over_an_input_is_refused_even_with_force_clean(tmp_path, kind, command):
    case = KINDS[kind][1](tmp_path, command)
    guard = Guard(tmp_path / "cwd", case.inputs, case.output)
    guard.refused(*command_line(command, case.model, case.output, *case.extra), "--force", "--clean",
                  mention=case.mention)


@pytest.mark.parametrize("command", WRITERS)
def test_force_replaces_only_what_onnxpart_wrote(tmp_path, command):
    model, cwd = copy_model(tmp_path / "work"), tmp_path / "cwd"
    out = tmp_path / ("costs.json" if command == "annotate" else "out")
    if command == "annotate":
        out.write_text("my notes")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("my notes")
    line = command_line(command, model, out, *SOLVABLE.get(command, []))
    Guard(cwd, (model,), out).refused(*line, "--force", mention="--force --clean")

    proc = run_cli(*line, "--force", "--clean", cwd=cwd)  # said explicitly: replaced
    assert proc.returncode == 0, proc.stderr
    mine = out if command == "annotate" else out / "certificate.json"
    assert json.loads(mine.read_text())["schema"].startswith("onnxpart.")
    assert command == "annotate" or not (out / "notes.txt").exists()

    if command == "annotate":  # an earlier onnxpart output: --force alone replaces it
        out.write_text(json.dumps({**json.loads(out.read_text()), "graph": "stale"}))
    else:
        (out / "stale.txt").write_text("from an earlier run")
    proc = run_cli(*line, "--force", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    if command == "annotate":
        assert json.loads(out.read_text())["graph"] != "stale"
    else:
        assert not (out / "stale.txt").exists() and (out / "certificate.json").is_file()
    assert list(cwd.iterdir()) == []


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process cannot create anything in: mode 0555, or, for root (who ignores modes),
    /sys, which no one can create entries in."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    yield folder
    folder.chmod(0o755)


@pytest.mark.parametrize("command", ("partition", "annotate"))
def test_unwritable_folder_is_refused_before_solving(tmp_path, unwritable, command):
    model = copy_model(tmp_path / "work")
    out = unwritable / ("onnxpart-costs.json" if command == "annotate" else "onnxpart-out")
    Guard(tmp_path / "cwd", (model,), out).refused(*command_line(command, model, out), mention="cannot write")


def test_measured_costs_write_only_the_output(tmp_path, unwritable):
    """onnxruntime's profiler writes into the current folder by default: run from one that cannot be
    written, and the costs file is the only file written."""
    model, out = copy_model(tmp_path / "work"), tmp_path / "out" / "costs.json"
    out.parent.mkdir()
    proc = run_cli("annotate", model, "--cost", "measured", "--runs", "1", "-o", out, cwd=unwritable)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.parent.iterdir()] == ["costs.json"]
    assert json.loads(out.read_text())["cost_model"] == "measured"
