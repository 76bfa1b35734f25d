"""remat.onnx rewires reads inside If/Loop/Scan bodies: an outer-scope tensor read by a body is read from
its live (recomputed) copy, like any other input, so the file's memory is the one the plan simulated."""

from __future__ import annotations

import numpy as np
import onnx

from onnxpart.onnx_io import load_graph
from onnxpart.remat.emit import build_remat_model
from onnxpart.remat.model import build_instance
from onnxpart.remat.sequence import simulate
from onnxpart.runtime import make_session, random_inputs, run
from tests.conftest import FIXTURES


def _body_reads(model: onnx.ModelProto, op_type: str) -> set[str]:
    node = next(n for n in model.graph.node if n.op_type == op_type)
    return {value for attr in node.attribute if attr.type == onnx.AttributeProto.GRAPH
            for inner in attr.g.node for value in inner.input}


def test_if_bodies_read_the_recomputed_copy_and_outputs_match():
    graph, loaded = load_graph(FIXTURES / "if_model.onnx")
    instance = build_instance(graph)
    order = list(instance.op_order())
    producer = next(i for i, op in enumerate(graph.ops) if "h" in op.outputs)
    branch = next(i for i, op in enumerate(graph.ops) if op.op_type == "If")
    sequence = order[:order.index(branch)] + [producer] + order[order.index(branch):]  # recompute h right before If
    profile = simulate(instance, sequence)
    assert profile.recomputations == 1

    remat = build_remat_model(loaded.model, graph, profile, budget=int(profile.peak))

    reads = _body_reads(remat, "If")
    assert "h__r1" in reads and "h" not in reads  # both branches read the live copy
    assert _body_reads(loaded.model, "If") >= {"h"}  # the input model is untouched
    feeds = random_inputs(make_session(loaded.model), seed=0)
    feeds["flag"] = np.array(True)
    expected, actual = run(loaded.model, feeds), run(remat, feeds)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-6)
