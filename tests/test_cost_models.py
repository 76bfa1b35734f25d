"""FLOP formulas against hand-computed values, roofline timing, device specs, measured costs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxpart.cost_models import analytic_costs, builtin_devices, load_device
from onnxpart.cost_models.measured import Profiling, measured_costs
from onnxpart.errors import UserError
from onnxpart.onnx_graph import from_onnx
from onnxpart.onnx_io import load_graph, prepare
from tests.conftest import light


def one_node_graph(op_type, inputs, weights, output_shape, **attrs):
    """A model with a single ``op_type`` node; ``inputs`` are (name, shape) graph inputs, ``weights``
    name -> array initializers."""
    node = helper.make_node(op_type, [n for n, _ in inputs] + list(weights), ["y"], name="node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [numpy_helper.from_array(np.zeros(v, np.float32) if isinstance(v, tuple) else v, k) for k, v in weights.items()])
    return from_onnx(prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {}))


def flops_of(graph):
    return analytic_costs(graph, load_device("a100")).ops[0].flops


def test_conv_flops():
    # 1x3x32x32 -> 16 channels, 3x3, pad 1: 2 * (16*32*32) * (3*3*3) + bias 16*32*32
    g = one_node_graph("Conv", [("x", [1, 3, 32, 32])], {"w": (16, 3, 3, 3), "b": (16,)}, None, pads=[1, 1, 1, 1])
    assert flops_of(g) == 2 * 16 * 32 * 32 * 27 + 16 * 32 * 32


def test_grouped_dilated_strided_conv_flops():
    # depthwise-ish: 8 groups, 16->16 channels, 3x3, dilation 2, stride 2, no pad: out 16x8x8... (20-4-1)//2+1 = 8
    g = one_node_graph("Conv", [("x", [2, 16, 20, 20])], {"w": (16, 2, 3, 3)}, None, group=8,
                       dilations=[2, 2], strides=[2, 2])
    out = 2 * 16 * 8 * 8
    assert flops_of(g) == 2 * out * 2 * 9


def test_conv_transpose_flops():
    # each of 1*4*5*5 inputs scatters into Cout/group * k*k = 6*2*2 outputs
    g = one_node_graph("ConvTranspose", [("x", [1, 4, 5, 5])], {"w": (4, 6, 2, 2)}, None, strides=[2, 2])
    assert flops_of(g) == 2 * 4 * 25 * 6 * 4


def test_batched_matmul_flops():
    g = one_node_graph("MatMul", [("a", [2, 3, 4, 5]), ("b", [2, 3, 5, 7])], {}, None)
    assert flops_of(g) == 2 * 2 * 3 * 4 * 7 * 5


def test_broadcast_matmul_flops():
    g = one_node_graph("MatMul", [("a", [8, 16, 32])], {"w": (32, 10)}, None)
    assert flops_of(g) == 2 * 8 * 16 * 10 * 32


@pytest.mark.parametrize("trans_a", [0, 1])
def test_gemm_flops_with_transposes(trans_a):
    a_shape = [6, 4] if trans_a else [4, 6]  # M=4, K=6
    g = one_node_graph("Gemm", [("a", a_shape)], {"b": (5, 6), "c": (5,)}, None, transA=trans_a, transB=1)
    assert flops_of(g) == 2 * 4 * 5 * 6 + 4 * 5


def test_elementwise_broadcast_flops_count_output_elements():
    g = one_node_graph("Add", [("a", [4, 1, 8]), ("b", [1, 3, 8])], {}, None)
    assert flops_of(g) == 4 * 3 * 8


def test_pool_softmax_layernorm_reduce_flops():
    pool = one_node_graph("MaxPool", [("x", [1, 2, 8, 8])], {}, None, kernel_shape=[2, 2], strides=[2, 2])
    assert flops_of(pool) == 2 * 4 * 4 * 4
    soft = one_node_graph("Softmax", [("x", [2, 10])], {}, None, axis=-1)
    assert flops_of(soft) == 5 * 20
    ln = one_node_graph("LayerNormalization", [("x", [2, 3, 8])], {"g": (8,), "b": (8,)}, None, axis=-1)
    assert flops_of(ln) == 8 * 48
    red = one_node_graph("ReduceMean", [("x", [4, 6])], {}, None, axes=[1])
    assert flops_of(red) == 24


def test_memory_moves_have_zero_flops_and_move_bytes():
    g = one_node_graph("Transpose", [("x", [4, 8])], {}, None, perm=[1, 0])
    costed = analytic_costs(g, load_device("a100"))
    assert costed.ops[0].flops == 0
    assert costed.ops[0].mem_bytes == 2 * 4 * 8 * 4


def test_roofline_time_and_overhead():
    device = load_device("a100")
    g = one_node_graph("MatMul", [("a", [512, 512]), ("b", [512, 512])], {}, None)
    op = analytic_costs(g, device).ops[0]
    compute = 2 * 512**3 / device.peak_flops["float32"]
    memory = 3 * 512 * 512 * 4 / device.memory_bandwidth
    assert op.work == pytest.approx(max(compute, memory) + device.op_overhead)


def test_unknown_op_warns_and_uses_bytes(caplog):
    g = one_node_graph("Hardmax", [("x", [4, 8])], {}, None)  # has a formula
    assert flops_of(g) == 5 * 32
    g = one_node_graph("Det", [("x", [4, 8, 8])], {}, None)
    with caplog.at_level("WARNING"):
        costed = analytic_costs(g, load_device("t4"))
    assert "Det" in caplog.text
    assert costed.ops[0].flops == 0 and costed.ops[0].work > 0


def test_resnet50_total_flops():
    graph, _ = load_graph(light("resnet50"))
    total = sum(op.flops for op in analytic_costs(graph, load_device("a100")).ops)
    assert 7.7e9 < total < 8.5e9  # ~4.1 GMAC for ResNet-50 at 224x224


def test_devices():
    assert {"cpu", "t4", "a100", "h100"} <= set(builtin_devices())
    a100, h100 = load_device("a100"), load_device("h100")
    assert h100.peak_flops["float16"] > a100.peak_flops["float16"] > load_device("t4").peak_flops["float16"]
    assert a100.peak_for("float8e4m3fn") == a100.peak_flops["int8"]
    with pytest.raises(UserError, match="unknown device 'tpu9'"):
        load_device("tpu9")


def test_device_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\npeak_flops: {float32: 1.0e12}\nmemory_bandwidth: 1.0e11\n"
                    "memory_capacity: 1.0e9\nop_overhead: 0\ninterconnect_bandwidth: 1.0e9\n")
    spec = load_device(str(path))
    assert spec.name == "mine" and spec.peak_for("float16") == 1e12
    path.write_text("name: broken\npeak_flops: {float32: 1.0e12}\n")
    with pytest.raises(UserError, match="memory_bandwidth: missing"):
        load_device(str(path))


def test_measured_costs_on_squeezenet():
    graph, loaded = load_graph(light("squeezenet"))
    result = measured_costs(graph, loaded, Profiling(runs=3, warmup=1))
    works = [op.work for op in result.graph.ops]
    assert all(w >= 0 for w in works)
    convs = [op.work for op in result.graph.ops if op.op_type == "Conv"]
    assert min(convs) > 0  # every Conv kernel was timed
    assert result.graph.cost_model == "measured"
    # the profiled kernels are most of the end-to-end time; the ops are scaled to sum to it exactly
    assert 0 < result.kernel_total <= result.end_to_end * 1.5
    assert math.isclose(result.end_to_end, sum(works))


def test_measured_costs_charge_each_op_the_weight_generators_it_owns(monkeypatch):
    """The profile's mode runs a light model's ConstantOfShape weights on every call, and every emitted file
    carries them with the op that owns the weight: each profiled kernel (here timed 1 ms apiece) is charged."""
    import contextlib

    from onnxpart import runtime

    real = runtime.profiling_session

    @contextlib.contextmanager
    def one_ms_kernels(*args, **kwargs):
        with real(*args, **kwargs) as (session, events):
            yield session, lambda: [{**e, "dur": 1000} for e in events()]

    monkeypatch.setattr(runtime, "profiling_session", one_ms_kernels)
    graph, loaded = load_graph(light("squeezenet"))
    assert any(op.const_nodes for op in graph.ops)
    result = measured_costs(graph, loaded, Profiling(runs=2, warmup=1, threads=1))
    scale = result.end_to_end / result.kernel_total  # the ops sum to the run with the profiler off
    for op in result.graph.ops:
        assert op.work == pytest.approx(scale * 1e-3 * (len(op.onnx_nodes) + len(op.const_nodes))), op.name
    assert result.kernel_total == pytest.approx(1e-3 * sum(len(op.onnx_nodes) + len(op.const_nodes)
                                                           for op in graph.ops))


def test_cost_table_has_one_column_per_device_and_the_single_device_case_is_its_first():
    from onnxpart.cost_models import device_costs

    graph, _ = load_graph(light("squeezenet"))
    a100, t4 = analytic_costs(graph, load_device("a100")), analytic_costs(graph, load_device("t4"))
    assert a100.costs.devices == ("a100",) and a100.costs.work[:, 0].tolist() == [op.work for op in a100.ops]
    table = device_costs(graph, {"gpu0": load_device("a100"), "gpu1": load_device("t4")})
    assert table.costs.devices == ("gpu0", "gpu1") and table.device == "gpu0"
    assert table.costs.column("gpu0").tolist() == [op.work for op in a100.ops] == [op.work for op in table.ops]
    assert table.costs.column("gpu1").tolist() == [op.work for op in t4.ops]
    assert table.costs.bandwidth("gpu1", "gpu1") == load_device("t4").interconnect_bandwidth
    assert table.costs.bandwidth("gpu0", "gpu1") is None  # no link given: no direct transfer
