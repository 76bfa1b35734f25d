"""LLM-sized op graphs for the scale tests (issue 30), as ``costs.json`` files (the README's schema): no
model, no weights, built in well under a second at 20,000 ops.

:func:`random_dag` — ``n`` ops, each reading 1–3 of the ``window`` ops before it and, with probability
``skip``, one op anywhere earlier (residual-like long edges): wide enough that no exact method fits.

Every op has seeded ``work`` (seconds on the primary device), ``flops`` and ``mem_bytes`` (so multi-device
strategies can cost it on other specs) and one output tensor of seeded ``bytes`` read by its successors;
the last op's output is the graph output. :func:`write` saves one as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SCALE_OPS = 20_000  # the size


def random_dag(n: int = SCALE_OPS, seed: int = 0, window: int = 50, skip: float = 0.05) -> dict:
    """``n`` ops, op ``v`` reading 1–3 distinct ops among the ``window`` before it and, with probability
    ``skip``, one op anywhere before it."""
    rng = np.random.default_rng(seed)
    reads = []
    for v in range(n):
        if v == 0:
            reads.append([])
            continue
        low = max(0, v - window)
        picks = set(rng.integers(low, v, size=int(rng.integers(1, 4))).tolist())
        if v > 1 and rng.random() < skip:
            picks.add(int(rng.integers(0, v)))
        reads.append(sorted(picks))
    return _costs(f"random_dag_{n}", reads, seed)


def _costs(name: str, reads: list[list[int]], seed: int) -> dict:
    """The costs.json of ops ``0..n-1`` where op ``v`` reads the outputs of ``reads[v]``."""
    rng = np.random.default_rng(seed + 1)
    n = len(reads)
    flops = rng.uniform(1e6, 1e9, n)
    out_bytes = rng.integers(1 << 10, 1 << 22, n)
    consumers: list[list[int]] = [[] for _ in range(n)]
    for v, preds in enumerate(reads):
        for u in preds:
            consumers[u].append(v)
    op_names = [f"op{v}" for v in range(n)]
    ops = [{"name": op_names[v], "op_type": "MatMul", "work": float(flops[v] / 1e14 + 1e-6),
            "flops": float(flops[v]), "mem_bytes": float(out_bytes[v] * 2),
            "inputs": [f"t{u}" for u in reads[v]] or ["x"], "outputs": [f"t{v}"]} for v in range(n)]
    tensors = [{"name": "x", "dtype": "float32", "shape": [256], "bytes": 1024, "producer": None,
                "consumers": [op_names[v] for v in range(n) if not reads[v]]}]
    tensors += [{"name": f"t{v}", "dtype": "float32", "shape": [int(out_bytes[v]) // 4],
                 "bytes": int(out_bytes[v]) // 4 * 4, "producer": op_names[v],
                 "consumers": [op_names[c] for c in consumers[v]]} for v in range(n)]
    return {"schema": "onnxpart.costs/1", "graph": name, "cost_model": "analytic", "device": "a100",
            "bandwidth": 300e9, "inputs": ["x"], "outputs": [f"t{n - 1}"], "ops": ops, "tensors": tensors}


def write(data: dict, path: Path) -> Path:
    """Save a graph of this module as JSON at ``path``; -> ``path``."""
    path.write_text(json.dumps(data))
    return path
