"""n-D meshes: per-axis collective costs (every transition's index sets: test_resharding.py), algorithms composed from the 1-D catalog, exact = brute force
on a 2x2 mesh, 2-D plan strings, ONNX sharding specs, and the CLI's mesh options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxpart.errors import UserError
from onnxpart.loading import load_costed
from onnxpart.tile.onnx.catalog import P, R, S, collective_time, matmul_algorithms
from onnxpart.tile.onnx.mesh import MeshLayout, compose_algorithms, make_mesh, parse_mesh, parse_mesh_layout
from onnxpart.tile.onnx.resharding import plan, reshard_time
from onnxpart.tile.onnx.build import build_layout_instance, parse_pins
from onnxpart.tile.onnx import LayoutOptions, solve
from onnxpart.tile.onnx.exact import brute_force, exact
from onnxpart.tile.onnx.heuristics import greedy, local
from tests.tile.onnx.onnx_models import attention_core, matmul_relu, mlp
from tests.tile.cli import invoke, one_line_error

MESH = make_mesh((2, 4), ("dp", "tp"), (1e-6, 2e-6), (100e9, 25e9))
N = 8e6


def L(*parts):  # noqa: N802 - a 2-D layout from its components
    return MeshLayout(parts)


SHAPE = (8, 8)


def test_one_axis_changes_cost_that_axis_collective_on_the_group_bytes():
    dp, tp = MESH.axes

    def price(a, b):
        return reshard_time(a, b, SHAPE, N, MESH)

    assert price(L(S(0), R), L(R, R)) == pytest.approx(collective_time("all-gather", N, dp))
    # tp's links are 4x slower: splitting dim 0 over dp first (free) halves what tp gathers, and the fast dp
    # gathers the rest
    assert price(L(R, S(1)), L(R, R)) == pytest.approx(min(
        collective_time("all-gather", N, tp), collective_time("all-gather", N / 2, tp) + collective_time("all-gather", N, dp)))
    assert [(s.axis, s.collective) for s in plan(L(R, S(1)), L(R, R), SHAPE, N, MESH)] == [
        (0, None), (1, "all-gather"), (0, "all-gather")]
    # dim 1 stays split 4 ways over tp: each dp group all-gathers a quarter of the tensor
    assert price(L(S(0), S(1)), L(R, S(1))) == pytest.approx(collective_time("all-gather", N / 4, dp))
    assert price(L(P, S(0)), L(R, S(0))) == pytest.approx(collective_time("all-reduce", N / 4, dp))
    assert price(L(R, S(0)), L(S(1), S(0))) == 0.0 and price(L(S(0), R), L(P, P)) == 0.0


def test_two_axes_change_in_the_cheaper_order():
    dp, tp = MESH.axes
    # PP -> RR: a reduce-scatter along one axis, the all-reduce along the other on its share, an all-gather
    # back (the 2-D hierarchical all-reduce) beats the two full all-reduces
    hierarchical = min(collective_time("reduce-scatter", N, a) + collective_time("all-reduce", N / p, b)
                       + collective_time("all-gather", N, a) for a, b, p in ((tp, dp, 4), (dp, tp, 2)))
    assert reshard_time(L(P, P), L(R, R), SHAPE, N, MESH) == pytest.approx(hierarchical)
    assert hierarchical < collective_time("all-reduce", N, dp) + collective_time("all-reduce", N, tp)
    # S(0)S(1) -> RR: gather dp first (on N/4) then tp (on N), or tp first (on N/2) then dp (on N)
    first_dp = collective_time("all-gather", N / 4, dp) + collective_time("all-gather", N, tp)
    first_tp = collective_time("all-gather", N / 2, tp) + collective_time("all-gather", N, dp)
    assert reshard_time(L(S(0), S(1)), L(R, R), SHAPE, N, MESH) == pytest.approx(min(first_dp, first_tp))
    steps = plan(L(S(0), S(1)), L(R, R), SHAPE, N, MESH)
    assert [s.axis for s in steps] == ([0, 1] if first_dp <= first_tp else [1, 0])


def test_algorithms_compose_per_axis():
    composed = {name: (ins, out, div) for name, ins, out, div in
                compose_algorithms(lambda ins, out, p: matmul_algorithms(2, 2, p), [[8, 4], [4, 8]], [[8, 8]], (2, 2))}
    assert composed["rows·cols"] == ((L(S(0), R), L(R, S(1))), L(S(0), S(1)), 4)
    assert composed["contraction·rows"] == ((L(S(1), S(0)), L(S(0), R)), L(P, S(0)), 4)
    assert composed["rows·rows"][1] == L(S(0), S(0))  # dim 0 split over both axes: 8 / 4
    small = compose_algorithms(lambda ins, out, p: matmul_algorithms(2, 2, p), [[2, 4], [4, 8]], [[2, 8]], (2, 2))
    assert all(name != "rows·rows" for name, *_ in small)  # 2 rows do not divide by 4
    assert compose_algorithms(lambda ins, out, p: None, [[2]], [[2]], (2, 2)) is None


def test_parse_mesh_and_layouts():
    assert parse_mesh("2x4") == (2, 4) and parse_mesh("8") == (8,) and parse_mesh("2,2,2") == (2, 2, 2)
    assert parse_mesh_layout("S(0)R", 2) == L(S(0), R) and parse_mesh_layout("rs[1]", 2) == L(R, S(1))
    assert parse_mesh_layout("S(0)", 1) == S(0) and str(L(S(0), S(0))) == "S(0)S(0)"
    assert parse_pins(["w=PS(1)"], 2) == {"w": L(P, S(1))}
    for text, match in (("2x", "--mesh"), ("0x4", "from 1 to 4096")):
        with pytest.raises(UserError, match=match):
            parse_mesh(text)
    with pytest.raises(UserError, match="component"):
        parse_mesh_layout("S(0)", 2)
    with pytest.raises(UserError, match="unknown layout"):
        parse_mesh_layout("S(0)Q", 2)
    with pytest.raises(UserError, match="one value or 2"):
        make_mesh((2, 4), None, (1e-6,), (1.0, 2.0, 3.0))


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mesh")
    load = (lambda p: load_costed(Path(p), cost="analytic", device="a100").graph)
    return {"mm_relu": load(matmul_relu(folder / "mm.onnx")),
            "mm_relu_wide": load(matmul_relu(folder / "wide.onnx", m=64, k=512, n=256)),
            "attn": load(attention_core(folder / "attn.onnx", seq=4, d=8)),
            "mlp": load(mlp(folder / "mlp.onnx", batch=64, d_in=256, d_hidden=1024, d_out=256))}


CASES = [("mm_relu", None, None), ("mm_relu_wide", None, None), ("mm_relu_wide", (1e9, 1e11), None),
         ("mm_relu_wide", None, 0.5), ("mm_relu_wide", None, 0.1), ("mm_relu_wide", None, 0.02),
         ("attn", (1e9, 1e10), None)]


@pytest.mark.parametrize("name,bandwidth,memory", CASES)
def test_exact_equals_brute_force_on_a_2x2_mesh(graphs, name, bandwidth, memory):
    inst = build_layout_instance(graphs[name], (2, 2), bandwidth=bandwidth)
    if memory is not None:  # this fraction of the way from the least memory to all-replicated (0.5 does not bind
        # on mm_relu_wide: its optimum stays the unbounded one; 0.1 and 0.02 do)
        full = inst.memory_per_device({t.name: t.domain[0] for t in inst.tensors})
        inst = build_layout_instance(graphs[name], (2, 2), bandwidth=bandwidth,
                                     memory=inst.min_memory() + memory * (full - inst.min_memory()))
    assert any(len(t.domain) > 9 for t in inst.tensors)  # P on either axis: 2-D layouts beyond R/S
    optimum, _ = brute_force(inst)
    layouts, bound = exact(inst, 10.0, greedy(inst))
    assert bound.status == "optimal" and inst.fits(layouts)
    assert inst.cost(layouts) == pytest.approx(optimum, rel=1e-9)
    assert bound.value <= optimum * (1 + 1e-12)
    assert inst.cost(greedy(inst)) >= optimum * (1 - 1e-12)
    assert inst.cost(local(inst)) >= inst.cost(greedy(inst)) * (1 - 1e-12)


def test_memory_counts_the_product_of_sharding_factors(graphs):
    inst = build_layout_instance(graphs["mm_relu_wide"], (2, 2))
    w = inst.tensor("W")
    assert w.per_device(L(S(0), S(1)), inst.mesh) == w.bytes // 4 == w.per_device(L(S(0), S(0)), inst.mesh)
    assert w.per_device(L(S(0), R), inst.mesh) == w.bytes // 2 and w.per_device(L(P, R), inst.mesh) == w.bytes
    assert inst.min_memory() == sum(t.bytes // 4 for t in inst.tensors)


def test_pins_and_reasons_on_a_2d_mesh(graphs):
    inst = build_layout_instance(graphs["mlp"], (2, 4), pins=parse_pins(["W1=RS(1)"], 2))
    assert inst.tensor("W1").domain == (L(R, S(1)),)
    sol = solve(inst, LayoutOptions(time_limit=5))
    assert sol.plan.layouts["W1"] == L(R, S(1))
    with pytest.raises(UserError, match=r"does not divide by 8 devices \(mesh axes x, y\)"):
        build_layout_instance(graphs["mm_relu"], (2, 4), pins={"x": L(S(0), S(0))})  # 4 rows
    with pytest.raises(UserError, match="one component per mesh axis"):
        build_layout_instance(graphs["mlp"], (2, 4), pins={"W1": S(0)})


def test_cli_2d_plan_and_annotated_model(tmp_path):
    model = mlp(tmp_path / "mlp.onnx", batch=64, d_in=256, d_hidden=1024, d_out=256, bias=True)
    out = tmp_path / "out"
    result = invoke(model, "--mesh", "2x4", "--mesh-axes", "dp,tp", "--mesh-bandwidth", "300GB/s,25GB/s",
                    "--mesh-latency", "1e-6,4e-6", "-o", out, "--pin", "W1=RS(1)", "--time-limit", 5, "--workers", 1,
                    "--explain", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["mesh"]["shape"] == [2, 4] and plan["mesh"]["axis_names"] == ["dp", "tp"]
    assert plan["mesh"]["bandwidth_bytes_per_s"] == [300e9, 25e9] and plan["mesh"]["latency_s"] == [1e-6, 4e-6]
    tensors = {t["name"]: t for t in plan["tensors"]}
    assert tensors["W1"]["layout"] == "RS(1)" and tensors["W1"]["placements"] == ["Replicate()", "Shard(1)"]
    assert tensors["W1"]["ort_spec"] == "RS[1]" and tensors["W1"]["bytes_per_device"] == 256 * 1024 * 4 // 4
    for t in plan["tensors"]:
        assert len(t["placements"]) == 2 and t["layout"] in t["candidates"]
    onnx.checker.check_model(str(out / "annotated.onnx"), full_check=True)
    annotated = onnx.load(str(out / "annotated.onnx"))
    assert annotated.configuration[0].num_devices == 8
    specs = {(n.name, s.tensor_name): s for n in annotated.graph.node for c in n.device_configurations
             for s in c.sharding_spec}
    w1 = specs[("mm1", "W1")]  # RS(1): 4 shards of dim 1, each held by the 2 devices of a dp column
    assert [(d.axis, d.simple_sharding[0].num_shards) for d in w1.sharded_dim] == [(1, 4)]
    groups = {e.key: list(e.value) for e in w1.index_to_device_group_map}
    assert [groups[d] for d in w1.device] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert invoke(model, "--mesh", "2x4", "--mesh-axes", "dp,tp", "--mesh-bandwidth", "300GB/s,25GB/s",
                  "--mesh-latency", "1e-6,4e-6", "--pin", "W1=RS(1)", "--check-certificate", out).exit_code == 0


def test_sharding_spec_of_a_dim_split_over_both_axes():
    from onnxpart.tile.onnx.emit import _spec, ort_spec, placements

    spec = _spec("t", L(S(0), S(0)), (8, 3), (2, 4))
    assert [(d.axis, d.simple_sharding[0].num_shards) for d in spec.sharded_dim] == [(0, 8)]
    assert list(spec.device) == list(range(8)) and not spec.index_to_device_group_map
    assert ort_spec(L(S(0), S(0)), 2) is None and ort_spec(L(P, S(1)), 2) is None
    assert placements(L(S(0), S(0))) == ["Shard(0)", "Shard(0)"]
    two = _spec("t", L(S(1), S(0)), (8, 6), (2, 4))  # dim 0 over tp, dim 1 over dp: row-major over (dim 0, dim 1)
    assert [(d.axis, d.simple_sharding[0].num_shards) for d in two.sharded_dim] == [(0, 4), (1, 2)]
    assert list(two.device) == [0, 4, 1, 5, 2, 6, 3, 7]


@pytest.mark.parametrize("args,match", [
    (["--mesh", "2x"], "--mesh '2x'"),
    (["--mesh", "2x0"], "--mesh: must be a device count from 1 to 4096, got '0'"),
    (["--mesh", "2x2x2x2x2x2x2x2x2x2"], "at most 4 axes"),
    (["--mesh", "64x128"], "8192 devices, above the limit of 4096"),
    (["--mesh", "2x4", "-d", "4"], "disagrees"),
    (["--mesh", "2x4", "--mesh-axes", "a,b,c"], "--mesh-axes"),
    (["--mesh", "2x4", "--mesh-bandwidth", "1GB/s,2GB/s,3GB/s"], "--mesh-bandwidth"),
    (["--mesh", "2x4", "--mesh-latency", "x"], "--mesh-latency"),
    (["--mesh", "2x4", "--pin", "W1=S(0)"], "component"),
])
def test_bad_mesh_options_one_line_exit_2(tmp_path, args, match):
    model = mlp(tmp_path / "mlp.onnx")
    one_line_error(invoke(model, "-o", tmp_path / "out", *args), 2, match)
    assert not (tmp_path / "out").exists()


def _verify_cases():
    from tests.tile.onnx.verify_models import weight

    return [
        ("MatMul", [("x", [8, 4, 8]), ("w", weight([8, 8]))], {}, {"rows·cols", "contraction·batch0"}),
        ("Gemm", [("a", [8, 8]), ("b", weight([8, 8])), ("c", weight([8], 2))], {"transB": 1}, {"cols·contraction"}),
        ("Conv", [("x", [4, 8, 6, 6]), ("w", weight([8, 8, 3, 3])), ("b", weight([8], 2))], {"pads": [1, 1, 1, 1]},
         {"batch·out-channels", "in-channels·batch"}),
        ("Conv", [("x", [2, 8, 5, 5]), ("w", weight([8, 2, 3, 3]))], {"group": 4}, {"groups·groups"}),
        ("Gather", [("t", [8, 4]), ("i", np.array([[0, -1, 7], [3, 4, 5], [6, 2, 1], [1, 1, 0]], np.int64))],
         {"axis": 0}, {"rows·rows", "rows·indices0"}),
        ("Reshape", [("x", [4, 8, 2]), ("s", np.array([32, 2], np.int64))], {}, {"replicated·replicated"}),
        ("Softmax", [("x", [4, 8, 8])], {"axis": -1}, {"shard0·shard1"}),
        ("ReduceSum", [("x", [4, 8, 4]), ("axes", np.array([1], np.int64))], {"keepdims": 0}, set()),
        ("Expand", [("x", [1, 8]), ("s", np.array([8, 8], np.int64))], {}, {"shard0·shard1", "shard0·shard0"}),
        ("Resize", [("x", [4, 4, 3, 3]), "", "", ("z", np.array([4, 4, 6, 5], np.int64))], {},
         {"shard0·shard1", "shard1·shard0"}),
        ("ConvTranspose", [("x", [4, 8, 3, 3]), ("w", weight([8, 4, 3, 3]))], {},
         {"batch·out-channels", "in-channels·batch"}),
        ("ConvTranspose", [("x", [2, 8, 3, 3]), ("w", weight([8, 2, 3, 3])), ("b", weight([8], 2))], {"group": 4},
         {"groups·groups"}),
        ("Pad", [("x", [4, 8, 3]), ("p", np.array([0, 0, 1, 0, 0, 2], np.int64))], {"mode": "edge"},
         {"shard0·shard1", "partial·shard0"}),
    ]


@pytest.mark.parametrize("case", range(13))
def test_verify_every_composed_algorithm_on_2x2(tmp_path, case):
    """--verify runs 2-D plans: each composed algorithm of a one-node model, forced, reproduces the model."""
    from tests.tile.onnx.verify_models import one_node, verify_every_algorithm

    op_type, inputs, attrs, expected = _verify_cases()[case]
    names = verify_every_algorithm(one_node(tmp_path, op_type, inputs, attrs), (2, 2))
    assert expected <= names and any("·" in n for n in names)


def test_dominance_reductions_keep_an_optimum(graphs):
    from onnxpart.tile.onnx.reduce import reduce_instance

    inst = build_layout_instance(graphs["mlp"], (2, 4))
    reduced = reduce_instance(inst)
    # without a memory bound a graph input or weight is read for free from R: only R is kept
    for name in ("x", "W1", "W2"):
        assert reduced.domains[name] == (inst.tensor(name).domain[0],) == (L(R, R),)
    assert sum(map(len, reduced.domains.values())) < sum(len(t.domain) for t in inst.tensors)
    # a plan's layouts swapped for their dominators cost no more
    plan = local(inst)
    assert inst.cost(reduced.replace(plan)) <= inst.cost(plan) * (1 + 1e-12)
    bounded = build_layout_instance(graphs["mlp"], (2, 4), memory=inst.min_memory() * 1.5)
    assert len(reduce_instance(bounded).domains["W1"]) > 1  # sharding a weight now saves memory
