"""Benchmark ``onnxpart plan`` (issue 41) on synthetic transformer exports (``scripts/make_llama70b.py``
presets, fp16, weights never read) on clusters of A100-80GB nodes (NVLink 300 GB/s inside a node, 25 GB/s and
5 µs between nodes): every method's plan under the same cost model, the plan's shape, its proven bound and
gap, the seconds and the peak RSS of the whole command (a fresh process, ``tests/measured_run.py``).

    .venv/bin/python scripts/bench_plan.py                       # writes the "plan" section of BENCHMARKS.md
    .venv/bin/python scripts/bench_plan.py --time-limit 60 --print
    .venv/bin/python scripts/bench_plan.py --models llama-7b --clusters 2x8 --objectives latency --print
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
from bench_common import machine_line, publish  # noqa: E402
from make_llama70b import PRESETS, build, static_dims  # noqa: E402
from tests.measured_run import run_measured  # noqa: E402

MODELS = ("gpt2-medium", "llama-7b", "llama-13b", "llama-70b", "llama-7b-decode")
CLUSTERS = ("1x8", "2x8", "4x8")
OBJECTIVES = ("latency", "throughput")
SEQUENCE, PAST, BATCH = 2048, 2048, 64
METHODS = ("pipeline", "tensor-parallel", "megatron", "data-parallel")


def model_files(folder: Path, names) -> dict[str, tuple[Path, dict]]:
    """name -> (model.onnx, its --dim values): prefill at SEQUENCE, ``-decode``: one token after PAST."""
    out = {}
    for name in names:
        preset, decode = name.removesuffix("-decode"), name.endswith("-decode")
        build(folder / name, PRESETS[preset], decode=decode)
        dims = static_dims(PRESETS[preset], 1 if decode else SEQUENCE, PAST if decode else None)
        out[name] = (folder / name / "model.onnx", dims)
    return out


def run_row(model: Path, dims: dict, cluster: str, objective: str, limit: float, work: Path) -> dict:
    args = ["plan", model, "--cluster", f"{cluster}:a100", "--objective", objective, "--time-limit", limit,
            "--json", "-o", work / "out", "--force"]
    for key, value in dims.items():
        args += ["--dim", f"{key}={value}"]
    if objective == "throughput":
        args += ["--batch", BATCH]
    start = time.monotonic()
    done, rss = run_measured(*args, cwd=work, timeout=limit * 3 + 300)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 4):
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1], "seconds": seconds, "rss": rss}
    if done.returncode == 4:
        return {"error": "no plan fits: " + done.stderr.strip().splitlines()[-1], "seconds": seconds, "rss": rss}
    return {**json.loads(done.stdout), "seconds": seconds, "rss": rss}


def _ms(value) -> str:
    return "does not fit" if value is None else f"{value * 1e3:.2f}"


def table_row(name: str, cluster: str, objective: str, row: dict) -> str:
    if "error" in row:
        return f"| {name} | {cluster} | {objective} | {row['error']} |" + " |" * 11
    cert = row["certificate"]
    results = {r["method"]: r for r in cert["details"]["results"]}
    bound = max((b["value"] for b in cert["lower_bounds"] if b["value"] is not None), default=None)
    gap = "—" if bound is None else f"{max(0.0, 1 - bound / cert['upper_bound']) * 100:.1f}%"
    best = min((results[m]["value"] for m in METHODS if results.get(m, {}).get("value") is not None), default=None)
    gain = "—" if best is None else f"{(1 - cert['upper_bound'] / best) * 100:.1f}%"
    cells = [_ms(row.get("one_device"))] + [_ms(results.get(m, {}).get("value")) for m in METHODS]
    shape = results[cert["details"]["method"]]["shape"]
    held = max(stage["memory"]["total"] for stage in row["manifest"]["stages"])
    return (f"| {name} | {cluster} | {objective} | " + " | ".join(cells) + f" | **{_ms(cert['upper_bound'])}** | "
            f"{shape} | {held / 2**30:.1f} GiB | {_ms(bound)} | {gap} | {gain} | {row['seconds']:.1f} | "
            f"{row['rss'] / 2**20:.0f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--print", action="store_true", help="print the table instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(Path(tmp), args.models.split(","))
        for name, (model, dims) in files.items():
            for cluster in args.clusters.split(","):
                for objective in args.objectives.split(","):
                    row = run_row(model, dims, cluster, objective, args.time_limit, Path(tmp) / "work")
                    lines.append(table_row(name, cluster, objective, row))
                    print(lines[-1], flush=True)
    header = ("| model | cluster | objective | one device (ms) | pipeline | tensor parallel | Megatron | data parallel "
              "| **plan** | plan's shape | most memory a device holds | proven bound | gap | vs best baseline | seconds "
              "| peak RSS |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    text = (f"{machine_line()}\n\n`scripts/bench_plan.py --time-limit {args.time_limit:g}`: prefill at sequence "
            f"{SEQUENCE}, batch 1 (decode: one token after {PAST} cached); throughput: {BATCH} inputs. Times in ms "
            "(latency: one input; throughput: the whole batch). A100-80GB nodes, NVLink 300 GB/s inside a node, "
            "25 GB/s and 5 µs between nodes.\n\n" + header + "\n" + "\n".join(lines) + "\n")
    publish("plan", text, args.print)


if __name__ == "__main__":
    main()
