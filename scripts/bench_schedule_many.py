"""Benchmark `onnxpart schedule` on a system with many devices and write the "schedule-many" section of
BENCHMARKS.md: the shipped fixtures/systems/multinode_6x4.yaml (6 nodes × 4 A100s, NVLink inside a node,
100 Gbit/s between nodes; the thesis's Section 5.2 platform), the onnx wheel's light models and the
bundled transformer block, analytic costs, latency and throughput (batch 128 over slices of 1–32).

Each row is one `solve` with every method sharing the wall clock (`--time-limit`, as the command runs),
its wall time beside the limit, each method's answer (throughput in inputs/s, latency in ms), the proven
bound and LB/UB; the named baselines are in the same run: plain data parallelism (one split for every op,
the thesis's Section 5.1 naive baseline) for throughput, HEFT for latency.

    python scripts/bench_schedule_many.py                      # writes BENCHMARKS.md
    python scripts/bench_schedule_many.py --time-limit 5 --no-write
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402

from bench_common import ROOT, machine_line, write_section  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's onnxpart, not an installed one

from onnxpart.onnx_io import load_graph  # noqa: E402
from onnxpart.schedule import Options, from_graph, load_system, solve  # noqa: E402
from onnxpart.schedule.throughput import heuristics, model  # noqa: E402

SYSTEM = ROOT / "fixtures" / "systems" / "multinode_6x4.yaml"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = {"transformer block": ROOT / "fixtures" / "transformer_block.onnx",
          "squeezenet": LIGHT / "light_squeezenet.onnx", "inception_v1": LIGHT / "light_inception_v1.onnx",
          "resnet50": LIGHT / "light_resnet50.onnx"}
METHODS = ("met", "greedy", "heft", "sa", "ea", "cpsat")


def run(inst, objective: str, batch: int, limit: float) -> dict:
    t0 = time.perf_counter()
    sol = solve(inst, Options(methods=METHODS, objective=objective, batch=batch, time_limit=limit, workers=1))
    row = {"wall": time.perf_counter() - t0, "methods": {r.method: (r.value, r.status) for r in sol.results}}
    proven = [(lb.value, lb.method) for lb in sol.lower_bounds if lb.value is not None and math.isfinite(lb.value)]
    row["bound"], row["bound_by"] = max(proven)
    row["best"] = sol.makespan
    if objective == "throughput":
        row["family"] = len(model.split_family(inst, batch).splits)
        dp = heuristics.uniform(inst, batch).schedule
        row["methods"]["data parallel"] = (dp.makespan if dp else None, "ok" if dp else "failed")
    return row


def cell(value, status: str, objective: str, batch: int) -> str:
    if value is None:
        return "— (" + status + ")"
    return f"{value * 1e3:.3f}" if objective == "latency" else f"{batch / value:,.0f}"


def table(rows: dict, objective: str, batch: int, limit: float) -> str:
    names = METHODS + (("data parallel",) if objective == "throughput" else ())
    head = ["model", "ops"] + list(names) + ["bound", "LB/UB", f"wall s (limit {limit:g})"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, (n, r) in rows.items():
        vals = [cell(*r["methods"].get(m, (None, "not run")), objective, batch) for m in names]
        bound = cell(r["bound"], "", objective, batch)
        out.append(f"| {name} | {n} | " + " | ".join(vals) + f" | {bound} ({r['bound_by']}) | "
                   f"{r['bound'] / r['best']:.3f} | {r['wall']:.1f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per solve (default 10)")
    ap.add_argument("--batch", type=int, default=128, help="throughput batch (default 128)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    system = load_system(str(SYSTEM))
    results: dict = {"latency": {}, "throughput": {}}
    for name, path in MODELS.items():
        inst = from_graph(load_graph(path, coarsen=True)[0], system)
        for objective in results:
            results[objective][name] = (inst.n, run(inst, objective, args.batch, args.time_limit))
            print(name, objective, results[objective][name][1], flush=True)
    families = {name: r["family"] for name, (_, r) in results["throughput"].items()}
    md = "\n".join([
        "## schedule on many devices (6 nodes × 4 A100s, analytic costs)", "",
        f"Machine: {machine_line()}. Command: `python scripts/bench_schedule_many.py --time-limit "
        f"{args.time_limit:g} --batch {args.batch}` (one `solve` per row, every method sharing the limit; "
        "wall s is the whole solve).", "",
        f"**Throughput** (inputs/s, batch {args.batch}; the splits each op chooses from: "
        + ", ".join(f"{n} {c}" for n, c in families.items()) + ", cut at MAX_SPLITS then the even splits; "
        "a split of 128 over 24 devices of sizes 1–32 has about 10^15 choices, which the command used to "
        "build whole and hung):", "",
        table(results["throughput"], "throughput", args.batch, args.time_limit), "",
        "**Latency** (ms, one input):", "",
        table(results["latency"], "latency", args.batch, args.time_limit), "",
        "A list baseline whose share of the run (half of it, among the three) ends returns no schedule "
        "(time_limit); CP-SAT reports time_limit with no bound when its batch model (K² slice pairs per "
        "edge) is not built in time.",
    ])
    print(md)
    if not args.no_write:
        write_section("schedule-many", md)


if __name__ == "__main__":
    main()
