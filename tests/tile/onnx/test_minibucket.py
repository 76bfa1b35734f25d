"""Mini-bucket elimination (:mod:`onnxpart.tile.onnx.minibucket`): the exact optimum where no bucket is split, a
bound below the brute force's optimum where buckets are split, and kept variables' tables equal to the optimum
given their layouts (which also checks that the dominance reductions keep those tensors whole), and the decoded
plan with pinned variables: the brute force's optimum of step time plus λ × bytes where no bucket is split."""

from __future__ import annotations

import dataclasses
import itertools

import onnx
import pytest
from onnx import TensorProto, helper

from onnxpart.loading import load_costed
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.elimination import Network
from onnxpart.tile.onnx.exact import brute_force
from onnxpart.tile.onnx.minibucket import decoded, kept_function, lower_bound
from onnxpart.tile.onnx.reduce import reduce_instance


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """Two MatMuls with a Relu and a residual Add: tensors read twice, algorithms that want different layouts."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="mm2"),
             helper.make_node("Add", ["o", "x"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 512])],
                              [helper.make_tensor("w1", TensorProto.FLOAT, [512, 1024], [0.0] * 512 * 1024),
                               helper.make_tensor("w2", TensorProto.FLOAT, [1024, 512], [0.0] * 512 * 1024)])
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_costed(path, device="a100").graph


@pytest.mark.parametrize("devices", [2, 4])
def test_unsplit_is_the_optimum_and_split_stays_below(mlp, devices):
    inst = build_layout_instance(mlp, devices)
    optimum, _ = brute_force(inst)
    network = Network(inst, reduce_instance(inst))
    exact = lower_bound(network)
    assert exact.splits == 0 and exact.value == pytest.approx(optimum, rel=1e-9)
    split = lower_bound(network, max_table=1)  # every bucket of two or more functions is split
    assert split.splits > 0 and split.value <= optimum * (1 + 1e-12)


@pytest.mark.parametrize("devices", [2, 4])
def test_kept_table_is_the_optimum_given_the_kept_layouts(mlp, devices):
    """Kept ``h`` and ``o``: each entry is the brute force's least step time with them in those layouts —
    a reduction that dropped one of their layouts, or an elimination that minimized them out, fails here."""
    inst = build_layout_instance(mlp, devices)
    kept = ("h", "o")
    network = Network(inst, reduce_instance(inst, keep=frozenset(kept)))
    table, splits = kept_function(network, tuple(inst.index[t] for t in kept))
    domains = [inst.tensor(t).domain for t in kept]
    assert splits == 0 and table.shape == tuple(len(d) for d in domains)
    others = [t for t in inst.tensors if t.name not in kept]
    for index in itertools.product(*(range(len(d)) for d in domains)):
        fixed = {t: d[i] for t, d, i in zip(kept, domains, index)}
        best = min(inst.cost({**fixed, **dict(zip((t.name for t in others), combo))})
                   for combo in itertools.product(*(t.domain for t in others)))
        assert table[index] == pytest.approx(best, rel=1e-9)


def test_an_order_leaves_the_kept_variables_out(mlp):
    inst = build_layout_instance(mlp, 4)
    network = Network(inst, reduce_instance(inst))
    last = frozenset({inst.index["h"], inst.index["r"]})
    order = network.order(float("inf"), last=last)
    assert set(order) == set(range(len(network.sizes))) - last


@pytest.mark.parametrize("per_byte", [0.0, 1e-9, 1e-6])
def test_decoded_plan_is_the_pinned_weighted_optimum(mlp, per_byte):
    """``h`` pinned to each of its layouts, λ on the weights' bytes: the decoded plan keeps the pin and its step
    time + λ × weight bytes is the brute force's least; with every bucket split it keeps the pin and is no
    better than that (a plan, not a bound). A memory bound, however loose, makes the reductions keep the layouts
    that hold fewer bytes (without one they keep the weights replicated only)."""
    inst = dataclasses.replace(build_layout_instance(mlp, 4), memory=2.0**40)
    network = Network(inst, reduce_instance(inst, keep=frozenset({"h"})))
    weights = [inst.index[t] for t in ("w1", "w2")]

    def weighted(layouts: dict) -> float:
        return inst.cost(layouts) + per_byte * sum(inst.tensors[v].per_device(layouts[inst.tensors[v].name],
                                                                                inst.mesh) for v in weights)

    others = [t for t in inst.tensors if t.name != "h"]
    for k, layout in enumerate(inst.tensor("h").domain):
        best = min(weighted({"h": layout, **dict(zip((t.name for t in others), combo))})
                   for combo in itertools.product(*(t.domain for t in others)))
        for max_table, exact in ((10**6, True), (1, False)):
            values, splits = decoded(network, {inst.index["h"]: k}, max_table=max_table,
                                     per_byte=dict.fromkeys(weights, per_byte))
            plan = network.layouts(values)
            assert plan["h"] == layout and (splits == 0) == exact
            assert weighted(plan) == pytest.approx(best, rel=1e-9) if exact else weighted(plan) >= best * (1 - 1e-9)
