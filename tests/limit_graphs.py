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
    """``n`` ops; op ``v`` reads op ``v − 1`` and, with probability one half, a random one of the
    :data:`SKIP` ops before that (an Add of the two; else a Relu): a residual-like spine with skips, every
    op read by the next."""
    rng = np.random.default_rng(seed)
    nodes = []
    for v in range(n):
        inputs = [f"t{v - 1}"] if v else ["x"]
        if v > 1 and rng.random() < 0.5:
            inputs.append(f"t{int(rng.integers(max(0, v - 1 - SKIP), v - 1))}")
        op = "Add" if len(inputs) == 2 else "Relu"
        nodes.append(helper.make_node(op, inputs, [f"t{v}"], name=f"{op.lower()}{v}"))
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
