"""The units' bounds joined at their cuts (:mod:`onnxpart.plan.interfaces`): the chain program against an
enumeration, and on a Llama-shaped export a bound above the units' sum (it holds the collectives where the
residual stream crosses a cut) and below the optimum tile proves for the whole stage."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from onnxpart.loading import load_costed
from onnxpart.onnx_constants import small_constants
from onnxpart.plan.cluster import read_cluster
from onnxpart.plan.evaluate import stage_instance, stage_io
from onnxpart.plan.interfaces import cut_tensors, interface_bounds, run_argmin, run_bounds
from onnxpart.plan.model import Problem
from onnxpart.plan.refine import price_run
from onnxpart.plan.stages import merged_layouts
from onnxpart.plan.unit_costs import unit_table
from onnxpart.strategy import Budget

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_llama70b import Shape, build  # noqa: E402


def test_chain_program_equals_the_enumeration():
    rng = np.random.default_rng(1)
    states = [1, 3, 2, 4, 1]  # layouts at cuts 0 .. 4 (none at the ends)
    functions = [rng.random((a, b)) for a, b in zip(states, states[1:])]
    out = run_bounds(functions)
    for i, j in itertools.combinations(range(len(functions) + 1), 2):
        best = min(sum(functions[u][picks[u - i], picks[u - i + 1]] for u in range(i, j))
                   for picks in itertools.product(*(range(s) for s in states[i:j + 1])))
        assert out[i, j] == pytest.approx(best, rel=1e-12)
    assert np.isinf(out[2, 2]) and np.isinf(out[3, 1])


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    shape = Shape(layers=4, hidden=512, heads=8, kv_heads=8, mlp=1024, vocab=1000)
    path = build(tmp_path_factory.mktemp("llama") / "llama", shape)["path"]
    loaded = load_costed(Path(path), need_model=True, dim=["batch=1", "sequence=1024"], device="a100")
    return Problem(loaded.graph, read_cluster("1x4:a100"), "latency", constants=small_constants(loaded.model.model))


def test_cut_tensors_are_shared_by_two_neighbouring_units_only(llama):
    for mesh in llama.meshes:
        cuts = cut_tensors(llama, mesh)
        assert cuts[0] == () and cuts[-1] == () and any(cuts)
        inst = llama.instance(mesh)
        for c, names in enumerate(cuts[1:-1], start=1):
            for name in names:
                touching = {u for u in range(llama.units.count) for i in llama.units.ops(u, u + 1)
                            if name in inst.ops[i].inputs + inst.ops[i].outputs}
                assert touching == {c - 1, c}


def test_chain_bound_between_the_units_sum_and_the_stage_optimum(llama):
    """On 1x4 the whole model's units' bounds miss the all-reduces where the residual stream crosses their
    cuts: the chain holds them (strictly above the sum) and stays below tile's proven optimum of the stage."""
    table = unit_table(llama, Budget(60), 20)
    chain = interface_bounds(llama, time.monotonic() + 60).bound
    count = llama.units.count
    m = [mesh.size for mesh in llama.meshes].index(4)
    assert chain[0, count, m] > table.lower[:, m].sum() * (1 + 1e-3)
    whole = price_run(llama, (0, count, m), 30)
    assert whole.optimal and chain[0, count, m] <= whole.lower * (1 + 1e-9)
    for i, j in ((1, count), (0, count // 2), (2, 3)):
        stage = price_run(llama, (i, j, m), 20)  # a plan of the stage: its step time is at least the optimum
        assert chain[i, j, m] <= stage.cost * (1 + 1e-9)


def test_argmin_attains_the_chain():
    rng = np.random.default_rng(2)
    states = [1, 4, 3, 5, 2, 1]
    functions = [rng.random((a, b)) for a, b in zip(states, states[1:])]
    out = run_bounds(functions)
    for i, j in ((0, 5), (1, 4), (2, 3)):
        picks = run_argmin(functions, i, j)
        assert len(picks) == j - i + 1
        assert sum(functions[u][picks[u - i], picks[u - i + 1]] for u in range(i, j)) == pytest.approx(out[i, j])


def test_chained_unit_plans_agree_at_every_cut_and_price_near_the_chain(llama):
    """The chain's argmin pins each unit's cut tensors: neighbouring units' plans give a shared tensor one
    layout (the units' own plans need not), and the merged stage plan costs at least the chain's bound."""
    found = interface_bounds(llama, time.monotonic() + 60)
    count = llama.units.count
    for m, chained in found.layouts.items():
        mesh = llama.meshes[m]
        assert len(chained) == 1  # the weights fit replicated: the plan at λ = 0 alone
        for plans in chained:
            for c, names in enumerate(cut_tensors(llama, mesh)[1:-1], start=1):
                for name in names:
                    assert plans[c - 1][name] == plans[c][name]
            shape = llama.run(0, count, m)
            sub = stage_instance(llama, shape, 0, stage_io(llama, shape)[0])
            assert sub.cost(merged_layouts(sub, plans)) >= found.bound[0, count, m] * (1 - 1e-9)


def test_memory_multiplier_raises_the_bound_and_stays_below_a_fitting_plan(tmp_path):
    """Short sequences (weights far over activations) and a device memory a little above the whole stage's
    least-memory plan, far below its weights replicated: the Lagrangian chain (λ × owned weight bytes, minus
    λ·M) is above the chain without memory, and below the step time of a plan of the stage that fits; the chained
    plans hold one that fits (the weighted units' mix), where the plan at λ = 0 does not, and it is the whole
    model's stage price."""
    from onnxpart.plan.evaluate import build_stage, evaluate

    shape = Shape(layers=4, hidden=512, heads=8, kv_heads=8, mlp=1024, vocab=1000)
    loaded = load_costed(Path(build(tmp_path / "llama", shape)["path"]), need_model=True,
                         dim=["batch=1", "sequence=8"], device="a100")
    free = Problem(loaded.graph, read_cluster("1x4:a100"), "latency", constants=small_constants(loaded.model.model))
    count = free.units.count
    m = [mesh.size for mesh in free.meshes].index(4)
    run = free.run(0, count, m)
    stage_of, _ = stage_io(free, run)
    sub = stage_instance(free, run, 0, stage_of)
    least = {t.name: min(t.domain, key=lambda a, t=t: t.per_device(a, sub.mesh)) for t in sub.tensors}
    room = sum(t.bytes - t.per_device(least[t.name], sub.mesh) for t in sub.tensors if t.kind == "weight")
    memory = build_stage(free, run, 0, stage_of, [], layouts=least).memory()["total"] + 0.3 * room
    (tmp_path / "tight.yaml").write_text(f"nodes: 1\ndevices_per_node: 4\ndevice: a100\nmemory: {int(memory)}\n")
    tight = Problem(loaded.graph, read_cluster(str(tmp_path / "tight.yaml")), "latency", constants=free.constants)
    unbound = interface_bounds(free, time.monotonic() + 60).bound[0, count, m]
    found = interface_bounds(tight, time.monotonic() + 60)
    bound = found.bound[0, count, m]
    assert bound > unbound * (1 + 1e-4)
    priced = evaluate(tight, tight.run(0, count, m), seconds=5)
    assert priced.fits and bound <= priced.stages[0].compute * (1 + 1e-9)
    held = [build_stage(tight, run, 0, stage_of, [], layouts=merged_layouts(sub, plans)).memory()["total"]
            for plans in found.layouts[m]]  # λ = 0's plan replicates the weights; the weighted plans' mix fits
    assert len(held) == 2 and held[0] > memory >= held[1]
    assert sub.cost(merged_layouts(sub, found.layouts[m][1])) >= bound * (1 - 1e-9)
    price = found.stages[m]  # the whole model's stage price: the plan that fits, with what it holds
    assert price.memory == pytest.approx(held[1]) and price.cost == pytest.approx(
        sub.cost(merged_layouts(sub, found.layouts[m][1])))
