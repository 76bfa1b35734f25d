"""Moccasin (CP-SAT) and Checkmate (HiGHS) against brute force and against each other on tiny graphs;
proven lower bounds never above the incumbents."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import requires_shared
from onnxpart.remat.checkmate import solve_checkmate, solve_checkmate_lp
from onnxpart.remat.moccasin import MoccasinOptions, solve_moccasin
from onnxpart.remat.orders import exact_order, greedy_order, minmem_order
from onnxpart.remat.sequence import baseline, simulate
from tests.remat.helpers import brute_force_fixed, random_dag

CASES = [(6, seed) for seed in range(5)]


def budgets(inst):
    """Three budgets between the restriction-free floor and the baseline peak."""
    low, high = inst.min_budget()[0], baseline(inst).peak
    return sorted({int(low + (high - low) * f) for f in (0.0, 0.4, 0.8)})


@pytest.mark.parametrize("n, seed", CASES)
def test_moccasin_fixed_order_matches_brute_force(n, seed):
    inst = random_dag(n, seed)
    for budget in budgets(inst):
        expected = brute_force_fixed(inst, budget, max_copies=2)
        result = solve_moccasin(inst, budget, MoccasinOptions(max_copies=2, time_limit=20, workers=1))
        if expected is None:
            assert result.sequence is None and result.status == "infeasible"
            continue
        profile = simulate(inst, result.sequence)
        assert result.status == "optimal"
        assert profile.peak <= budget
        assert profile.duration == expected
        assert result.bound == pytest.approx(expected)


@pytest.mark.parametrize("n, seed", CASES[:3])
def test_checkmate_milp_and_moccasin_agree(n, seed):
    inst = random_dag(n, seed)
    for budget in budgets(inst):
        unlimited = brute_force_fixed(inst, budget, max_copies=n)
        milp = solve_checkmate(inst, budget, time_limit=30)
        moccasin = solve_moccasin(inst, budget, MoccasinOptions(max_copies=n, time_limit=20, workers=1))
        if unlimited is None:
            assert milp.sequence is None and moccasin.sequence is None
            continue
        assert simulate(inst, milp.sequence).duration == unlimited
        assert simulate(inst, moccasin.sequence).duration == unlimited
        assert milp.bound <= unlimited + 1e-6
        lp = solve_checkmate_lp(inst, budget, time_limit=30)
        assert lp.bound <= unlimited + 1e-6  # the relaxation bounds the MILP
        simulate(inst, lp.sequence)  # the rounded sequence is valid (it may exceed the budget)


def _with_slack(n: int):
    """The first random DAG whose floor is below its baseline peak (so recomputation matters)."""
    return next(inst for inst in (random_dag(n, seed) for seed in range(100)) if len(budgets(inst)) == 3)


def test_precedence_encodings_agree():
    inst = _with_slack(7)
    budget = budgets(inst)[1]
    results = [solve_moccasin(inst, budget, MoccasinOptions(time_limit=20, workers=1, precedence=p))
               for p in ("reservoir", "literals")]
    durations = [simulate(inst, r.sequence).duration for r in results]
    assert durations[0] == durations[1]


def test_free_order_is_no_worse_than_fixed():
    inst = _with_slack(7)
    budget = budgets(inst)[0]
    fixed = solve_moccasin(inst, budget, MoccasinOptions(time_limit=20, workers=1))
    free = solve_moccasin(inst, budget, MoccasinOptions(time_limit=20, workers=1, order="free"))
    assert free.sequence is not None
    free_profile = simulate(inst, free.sequence)
    assert free_profile.peak <= budget
    if fixed.sequence is not None:
        assert free_profile.duration <= simulate(inst, fixed.sequence).duration
    assert free.bound <= free_profile.duration + 1e-9


@requires_shared
def test_time_limited_bound_is_below_incumbent():
    from tests.conftest import SHARED
    from onnxpart.readers import read_graph
    from onnxpart.remat.model import build_instance, resolve_budget

    graph = read_graph(SHARED / "benchmarks" / "moccasin-graphs" /
                       "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json")
    inst = build_instance(graph)
    budget = resolve_budget("fraction", 0.9, baseline(inst).peak)
    result = solve_moccasin(inst, budget, MoccasinOptions(time_limit=3, workers=1))
    profile = simulate(inst, result.sequence)
    assert profile.peak <= budget
    assert inst.base_duration <= result.bound <= profile.duration
    assert result.time_to_best <= result.seconds


def _all_topological_orders(inst):
    ops = range(inst.n_ops)
    for perm in itertools.permutations(ops):
        position = {v: p for p, v in enumerate(perm)}
        if all(position[u] < position[v] for v in ops for u in inst.predecessors(v) if u < inst.n_ops):
            yield perm


@pytest.mark.parametrize("seed", range(3))
def test_minmem_order_is_exact_on_tiny_graphs(seed):
    inst = random_dag(7, seed, p=0.25)
    best = min(simulate(inst, order).peak for order in _all_topological_orders(inst))
    order, bound, status = exact_order(inst, greedy_order(inst), time_limit=10, workers=1)
    assert status == "optimal" and simulate(inst, order).peak == best and bound == best
    result = minmem_order(inst, time_limit=10, workers=1)
    assert result.peak == best and result.lower_bound <= result.peak
    assert simulate(inst, greedy_order(inst)).peak >= best
