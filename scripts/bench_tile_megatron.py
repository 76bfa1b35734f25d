"""``onnxpart tile`` against the Megatron-LM layout: the ``tile-megatron`` part of the ``tile-onnx`` section of
BENCHMARKS.md, run from ``scripts/bench_tile.py`` (``--onnx``, ``--onnx-only``).

One transformer block each of GPT-2 medium (hidden 1024, 16 heads, MLP 4096, 1024 tokens, batch 4) and
Llama 7B (hidden 4096, 32 heads, SwiGLU 11008, 2048 tokens, batch 2), fp16, built by
``scripts/make_tp_blocks.py`` with sparse zero weights (nothing is read), costed on an A100 with its NVLink
on every mesh axis. Per mesh (2, 4, 8, 2x4): the one-device step time, the Megatron-LM layout
(:mod:`tests.tile.onnx.megatron`: tensor parallel over the whole 1-D mesh; on 2x4 data parallel over x and tensor
parallel over y) priced by the same model, and ``exact`` (every method, ``--time-limit``): its step time,
status, proven bound and speed-up over one device. Then the targets, judged from the rows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tp_blocks  # noqa: E402

from onnxpart.loading import load_costed  # noqa: E402
from onnxpart.onnx_constants import small_constants  # noqa: E402
from onnxpart.tile.onnx.build import build_layout_instance  # noqa: E402
from onnxpart.tile.onnx import LayoutOptions, solve  # noqa: E402
from tests.tile.onnx.megatron import megatron_plan  # noqa: E402

MESHES = ((2,), (4,), (8,), (2, 4))
BATCH = {"gpt2-medium": 4, "llama-7b": 2}
TARGET_1D_S, TARGET_2D_S, TARGET_2D_GAP = 10.0, 60.0, 0.01


def rows(time_limit: float, workers: int, meshes=MESHES, shapes=None) -> list[dict]:
    """One row per (block, mesh): module docstring."""
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_tile_megatron_") as tmp:
        for name, (kind, hidden, heads, ffn, seq) in (shapes or make_tp_blocks.SHAPES).items():
            path = make_tp_blocks.build(Path(tmp) / name / "block.onnx", kind, hidden, heads, ffn, seq, BATCH[name])
            loaded = load_costed(path, cost="analytic", device="a100")
            for mesh in meshes:
                inst = build_layout_instance(loaded.graph, mesh, constants=small_constants(loaded.model.model))
                megatron = inst.plan_cost(megatron_plan(inst, dp=0 if len(mesh) > 1 else None))
                start = time.perf_counter()
                sol = solve(inst, LayoutOptions(time_limit=time_limit, workers=workers))
                exact = next(r for r in sol.results if r.method == "exact")
                row = {"model": name, "batch": BATCH[name], "mesh": "x".join(map(str, mesh)), "tensors": len(inst.tensors),
                       "one_device": inst.one_device, "megatron": megatron, "exact": exact.value, "status": exact.status,
                       "bound": sol.best_lower_bound, "seconds": time.perf_counter() - start,
                       "replicated": sol.replicated}
                out.append(row)
                print(f"{name} {row['mesh']}: one {row['one_device'] * 1e6:.1f} µs, Megatron {megatron * 1e6:.1f}, "
                      f"exact {exact.value * 1e6:.1f} ({exact.status}, {row['seconds']:.1f} s)", flush=True)
    return out


def _gap(row: dict) -> float:
    return max(row["exact"] - row["bound"], 0.0) / row["exact"]


def verdicts(rows: list[dict]) -> list[tuple[str, bool, str]]:
    one_d = [r for r in rows if "x" not in r["mesh"]]
    two_d = [r for r in rows if "x" in r["mesh"]]
    slow = [f"{r['model']}@{r['mesh']} ({r['status']}, {r['seconds']:.1f} s)" for r in one_d
            if r["status"] != "optimal" or r["seconds"] > TARGET_1D_S]
    wide = [f"{r['model']}@{r['mesh']} (gap {_gap(r):.2%}, {r['seconds']:.1f} s)" for r in two_d
            if _gap(r) > TARGET_2D_GAP or r["seconds"] > TARGET_2D_S]
    worse = [f"{r['model']}@{r['mesh']}" for r in rows if r["exact"] > r["megatron"] * (1 + 1e-12)]
    return [(f"every 1-D row proven optimal in ≤ {TARGET_1D_S:g} s", bool(one_d) and not slow,
             f"{len(one_d) - len(slow)}/{len(one_d)} rows" + (f"; not: {', '.join(slow)}" if slow else "")),
            (f"every 2x4 row within a {TARGET_2D_GAP:.0%} gap in {TARGET_2D_S:g} s", bool(two_d) and not wide,
             f"{len(two_d) - len(wide)}/{len(two_d)} rows" + (f"; not: {', '.join(wide)}" if wide else "")),
            ("exact ≤ Megatron on every row", not worse,
             f"{len(rows) - len(worse)}/{len(rows)} rows" + (f"; slower: {', '.join(worse)}" if worse else ""))]


def markdown(rows: list[dict], time_limit: float) -> str:
    lines = ["### Against the Megatron-LM layout (one fp16 transformer block, A100 NVLink)", "",
             "Blocks from `scripts/make_tp_blocks.py` (sparse weights, nothing read): GPT-2 medium (hidden 1024, "
             "16 heads, MLP 4096, 1024 tokens) and Llama 7B (hidden 4096, 32 heads, SwiGLU 11008, 2048 tokens). "
             "Megatron: column-parallel Q/K/V and first MLP matmul(s), row-parallel output projection and second "
             "MLP matmul with one all-reduce each (`tests/tile/onnx/megatron.py`); on 2x4 data parallel over x, tensor "
             f"parallel over y. Exact: every method, {time_limit:g} s. Step times in µs under one cost model: "
             "launch overhead on every device, shard rooflines, reshardings by the index sets they move, final "
             "gathers of the outputs.", "",
             "| model | batch | mesh | tensors | one device µs | Megatron µs | exact µs | status | proven ≥ µs | "
             "speed-up | exact vs Megatron | t exact s |",
             "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['mesh']} | {r['tensors']} | {r['one_device'] * 1e6:.1f} | "
                     f"{r['megatron'] * 1e6:.1f} | {r['exact'] * 1e6:.1f} | {r['status']} | {r['bound'] * 1e6:.1f} | "
                     f"×{r['one_device'] / r['exact']:.2f} | {r['exact'] / r['megatron'] - 1:+.1%} | "
                     f"{r['seconds']:.1f} |")
    lines += ["", "| target | verdict | detail |", "|---|---|---|"]
    lines += [f"| {t} | {'MET' if ok else '**NOT MET**'} | {d} |" for t, ok, d in verdicts(rows)]
    return "\n".join(lines)
