"""Benchmark `onnxpart schedule` with a measured CPU beside analytic GPUs and write the "schedule-measured"
section of BENCHMARKS.md: the whole user path, end to end — `onnxpart annotate --cost measured` on this
machine's CPU (onnxruntime's CPU execution provider), a system file naming those costs files for the CPU
beside the T4 and A100 of fixtures/systems/cpu_t4_a100.yaml (analytic roofline: this machine has no GPU,
so none is measured), then `onnxpart schedule`. Latency on the light torchvision-like models (their batch
is fixed at 1) and a GPT-2-like dynamic export (tests/export_like.py); throughput on that export, its CPU
measured at each slice size (`annotate --cost measured --batch B`, B = 1, 2, 4, 8). Each model's second
row is the same run with the CPU analytic too.

    python scripts/bench_schedule_measured.py                      # writes BENCHMARKS.md
    python scripts/bench_schedule_measured.py --time-limit 5 --no-write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
import yaml  # noqa: E402

from bench_common import ROOT, cli_json, machine_line, write_section  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's tests, not an installed onnxpart's

from tests.export_like import tied_lm_head  # noqa: E402

SYSTEM = ROOT / "fixtures" / "systems" / "cpu_t4_a100.yaml"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SLICES = (1, 2, 4, 8)  # the CPU's measured batch sizes; throughput runs a batch of the largest
GPT_DIMS = ["--dim", "sequence=128", "--dim", "batch=1"]  # per input: --batch B sets axis 0 to B × 1


def system_file(folder: Path, name: str, cpu_costs: dict[int, str] | None) -> Path:
    """The benchmark's system file, every device running :data:`SLICES`; the CPU timed from ``cpu_costs``
    (batch size → costs file) when given."""
    data = yaml.safe_load(SYSTEM.read_text())
    for device in data["devices"]:
        device["batch_sizes"] = list(SLICES)
        if device["name"] == "cpu" and cpu_costs:
            device["costs"] = cpu_costs
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def measure(model: Path, folder: Path, sizes: tuple[int, ...], dims: list[str]) -> dict[int, str]:
    """``annotate --cost measured`` on this CPU at each batch size of ``sizes`` (a fixed-batch model: (1,),
    without ``--batch``); -> batch size → costs file name."""
    costs = {}
    for batch in sizes:
        path = folder / f"{model.stem}_cpu_b{batch}.json"
        batching = ["--batch", str(batch)] if sizes != (1,) else []
        cli_json("annotate", str(model), "--cost", "measured", *dims, *batching, "-o", str(path), "--force")
        costs[batch] = path.name
    return costs


def schedule(model: Path, system: Path, out: Path, limit: float, options: list[str]) -> dict:
    """One `onnxpart schedule --json` run: makespan (or batch makespan), method, LB/UB, ops on the CPU."""
    result = cli_json("schedule", str(model), "--system", str(system), "-o", str(out), "--force", "--time-limit",
                      str(limit), "--json", *options)
    manifest, gap = result["manifest"], result["certificate"]["gap"]
    cpu = next(d for d in manifest["devices"] if d["name"] == "cpu")
    return {"makespan": manifest["makespan"], "method": result["method"], "lb_ub": None if gap is None else 1 - gap,
            "cpu_ops": cpu["ops"], "ops": len({entry["name"] for entry in manifest["ops"]})}


def cases(folder: Path) -> list[tuple[str, Path, list[str], str]]:
    """(name, model, schedule options, objective): latency on the light models and the export, throughput
    on the export (a batch of the largest slice)."""
    gpt = folder / "gpt2_like.onnx"
    onnx.save(tied_lm_head(vocab=512, hidden=256, layers=12), gpt)
    light = [(name, LIGHT / f"light_{name}.onnx", [], "latency") for name in ("squeezenet", "inception_v1", "resnet50")]
    return light + [("gpt2-like (12 layers)", gpt, GPT_DIMS, "latency"),
                    ("gpt2-like (12 layers)", gpt, GPT_DIMS + ["--objective", "throughput", "--batch", str(SLICES[-1])],
                     "throughput")]


def render(rows: list[tuple], limit: float) -> str:
    lines = ["## schedule with a measured CPU beside analytic GPUs\n",
             f"{machine_line()}; command: `python scripts/bench_schedule_measured.py --time-limit {limit:g}`. "
             "**Measured rows** (CPU costs *measured*): the CPU's op times come from `onnxpart annotate --cost "
             "measured` run on this machine's CPU (onnxruntime CPU execution provider; for throughput `--batch B`, "
             f"B = {', '.join(map(str, SLICES))}); the machine was shared by four engineers' test runs (load "
             "average above its 2 cores), so the measured times are inflated and indicative. The T4 and A100 "
             "are analytic (roofline) in every row: **this machine has no GPU**, so no GPU time is measured. "
             "**Analytic rows**: every device analytic. Latency in ms at batch 1 (sequence 128 for the export); "
             f"throughput in inputs/s for a batch of {SLICES[-1]} over slices of {', '.join(map(str, SLICES))}.\n",
             "| model | objective | ops | CPU costs | result (method) | ops on CPU | LB/UB |",
             "|---|---|---|---|---|---|---|"]
    for name, objective, kind, row in rows:
        shown = (f"{row['makespan'] * 1e3:.3f} ms" if objective == "latency"
                 else f"{SLICES[-1] / row['makespan']:.0f} /s")
        ratio = "-" if row["lb_ub"] is None else f"{row['lb_ub']:.3f}"
        lines.append(f"| {name} | {objective} | {row['ops']} | {kind} | {shown} ({row['method']}) | {row['cpu_ops']} "
                     f"| {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="--time-limit of each schedule run (default 10)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        analytic = system_file(folder, "analytic", None)
        for name, model, options, objective in cases(folder):
            dims = [word for n, word in enumerate(options) if "--dim" in options[max(0, n - 1):n + 1]]
            sizes = SLICES if objective == "throughput" else (1,)
            measured = system_file(folder, f"{model.stem}_{objective}", measure(model, folder, sizes, dims))
            for kind, system in (("measured", measured), ("analytic", analytic)):
                rows.append((name, objective, kind, schedule(model, system, folder / "out", args.time_limit, options)))
                print(*rows[-1], flush=True)
    text = render(rows, args.time_limit)
    print(text)
    if not args.no_write:
        write_section("schedule-measured", text)


if __name__ == "__main__":
    main()
