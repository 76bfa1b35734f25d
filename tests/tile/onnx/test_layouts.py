"""The ONNX layout instance and its searches: exact equals brute force on tiny models, bounds are
below it, heuristics above it; memory bounds and pins."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.loading import load_costed
from onnxpart.tile.onnx.catalog import P, R, S
from onnxpart.tile.onnx.build import build_layout_instance, parse_layout, parse_pins
from onnxpart.tile.onnx.emit import reshardings
from onnxpart.tile.onnx import LayoutOptions, solve
from onnxpart.tile.onnx.exact import brute_force, exact
from onnxpart.tile.onnx.heuristics import greedy, local

from tests.tile.onnx.onnx_models import attention_core, mlp


def graph_of(path):
    return load_costed(Path(path), cost="analytic", device="a100").graph


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    return {"mlp": graph_of(mlp(folder / "mlp.onnx")),
            "mlp_wide": graph_of(mlp(folder / "wide.onnx", batch=64, d_in=256, d_hidden=1024, d_out=256)),
            "attn": graph_of(attention_core(folder / "attn.onnx")),
            "mlp_bias": graph_of(mlp(folder / "bias.onnx", batch=256, d_in=512, d_hidden=2048, d_out=512, bias=True))}


CASES = [("mlp", 2, None), ("mlp", 4, None), ("mlp_wide", 4, None), ("mlp_wide", 2, 1e9),
         ("attn", 2, None), ("attn", 4, None), ("mlp_bias", 4, None), ("mlp_bias", 2, 1e10)]


@pytest.mark.parametrize("name,devices,bandwidth", CASES)
def test_exact_equals_brute_force(tiny, name, devices, bandwidth):
    inst = build_layout_instance(tiny[name], devices, bandwidth=bandwidth)
    assert len(inst.tensors) <= 8
    optimum, _ = brute_force(inst)
    layouts, bound = exact(inst, 5.0, greedy(inst))
    assert bound.status == "optimal"
    assert inst.cost(layouts) == pytest.approx(optimum, rel=1e-9)
    assert bound.value <= optimum * (1 + 1e-12)
    assert inst.cost(greedy(inst)) >= optimum * (1 - 1e-12)
    assert inst.cost(local(inst)) >= inst.cost(greedy(inst)) * (1 - 1e-12)


def test_memory_bound_brute_force_and_infeasible(tiny):
    loose = build_layout_instance(tiny["mlp_wide"], 4)
    full = loose.memory_per_device({t.name: R for t in loose.tensors})
    memory = (loose.min_memory() + full) / 2
    inst = build_layout_instance(tiny["mlp_wide"], 4, memory=memory)
    optimum, _ = brute_force(inst)
    sol = solve(inst, LayoutOptions(time_limit=5))
    assert inst.fits(sol.plan.layouts) and sol.cost == pytest.approx(optimum, rel=1e-9)
    with pytest.raises(InfeasibleError, match="smallest memory"):
        build_layout_instance(tiny["mlp_wide"], 4, memory=loose.min_memory() - 1)


def test_domains_reasons_and_replicated_only(tiny):
    inst = build_layout_instance(tiny["mlp"], 3)  # 8, 16, 32: nothing divides by 3
    for t in inst.tensors:
        assert t.domain == (R,)
        assert any("does not divide by 3" in why for _, why in t.excluded)
    assert inst.tensor("h").excluded[-1][0] == "P"
    inst4 = build_layout_instance(tiny["mlp"], 4)
    assert P in inst4.tensor("h").domain and P not in inst4.tensor("y").domain  # y is a graph output
    assert inst4.replicated_only == []


def test_pins(tiny):
    inst = build_layout_instance(tiny["mlp"], 4, pins=parse_pins(["W1=S(0)", "h=R"]))
    assert inst.tensor("W1").domain == (S(0),)
    sol = solve(inst, LayoutOptions(time_limit=2))
    assert sol.plan.layouts["W1"] == S(0) and sol.plan.layouts["h"] == R
    with pytest.raises(UserError, match="does not divide"):
        build_layout_instance(tiny["mlp"], 3, pins={"W1": S(0)})
    with pytest.raises(UserError, match="no tensor"):
        build_layout_instance(tiny["mlp"], 4, pins={"nope": R})
    with pytest.raises(UserError, match="partial"):
        build_layout_instance(tiny["mlp"], 4, pins={"x": P})


def test_parse_layout():
    assert parse_layout("S(1)") == S(1) and parse_layout("s[0]") == S(0) and parse_layout("r") == R
    with pytest.raises(UserError, match="unknown layout"):
        parse_layout("Q(2)")


def test_reshardings_name_both_sides(tiny):
    inst = build_layout_instance(tiny["mlp"], 4, pins={"h": S(0), "r": S(1)})
    sol = solve(inst, LayoutOptions(methods=("greedy",)))
    records = reshardings(inst, sol.plan)
    assert records and all(len(r["forced_by"]) >= 1 and r["seconds"] > 0 for r in records)
    assert inst.plan_cost(sol.plan) == pytest.approx(sol.cost)


def test_time_limited_exact_reports_a_proven_bound(tiny):
    from tests.conftest import FIXTURES

    graph = graph_of(FIXTURES / "transformer_block.onnx")
    inst = build_layout_instance(graph, 4, bandwidth=1e9)
    sol = solve(inst, LayoutOptions(time_limit=3, workers=1))
    closed, exact_bound = sol.lower_bounds  # the closed form always, then exact's
    assert closed.status == "bound" and closed.value <= sol.cost and exact_bound.status in ("optimal", "time_limit")
    assert sol.best_lower_bound <= sol.cost * (1 + 1e-12)
    costs = {r.method: r.value for r in sol.results}
    assert costs["exact"] <= costs["greedy"] * (1 + 1e-12) <= costs["local"] * (1 + 1e-12)


def test_emit_specs_and_strings():
    import onnx

    from onnxpart.tile.onnx.emit import _spec, ort_spec, placements

    assert ort_spec(S(1), 3) == "RS[0]R" and ort_spec(R, 2) == "RR" and ort_spec(P, 2) is None
    assert placements(S(0)) == ["Shard(0)"] and placements(P) == ["Partial()"]
    spec = _spec("w", S(1), (8, 12), 4)
    assert isinstance(spec, onnx.ShardingSpecProto) and list(spec.device) == [0, 1, 2, 3]
    assert spec.sharded_dim[0].axis == 1 and spec.sharded_dim[0].simple_sharding[0].dim_value == 12
    rep = _spec("w", R, (8, 12), 4)
    assert list(rep.device) == [-1] and list(rep.index_to_device_group_map[0].value) == [0, 1, 2, 3]


def _same_shapes_other_meaning(path: Path) -> Path:
    """Four ops on 4x8x8 tensors that agree on type and shapes pairwise and differ in an attribute (Transpose's
    perm) or a constant input (Slice's axes), which decide what they may shard."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), name)
              for name, v in (("zero", [0]), ("end", [8]), ("axis1", [1]), ("axis2", [2]))]
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 2]),
             helper.make_node("Slice", ["b", "zero", "end", "axis1"], ["c"]),
             helper.make_node("Slice", ["c", "zero", "end", "axis2"], ["y"])]
    value = functools.partial(helper.make_tensor_value_info, elem_type=TensorProto.FLOAT, shape=[4, 8, 8])
    graph = helper.make_graph(nodes, "g", [value("x")], [value("y")], initializer=consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_ops_of_one_signature_share_their_composition(tmp_path, monkeypatch):
    """An LLM's layers repeat their ops: the build composes each distinct signature once (the 70B shape's
    9,007 ops in 2.4 s, not 11 s). The instance must be the one composed op by op: the signature holds
    everything the catalog reads (attributes, constant inputs), not only the op type and shapes."""
    from onnxpart.onnx_constants import small_constants
    from onnxpart.tile.onnx import build as build_module

    loaded = load_costed(_same_shapes_other_meaning(tmp_path / "m.onnx"), device="a100")
    constants = small_constants(loaded.model.model)
    shared = build_layout_instance(loaded.graph, (2, 2), constants=constants)
    monkeypatch.setattr(build_module, "_signature", lambda value: object())  # no two ops agree
    alone = build_layout_instance(loaded.graph, (2, 2), constants=constants)
    assert shared.ops == alone.ops
    assert shared.ops[0].choices != shared.ops[1].choices and shared.ops[2].choices != shared.ops[3].choices


def test_greedy_spends_a_budget_smaller_than_one_round(tmp_path):
    """Where one round of moves is more than the trials (the 70B shape on a 60 s limit: 253,204 moves),
    greedy still spends the trials on the better start, heaviest ops first, instead of returning the
    starts untouched (a Llama layer at sequence 2048 on a 2x2 mesh, where sharding pays)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
    from make_llama70b import Shape, build

    from onnxpart.onnx_constants import small_constants
    from onnxpart.tile.onnx.heuristics import _moves, fit_memory

    path = build(tmp_path / "llama", Shape(layers=1, hidden=512, heads=8, kv_heads=2, mlp=2048, vocab=1000))["path"]
    loaded = load_costed(Path(path), dim=["batch=1", "sequence=2048"], device="a100")
    inst = build_layout_instance(loaded.graph, (2, 2), constants=small_constants(loaded.model.model))
    starts = [local(inst), fit_memory(inst, {t.name: t.domain[0] for t in inst.tensors})]  # greedy's two
    plan = greedy(inst, trials=_moves(inst) // 2)
    assert inst.fits(plan) and inst.cost(plan) < 0.95 * min(inst.cost(x) for x in starts)
