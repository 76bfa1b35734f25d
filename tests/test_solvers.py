"""highspy and ortools in one process (both ship libhighs.so.1; the pinned pair must coexist), and the
wrappers' proven bounds."""

from __future__ import annotations

import math

import highspy
import numpy as np
import pytest
from ortools.sat.python import cp_model

from onnxpart.solvers import solve_cpsat, solve_highs


def knapsack_highs(values, weights, capacity):
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    n = len(values)
    h.addVars(n, np.zeros(n), np.ones(n))
    h.changeColsIntegrality(n, np.arange(n), np.array([highspy.HighsVarType.kInteger] * n))
    h.changeColsCost(n, np.arange(n), -np.asarray(values, dtype=float))  # maximize value = minimize -value
    h.addRow(-math.inf, capacity, n, np.arange(n), np.asarray(weights, dtype=float))
    return h


def test_both_solvers_in_one_process():
    values, weights, capacity = [10, 13, 7, 8, 9], [5, 6, 3, 4, 5], 12
    result = solve_highs(knapsack_highs(values, weights, capacity), time_limit=10)
    model = cp_model.CpModel()
    take = [model.NewBoolVar(f"x{i}") for i in range(len(values))]
    model.Add(sum(w * x for w, x in zip(weights, take)) <= capacity)
    model.Minimize(-sum(v * x for v, x in zip(values, take)))
    cp_result, _ = solve_cpsat(model, time_limit=10, workers=1)
    best = -max(sum(v for v, bit in zip(values, bits) if bit) for bits in np.ndindex(*(2,) * 5)
                if sum(w for w, bit in zip(weights, bits) if bit) <= capacity)
    assert result.status == cp_result.status == "optimal"
    assert result.objective == cp_result.objective == best
    assert result.bound <= result.objective + 1e-6 and cp_result.bound <= cp_result.objective


def subset_sum_optimum(weights, capacity: int) -> int:
    """The largest subset sum ≤ ``capacity`` (a bitset of reachable sums): the knapsack optimum when
    values equal weights."""
    reachable = 1
    for w in weights:
        reachable |= reachable << int(w)
    return (reachable & ((1 << (capacity + 1)) - 1)).bit_length() - 1


@pytest.mark.parametrize("stop", ["time_limit", "node_limit"])
def test_stopped_mip_reports_a_proven_bound_not_the_incumbent(stop):
    weights = np.random.default_rng(3).integers(10**6, 2 * 10**6, 50)
    capacity = int(weights.sum()) // 2
    optimum = -subset_sum_optimum(weights, capacity)  # minimize -Σ w·x; not proven at the root
    h = knapsack_highs(weights, weights, capacity)
    h.setOptionValue("mip_heuristic_effort", 0.0)
    if stop == "node_limit":
        h.setOptionValue("mip_max_nodes", 1)  # stops after the root node whatever the machine's speed
    result = solve_highs(h, time_limit=0.05 if stop == "time_limit" else 60)
    tol = 1e-9 * abs(optimum)
    assert result.bound <= optimum + tol  # a bound on the known optimum: the incumbent below is above it
    assert result.objective is None or result.objective >= optimum - tol
    if stop == "node_limit":  # HiGHS' node limit is reported like its time limit
        assert result.status == "time_limit" and result.objective > optimum + tol
    if result.status == "time_limit":  # the gap is open: the bound is not the incumbent
        assert result.objective is None or result.bound < result.objective - tol
    else:  # solved within solve_highs' default relative gap (1e-6)
        assert result.status == "optimal" and result.objective <= optimum * (1 - 1e-6)


def test_infeasible_is_reported():
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.addVars(1, np.array([0.0]), np.array([1.0]))
    h.addRow(2.0, math.inf, 1, np.array([0]), np.array([1.0]))
    assert solve_highs(h, time_limit=5).status == "infeasible"


def test_sparse_model_mip_and_its_relaxation():
    from onnxpart.solvers import SparseModel

    # max x + y s.t. 2x + 2y <= 3, x, y integer in [0, 1]  ->  MIP optimum 1, LP optimum 1.5
    model = SparseModel()
    x = model.var(0, 1, cost=-1.0, integer=True)
    y = model.var(0, 1, cost=-1.0, integer=True)
    model.row([(x, 1.0), (y, 1.0), (x, 1.0), (y, 1.0)], upper=3.0)  # repeated columns are summed
    mip = solve_highs(model.highs(), time_limit=5)
    lp = solve_highs(model.highs(relax=True), time_limit=5)
    assert mip.status == lp.status == "optimal"
    assert mip.objective == -1.0 and lp.objective == -1.5
    assert sum(mip.values) == 1.0


def test_running_bounds_are_proven_bounds():
    """on_bound hears bounds while the solvers run; none exceeds the optimum the solver then proves."""
    rng = np.random.default_rng(5)
    n = 40
    values, weights = rng.integers(50, 100, n), rng.integers(40, 80, n)
    capacity = int(weights.sum() / 2)
    heard_highs: list[float] = []
    result = solve_highs(knapsack_highs(values, weights, capacity), time_limit=20, on_bound=heard_highs.append)
    model = cp_model.CpModel()
    take = [model.NewBoolVar(f"x{i}") for i in range(n)]
    model.Add(sum(int(w) * x for w, x in zip(weights, take)) <= capacity)
    model.Minimize(-sum(int(v) * x for v, x in zip(values, take)))
    heard_cpsat: list[float] = []
    cp_result, _ = solve_cpsat(model, time_limit=20, workers=1, on_bound=heard_cpsat.append)
    assert result.status == cp_result.status == "optimal"
    assert heard_highs and heard_cpsat
    assert max(heard_highs) <= result.objective + 1e-6 and max(heard_cpsat) <= cp_result.objective
