"""The three graph shapes of the time-limit property (issue 40), as ONNX models of ``n`` ops, built without
weights worth reading: a chain of Relu, a random DAG of Add/Relu with skips, and a stack of pre-LN
transformer blocks (``scripts/make_fixtures.transformer_block``, 33 ops a block).

Every tensor of the chain and the DAG is float32 64 × 256 (64 KiB), as in the issue's report; the DAG's
edges reach at most 50 ops back.
:func:`build` writes one to a file; the same ``(shape, n)`` always gives the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

SHAPES = ("chain", "dag", "transformer")
TENSOR = [64, 256]
BLOCK_OPS = 33  # ops of one transformer_block layer
SKIP = 50  # the DAG's longest edge, in ops


def chain(n: int) -> onnx.ModelProto:
    """``n`` Relu ops in a row."""
    nodes = [helper.make_node("Relu", ["x" if v == 0 else f"t{v - 1}"], [f"t{v}"], name=f"relu{v}") for v in range(n)]
    return _model(f"chain_{n}", nodes, f"t{n - 1}")


def dag(n: int, seed: int = 0) -> onnx.ModelProto:
    """``n`` ops; op ``v`` reads the oldest op not yet read among the :data:`SKIP` before it (a random one
    of them when all are read) and, with probability one half, one more at random among them: an Add when
    it reads two, a Relu when one. Taking the oldest unread op first leaves exactly one op unread before
    each step, so every op but the last has a consumer and the last is the graph output."""
    rng = np.random.default_rng(seed)
    nodes, unread = [], []
    for v in range(n):
        low = max(0, v - SKIP)
        picks = []
        if v:
            picks.append(unread.pop(0) if unread else int(rng.integers(low, v)))
            if rng.random() < 0.5:
                picks.append(int(rng.integers(low, v)))
        picks = sorted(set(picks))
        unread = [u for u in unread if u not in picks] + [v]
        op = "Add" if len(picks) == 2 else "Relu"
        nodes.append(helper.make_node(op, [f"t{u}" for u in picks] or ["x"], [f"t{v}"], name=f"{op.lower()}{v}"))
    return _model(f"dag_{n}", nodes, f"t{n - 1}")


def transformer(n: int) -> onnx.ModelProto:
    """``round(n / 33)`` pre-LN transformer blocks (d = 32, MLP 128, sequence 64)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from make_fixtures import transformer_block

    return transformer_block(layers=max(1, round(n / BLOCK_OPS)))


def _model(name: str, nodes: list, output: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, TENSOR)],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, TENSOR)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(shape: str, n: int, path: Path) -> Path:
    """Write the ``shape`` graph of about ``n`` ops to ``path``; -> ``path``."""
    model = {"chain": chain, "dag": dag, "transformer": transformer}[shape](n)
    onnx.save(model, path)
    return path
