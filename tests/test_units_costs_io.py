"""Quantities at the CLI edge, costs.json round trips, coarsening, and the memory simulator."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.coarsen import coarsen
from onnxpart.cost_models import analytic_costs, load_device
from onnxpart.costs_io import graph_from_costs, graph_to_costs
from onnxpart.errors import UserError
from onnxpart.memory import memory_profile
from onnxpart.onnx_io import load_graph
from onnxpart.units import format_bytes, format_seconds, parse_bandwidth, parse_bytes, parse_fraction, parse_percent_or_bytes
from tests.conftest import FIXTURES, light


def test_parse_quantities():
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1.5GB") == 1.5e9
    assert parse_bandwidth("25GB/s") == 25e9
    assert parse_bandwidth("100Gbps") == 100e9 / 8
    assert parse_percent_or_bytes("80%") == ("fraction", 0.8)
    assert parse_percent_or_bytes("24MiB") == ("bytes", 24 * 2**20)
    assert parse_fraction("5%") == pytest.approx(0.05)
    for bad in ("12 parsecs", "MiB", "-3GB"):
        with pytest.raises(UserError):
            parse_bytes(bad)
    with pytest.raises(UserError):
        parse_bandwidth("0GB/s")
    assert format_bytes(1536) == "1.5 KiB" and format_seconds(0.00345) == "3.45 ms"


@given(st.floats(min_value=1, max_value=1e15))
@settings(max_examples=50, deadline=None)
def test_bytes_round_trip(value):
    assert parse_bytes(f"{value!r}") == pytest.approx(value)


def test_costs_round_trip_keeps_everything_strategies_read():
    graph, _ = load_graph(light("inception_v1"))
    costed = analytic_costs(graph, load_device("h100"))
    back = graph_from_costs(json.loads(json.dumps(graph_to_costs(costed))))
    assert [op.name for op in back.ops] == [op.name for op in costed.ops]
    assert [op.work for op in back.ops] == [op.work for op in costed.ops]
    assert sorted(back.edges()) == sorted(costed.edges())
    assert back.bandwidth == costed.bandwidth and back.total_param_bytes == costed.total_param_bytes
    assert memory_profile(back).peak == memory_profile(costed).peak


def test_minimal_hand_written_graph_file_is_read_and_sorted():
    data = {"ops": [{"name": "c", "work": 3}, {"name": "a", "work": 1}, {"name": "b", "work": 2}],
            "tensors": [{"name": "x", "bytes": 10, "producer": None, "consumers": ["a"]},
                        {"name": "ab", "bytes": 4, "producer": "a", "consumers": ["b", "c"]},
                        {"name": "bc", "bytes": 4, "producer": "b", "consumers": ["c"]},
                        {"name": "y", "bytes": 2, "producer": "c", "consumers": []}]}
    graph = graph_from_costs(data)
    assert [op.name for op in graph.ops] == ["a", "b", "c"]
    graph.check()
    assert graph.outputs == ("y",) and graph.inputs == ("x",)
    data["tensors"].append({"name": "loop", "bytes": 1, "producer": "c", "consumers": ["a"]})
    with pytest.raises(UserError, match="cycle"):
        graph_from_costs(data)


def test_memory_profile_by_hand():
    """x(10) -> a -> ab(4) -> b -> bc(4) -> c -> y(2); c also reads ab."""
    data = {"ops": [{"name": "a", "work": 1}, {"name": "b", "work": 1}, {"name": "c", "work": 1}],
            "tensors": [{"name": "x", "bytes": 10, "producer": None, "consumers": ["a"]},
                        {"name": "ab", "bytes": 4, "producer": "a", "consumers": ["b", "c"]},
                        {"name": "bc", "bytes": 4, "producer": "b", "consumers": ["c"]},
                        {"name": "y", "bytes": 2, "producer": "c", "consumers": []}],
            "outputs": ["y"]}
    profile = memory_profile(graph_from_costs(data))
    assert profile.memory == (14.0, 8.0, 10.0)  # a: x+ab; b: ab+bc; c: ab+bc+y
    assert profile.peak == 14.0 and profile.peak_event == 0


def test_coarsen_merges_chains_and_keeps_mapping():
    graph, _ = load_graph(light("resnet50"))
    coarse = coarsen(graph)
    coarse.check()
    assert len(coarse.ops) < len(graph.ops)
    assert sorted(n for op in coarse.ops for n in op.onnx_nodes) == sorted(n for op in graph.ops for n in op.onnx_nodes)
    assert any(op.op_type == "Conv+BatchNormalization+Relu" for op in coarse.ops)
    assert coarse.total_param_bytes == graph.total_param_bytes
    assert set(coarse.outputs) == set(graph.outputs)
    # no tensor that two ops read is hidden inside one op
    for op in coarse.ops:
        for name in op.outputs:
            assert name in coarse.tensors


def test_coarsen_keeps_diamond_branches_and_fuses_bias_adds():
    graph, _ = load_graph(FIXTURES / "diamond.onnx")
    # the first conv's output feeds two branches, and everything else is a Conv or a two-input Add:
    # nothing may merge
    assert [op.op_type for op in coarsen(graph).ops] == [op.op_type for op in graph.ops]
    block, _ = load_graph(FIXTURES / "transformer_block.onnx")
    types = [op.op_type for op in coarsen(block).ops]
    assert types.count("MatMul+Add") == 6  # q, k, v, out, up, down projections with their bias
    assert "Softmax" in types


def test_coarsen_merges_every_elementwise_type_the_cost_model_knows(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnxpart.coarsen import FUSIBLE
    from onnxpart.op_types import ELEMENTWISE_FLOPS

    assert FUSIBLE == set(ELEMENTWISE_FLOPS)  # one table for both
    # MatMul -> Greater(·, 0) -> Where(·, 1, 0) -> Sin: comparison, selection and trigonometry merge too
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    one = numpy_helper.from_array(np.ones((), np.float32), "one")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Greater", ["m", "zero"], ["g"], name="gt"),
             helper.make_node("Where", ["g", "one", "zero"], ["s"], name="where"),
             helper.make_node("Sin", ["s"], ["y"], name="sin")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [zero, one, w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "chain.onnx"))
    coarse = coarsen(load_graph(tmp_path / "chain.onnx")[0])
    assert [op.op_type for op in coarse.ops] == ["MatMul+Greater+Where+Sin"]
