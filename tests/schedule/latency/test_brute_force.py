"""Tiny instances where brute force gives the optimum: exact (MILP and CP-SAT) equals it, every lower
bound is at most it, every heuristic at least it, and the validator accepts every answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule.latency import bounds, exact, heuristics
from onnxpart.schedule.latency.simulator import validate
from tests.schedule.helpers import brute_force, instance, random_case

# (seed, n ops, k devices, options): K^n × topological orders stays small enough to enumerate
CASES = [
    (0, 5, 2, {}), (1, 6, 2, {}), (2, 7, 2, {"p_edge": 0.3}), (3, 5, 3, {}), (4, 6, 3, {"p_edge": 0.5}),
    (5, 6, 2, {"memory": True}), (6, 5, 3, {"memory": True}), (7, 6, 2, {"forbid": True}),
    (8, 5, 3, {"forbid": True, "memory": True}), (9, 6, 2, {"integer": False}),
    (10, 4, 3, {"p_edge": 0.0}), (11, 7, 2, {"p_edge": 0.6}),
]
TOL = 1e-6


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"seed{c[0]}-n{c[1]}-k{c[2]}")
def solved(request):
    seed, n, k, opts = request.param
    case = random_case(np.random.default_rng(seed), n, k, **opts)
    if case["mem"] is not None:  # always feasible: least-loaded placement never exceeds sum/k + max
        case["capacity"] = np.full(k, math.ceil(case["mem"].sum() / k + case["mem"].max()) - 1.0)
    inst = instance(case)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"], case["mem"], case["capacity"])
    return case, inst, opt


def _heuristics(inst):
    out = [h(inst) for h in (heuristics.met, heuristics.greedy, heuristics.heft)]
    init = next(r.mapping for r in out if r is not None)
    out.append(heuristics.simulated_annealing(inst, init, iterations=150, seed=1))
    out.append(heuristics.one_plus_one_ea(inst, init, iterations=150, seed=1))
    return [r for r in out if r is not None]


def test_brute_force_is_finite(solved):
    _, _, opt = solved
    assert math.isfinite(opt)


def test_heuristics_valid_and_not_below_optimum(solved):
    _, inst, opt = solved
    results = _heuristics(inst)
    assert len(results) >= 2
    for r in results:
        assert validate(inst, r.schedule) == [], r.method
        assert r.makespan >= opt - TOL, r.method


@pytest.mark.parametrize("solver", [exact.cpsat, exact.milp], ids=["cpsat", "milp"])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_exact_equals_brute_force(solved, solver, warm):
    case, inst, opt = solved
    hint = heuristics.heft(inst).schedule if warm and heuristics.heft(inst) else None
    res = solver(inst, time_limit=2.0, hint=hint)
    assert res.schedule is not None and validate(inst, res.schedule) == []
    assert res.bound is not None and res.bound <= opt + TOL
    assert res.status == "optimal"
    rel = 1e-4 if case["time"].dtype == float and not np.all(case["time"][np.isfinite(case["time"])] % 1 == 0) else TOL
    assert res.makespan == pytest.approx(opt, rel=rel, abs=TOL)
    assert res.bound == pytest.approx(opt, rel=rel, abs=TOL)


def test_simple_bounds_below_optimum(solved):
    _, inst, opt = solved
    for lb in bounds.simple_bounds(inst):
        assert lb.value is not None and lb.value <= opt + TOL, lb.method
    assert bounds.load_lp_bound(inst).value >= bounds.work_bound(inst).value - TOL
    path = bounds.path_lp_bound(inst).value  # dominates the load LP and the critical path
    assert path >= max(bounds.load_lp_bound(inst).value, bounds.critical_path_bound(inst).value) - TOL
    assert "path-lp" in [b.method for b in bounds.simple_bounds(inst)]
    mip = bounds.path_lp_bound(inst, 5.0, integer=True)  # the module floor of SPLIT and multichannel
    assert mip.status == "optimal" and path - TOL <= mip.value <= opt + TOL
