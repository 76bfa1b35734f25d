"""The family bound's refinement (:mod:`onnxpart.plan.refine`) on a Llama-shaped export: a run's own proven
bound replaces the sum of its units' where tile priced it whole — the collectives at the cuts inside a run are
in no unit's bound — and the bound stays below every plan."""

import sys
from pathlib import Path

import pytest

from onnxpart import plan
from onnxpart.loading import load_costed
from onnxpart.onnx_constants import small_constants
from onnxpart.plan import exact
from onnxpart.plan.cluster import read_cluster
from onnxpart.plan.model import Problem
from onnxpart.plan.refine import price_run
from onnxpart.plan.unit_costs import UnitTable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_llama70b import Shape, build  # noqa: E402


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    shape = Shape(layers=4, hidden=512, heads=8, kv_heads=8, mlp=1024, vocab=1000)
    path = build(tmp_path_factory.mktemp("llama") / "llama", shape)["path"]
    return load_costed(Path(path), need_model=True, dim=["batch=1", "sequence=1024"], device="a100")


def test_refined_bound_closes_the_cut_collectives_on_one_node(llama):
    """On one node of 4 the best latency plan is the whole model on the node; its units' bounds leave out the
    all-reduces where the residual stream crosses their cuts, tile's elimination on the whole stage does not:
    the refined bound is above the units' sum, below every single-stage plan's proven optimum, and meets the
    answer (proven optimal)."""
    pb = Problem(llama.graph, read_cluster("1x4:a100"), "latency", constants=small_constants(llama.model.model))
    solution = plan.solve(pb, plan.Options(time_limit=30))
    plain = UnitTable(solution.table.upper, solution.table.lower, solution.table.memory, solution.table.floor,
                      solution.table.layouts, solution.table.runs)
    unrefined = exact.family_bound(pb, plain)[0].value
    assert unrefined < solution.best_lower_bound * (1 - 1e-3)
    for m in range(len(pb.meshes)):
        whole = price_run(pb, (0, pb.units.count, m), 20)
        assert whole.optimal and solution.best_lower_bound <= whole.cost * (1 + 1e-9)
    assert solution.value == pytest.approx(solution.best_lower_bound, rel=1e-9)


def test_exact_does_not_search_where_nothing_fits(llama, monkeypatch):
    """A stage whose least memory is over the device's (the whole model on one device, with the memory set
    below it) is refused at once by tile's exact method, not searched for its whole time share."""
    from onnxpart.plan.evaluate import stage_instance, stage_io
    from onnxpart.plan.stages import restrict
    from onnxpart.tile.onnx import elimination
    from onnxpart.tile.onnx.exact import exact as tile_exact

    pb = Problem(llama.graph, read_cluster("1x2:a100"), "latency", constants=small_constants(llama.model.model))
    shape = pb.run(0, pb.units.count, 0)
    whole = stage_instance(pb, shape, 0, stage_io(pb, shape)[0])
    sub = restrict(whole, range(len(whole.ops)), memory=whole.min_memory() / 2)

    def searched(*args, **kwargs):
        raise AssertionError("elimination ran on an instance where nothing fits")

    monkeypatch.setattr(elimination, "solve", searched)
    layouts, bound = tile_exact(sub, 5.0)
    assert layouts is None and bound.status == "infeasible" and bound.value is None
