"""Benchmark the per-piece (device switch) cost of `onnxpart schedule` and write the "schedule-pieces" section
of BENCHMARKS.md: pieces (runtime sessions) and makespan per model with switching free (every device's
``switch: 0``, the cost model before the switch cost) and with the default switch cost (each device's spec
``op_overhead``: CPU 2 µs, T4 and A100 5 µs), on the thesis's CPU + T4 + A100 system
(fixtures/systems/cpu_t4_a100.yaml), analytic costs.

Each row is one `onnxpart schedule --json` run as users run it (the command's own `--time-limit`, its
default methods, then HEFT alone); pieces are the emitted files' count, per device.

    python scripts/bench_schedule_pieces.py                       # writes BENCHMARKS.md
    python scripts/bench_schedule_pieces.py --time-limit 3 --no-write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
import yaml  # noqa: E402

from bench_common import ROOT, cli_json, machine_line, write_section  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's onnxpart and tests, not an installed one

from tests.export_like import tied_lm_head  # noqa: E402

SYSTEM = ROOT / "fixtures" / "systems" / "cpu_t4_a100.yaml"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def models(folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """Name -> (ONNX file, extra options): light torchvision-like models, the bundled transformer block
    and U-Net, and a GPT-2-like dynamic export (tests/export_like.py) at batch 1, sequence 128."""
    gpt = folder / "gpt2_like.onnx"
    onnx.save(tied_lm_head(vocab=512, hidden=256, layers=12), gpt)
    found = {name: (LIGHT / f"light_{name}.onnx", []) for name in ("inception_v1", "resnet50", "squeezenet",
                                                                 "densenet121")}
    found |= {name: (ROOT / "fixtures" / f"{name}.onnx", []) for name in ("transformer_block", "unet")}
    found["gpt2-like (12 layers)"] = (gpt, ["--dim", "batch=1", "--dim", "sequence=128"])
    return found


def free_switch_system(folder: Path) -> Path:
    """The benchmark's system file with every device's ``switch: 0``."""
    data = yaml.safe_load(SYSTEM.read_text())
    for device in data["devices"]:
        device["switch"] = 0
    path = folder / "switch_free.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def schedule(model: Path, extra: list[str], system: Path, out: Path, limit: float, method: str | None) -> dict:
    """One `onnxpart schedule --json` run: makespan, method, pieces per device, and ``runs``: the runs of
    consecutive ops on one device in the execution order (what a piece was before pieces were grouped by
    dependency)."""
    result = cli_json("schedule", str(model), "--system", str(system), "-o", str(out), "--force", "--time-limit",
                      str(limit), "--json", *extra, *(["--method", method] if method else []))
    manifest = result["manifest"]
    per_device = Counter(piece["device"] for piece in manifest["pieces"])
    device = {op["name"]: op["device"] for op in manifest["ops"]}
    runs = 1 + sum(device[a] != device[b] for a, b in zip(manifest["order"], manifest["order"][1:]))
    return {"makespan": manifest["makespan"], "method": result["method"], "pieces": result["pieces"], "runs": runs,
            "per_device": dict(sorted(per_device.items())), "ops": len(manifest["ops"])}


def render(rows: dict, limit: float) -> str:
    head = ("## schedule: pieces before and after the per-piece (device switch) cost\n\n"
            f"{machine_line()}; command: `python scripts/bench_schedule_pieces.py --time-limit {limit:g}`; the "
            "machine was shared by four engineers' test runs (load average above the core count): times are "
            "indicative, pieces are what the runs emitted. System: CPU + T4 + A100 "
            "(fixtures/systems/cpu_t4_a100.yaml), analytic costs. *free*: every device's `switch: 0` (the "
            "cost model before the switch cost); *charged*: the default switch cost, each device's spec "
            "`op_overhead` (CPU 2 µs, T4 and A100 5 µs), paid by every transfer into the device. *runs free*: "
            "the pieces as they were cut before this change (one per run of consecutive ops on one device in "
            "the execution order) of the free run; *pieces*: grouped by dependency (a new piece only where data "
            "comes back from another device). Pieces per device as cpu/t4/a100. Each makespan is under its own cost model: a free row's does not pay the "
            "launches its pieces cost a runtime, a charged row's does.\n\n"
            "| model | ops | method set | runs free | pieces free | pieces charged | per device charged "
            "| makespan free ms | makespan charged ms (method) |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for (name, methods), (free, charged) in rows.items():
        per = "/".join(str(charged["per_device"].get(d, 0)) for d in ("cpu", "t4", "a100"))
        lines.append(f"| {name} | {charged['ops']} | {methods} | {free['runs']} | {free['pieces']} | {charged['pieces']} "
                     f"| {per} | "
                     f"{free['makespan'] * 1e3:.4f} | {charged['makespan'] * 1e3:.4f} ({charged['method']}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="--time-limit of each run (default 10)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        free = free_switch_system(folder)
        for name, (model, extra) in models(folder).items():
            for methods, method in (("default", None), ("heft", "heft")):
                runs = tuple(schedule(model, extra, system, folder / "out", args.time_limit, method)
                             for system in (free, SYSTEM))
                rows[(name, methods)] = runs
                print(name, methods, [(r["pieces"], r["makespan"]) for r in runs], flush=True)
    text = render(rows, args.time_limit)
    print(text)
    if not args.no_write:
        write_section("schedule-pieces", text)


if __name__ == "__main__":
    main()
