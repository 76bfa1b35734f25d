"""How well does the analytic roofline model rank ops, against onnxruntime measurements on this machine?

For each light model of the onnx wheel: measured end-to-end time (median of runs), the sum of measured
kernel medians, the analytic total on the built-in ``cpu`` spec, and the Spearman rank correlation between
analytic and measured per-op times. Writes the ``costs`` section of BENCHMARKS.md.
Run: ``.venv/bin/python scripts/bench_costs.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine_line, write_section  # noqa: E402

from onnxpart.cost_models import analytic_costs, load_device  # noqa: E402
from onnxpart.cost_models.measured import Profiling, measured_costs  # noqa: E402
from onnxpart.onnx_io import load_graph  # noqa: E402

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
RUNS = 10


def spearman(a, b) -> float:
    ranks_a = np.argsort(np.argsort(a))
    ranks_b = np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def main() -> None:
    cpu = load_device("cpu")
    rows = []
    for path in sorted(LIGHT.glob("light_*.onnx")):
        graph, loaded = load_graph(path)
        measured = measured_costs(graph, loaded, Profiling(runs=RUNS, warmup=3))
        analytic = analytic_costs(graph, cpu)
        rho = spearman([op.work for op in analytic.ops], [op.work for op in measured.graph.ops])
        rows.append((path.stem[len("light_"):], len(graph.ops), measured.end_to_end, measured.kernel_total,
                     analytic.total_work, rho))
        print(rows[-1])
    lines = [
        "## Cost models: analytic (roofline, `cpu` spec) vs measured (onnxruntime, this machine)",
        "",
        f"Machine: {machine_line()}. Command: `.venv/bin/python scripts/bench_costs.py` "
        f"({RUNS} profiled runs after 3 warm-up runs, CPU execution provider, graph optimizations off).",
        "The `cpu` spec describes a generic 8-core AVX2 machine, not this 2-core VM, so absolute analytic "
        "times differ; the rank correlation says whether the analytic model orders ops like the hardware does.",
        "",
        "| model | ops | measured end-to-end (ms) | measured kernels (ms) | analytic `cpu` (ms) | Spearman ρ per op |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, ops, e2e, kernels, analytic, rho in rows:
        lines.append(f"| {name} | {ops} | {e2e * 1e3:.2f} | {kernels * 1e3:.2f} | {analytic * 1e3:.2f} | {rho:.2f} |")
    write_section("costs", "\n".join(lines))


if __name__ == "__main__":
    main()
