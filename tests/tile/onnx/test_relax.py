"""Tile's split bound (:mod:`onnxpart.tile.onnx.relax`): a relaxation, so never above the optimum a brute force
finds, and every plan of the instance is a plan of the split one at the same step time."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxpart.loading import load_costed
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.exact import brute_force
from onnxpart.tile.onnx.relax import split, split_bound


@pytest.fixture(scope="module")
def fan_out(tmp_path_factory):
    """x read by three ops (a tensor three groups share), their results summed and multiplied."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["x"], ["b"], name="sig"),
             helper.make_node("Tanh", ["x"], ["c"], name="tanh"), helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "c"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "fan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 512])])
    path = tmp_path_factory.mktemp("fan") / "fan.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_costed(path, device="a100").graph


@pytest.mark.parametrize("devices", [2, 4])
def test_split_bound_below_the_brute_force_optimum(fan_out, devices):
    inst = build_layout_instance(fan_out, devices)
    optimum, _ = brute_force(inst)
    for groups in ([[i] for i in range(len(inst.ops))], [[0, 3], [1], [2, 4]], [list(range(len(inst.ops)))]):
        bound = split_bound(inst, groups, time.monotonic() + 30)
        assert bound is not None and bound.value <= optimum * (1 + 1e-12)


def test_a_plan_keeps_its_step_time_in_the_split_instance(fan_out):
    """Each copy in its original's layout prices every op as before: the split instance holds every plan."""
    inst = build_layout_instance(fan_out, 4)
    relaxed = split(inst, [[i] for i in range(len(inst.ops))])
    assert len(relaxed.tensors) == len(inst.tensors) + 2  # x, read by three ops, gets a copy for two of them
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = {t.name: t.domain[rng.integers(len(t.domain))] for t in inst.tensors}
        copies = {t.name: x[t.name.rsplit("@", 1)[0]] for t in relaxed.tensors if t.name not in x}
        assert relaxed.cost({**x, **copies}) == pytest.approx(inst.cost(x), rel=1e-12)
