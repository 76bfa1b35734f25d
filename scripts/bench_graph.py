"""Loading speed: ONNX file -> shape inference -> OpGraph (and costing), on the onnx wheel's light models.

Writes the ``graph`` section of BENCHMARKS.md. Run: ``.venv/bin/python scripts/bench_graph.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine_line, write_section  # noqa: E402

from onnxpart.cost_models import analytic_costs, load_device  # noqa: E402
from onnxpart.graph import from_onnx  # noqa: E402
from onnxpart.onnx_io import load_graph, read_model  # noqa: E402

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
REPEATS = 7


def best_of(fn):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    device = load_device("a100")
    rows = []
    for path in sorted(LIGHT.glob("light_*.onnx")):
        loaded = read_model(path)
        graph = from_onnx(loaded.model, loaded.sha256, types=loaded.types)
        load = best_of(lambda: read_model(path))
        build = best_of(lambda: from_onnx(loaded.model, loaded.sha256, types=loaded.types))
        total = best_of(lambda: load_graph(path))
        cost = best_of(lambda: analytic_costs(graph, device))
        rows.append((path.stem[len("light_"):], len(loaded.model.graph.node), len(graph.ops), load, build, total, cost))
        print(rows[-1])
    lines = [
        "## Loading: ONNX file → OpGraph",
        "",
        f"Machine: {machine_line()}. Command: `.venv/bin/python scripts/bench_graph.py` (median of {REPEATS}).",
        "`read+infer` = parse, checks, ONNX shape inference; `build` = OpGraph from the inferred model; "
        "`total` = both (`load_graph`); `cost` = analytic roofline on a100.",
        "",
        "| model | ONNX nodes | ops | read+infer (ms) | build (ms) | total (ms) | cost (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, nodes, ops, load, build, total, cost in rows:
        lines.append(f"| {name} | {nodes} | {ops} | {load * 1e3:.1f} | {build * 1e3:.1f} | {total * 1e3:.1f} | {cost * 1e3:.1f} |")
    write_section("graph", "\n".join(lines))


if __name__ == "__main__":
    main()
