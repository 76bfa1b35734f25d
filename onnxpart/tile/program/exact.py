"""Exact tilings: the exhaustive search of Section 6 and a CP-SAT model of the CHLP objective.

Exhaustive (:func:`exhaustive`): every labeling of the matrices that appear in two or more expressions
(a matrix in one expression only takes that expression's best labeling, which is exact — see
:mod:`onnxpart.tile.program.space`), refused above a limit with the size it would have enumerated.

CP-SAT (:func:`solve_cpsat_tiling`), one-hot choices (the hypergraph of Section 4, weighted as in
Section 5)::

    x[v, a] ∈ {0,1}   vertex v takes label a ∈ D(v)              Σ_a x[v, a] = 1
    y[e, l] ∈ {0,1}   expression e runs with feasible labeling l  Σ_l y[e, l] = 1
    r[e, v] ∈ {0,1}   v must be retiled for e                     r[e, v] ≥ Σ_{l: l[v] = a} y[e, l] − x[v, a]  ∀a
    minimize Σ_e w(e) ( Σ_l base(l)·y[e, l] + Σ_{v ∈ e} c(v)·r[e, v] )

With y one-hot, exactly one a has Σ y = 1, so r[e, v] ≥ 1 − x[v, a] says "v is retiled unless it
already has the label the chosen algorithm wants": the paper's Hamming term d(X, l) (Section 4), and the
minimum over l is the solver's choice of y. Warm start (AddHint): the greedy labeling, its best
labeling per edge and the implied retilings. The lower bound is CP-SAT's proven best objective bound
(never an incumbent); at the time limit it is reported with status ``time_limit``, and the incumbent
is CP-SAT's best or, when it stopped before finding one, the hint itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from onnxpart.certificate import LowerBound
from onnxpart.solvers import solve_cpsat
from onnxpart.strategy import Budget, cores
from onnxpart.tile.program.limits import EXHAUSTIVE_LIMIT
from onnxpart.tile.program.model import Instance
from onnxpart.tile.program.space import complete, search

log = logging.getLogger(__name__)



def exhaustive_vertices(instance: Instance) -> list[int]:
    """The matrices the exhaustive search enumerates: those in two or more expressions."""
    return [v for v in range(instance.n) if len(instance.incident[v]) >= 2]


def exhaustive(instance: Instance, limit: int | None = EXHAUSTIVE_LIMIT) -> tuple[np.ndarray, int]:
    """An optimal labeling and its cost by enumeration; raises
    :class:`~onnxpart.tile.program.space.SpaceTooLarge` when more than ``limit`` labelings would be tried."""
    enumerated = exhaustive_vertices(instance)
    assigned = np.full(instance.n, -1, dtype=np.int64)
    labels, _ = search(instance, range(instance.m), assigned, enumerated, limit)
    assigned[enumerated] = labels
    x = complete(instance, assigned)
    return x, instance.cost(x)


@dataclass
class ExactResult:
    labels: np.ndarray | None
    cost: int | None
    bound: LowerBound
    status: str  # optimal | time_limit | infeasible


def solve_cpsat_tiling(instance: Instance, time_limit: float = 10.0, hint: np.ndarray | None = None,
                       workers: int = 0, seed: int = 0, deterministic_time: float | None = None) -> ExactResult:
    """Minimize the CHLP cost with CP-SAT (module docstring); ``hint``: a full labeling to start from;
    ``workers``: threads (0: one per core). ``deterministic_time`` also stops it after that much of CP-SAT's
    deterministic time, which one seed and one worker turn into one answer whatever the machine's load
    (``time_limit`` stays the wall-clock limit)."""
    budget = Budget(time_limit)  # the limit includes building
    model, x, y, r = _build(instance)
    if hint is not None:
        _add_hint(model, instance, hint, x, y, r)
    parameters = {} if deterministic_time is None else {"max_deterministic_time": deterministic_time}
    result, solver = solve_cpsat(model, max(1e-3, budget.left()), workers=cores(workers), seed=seed,
                                 parameters=parameters)
    seconds = time.monotonic() - budget.start
    labels = None
    if result.has_solution:
        labels = np.array([next(a for a, var in x[v].items() if solver.Value(var))
                           for v in range(instance.n)], dtype=np.int64)
    value = None if result.status == "infeasible" else float(result.bound)
    bound = LowerBound("tile-cpsat", value, result.status, "cp-sat", seconds,
                       note="CP-SAT best objective bound of the one-hot CHLP model")
    cost = instance.cost(labels) if labels is not None else None
    # A stopped run's objective may count retilings its labels do not need (an edge's option is not yet
    # the cheapest): the labels then cost less. More would be a bug, and at the optimum they are equal.
    objective = round(result.objective) if result.objective is not None else None
    if cost is not None and objective is not None and (cost > objective or (result.status == "optimal"
                                                                            and cost != objective)):
        raise AssertionError(f"CP-SAT objective {result.objective} but the labeling costs {cost}")
    if labels is None and hint is not None and result.status != "infeasible":
        labels, cost = np.asarray(hint, dtype=np.int64), instance.cost(hint)  # stopped before its first solution
    return ExactResult(labels, cost, bound, result.status)


def _build(instance: Instance) -> tuple[cp_model.CpModel, list[dict], list[list], list[dict]]:
    model = cp_model.CpModel()
    # Variables: one-hot labels per vertex, one-hot feasible labelings per edge, retilings per (edge, vertex).
    x = [{a: model.new_bool_var(f"x_{v}_{a}") for a in instance.domains[v]} for v in range(instance.n)]
    y = [[model.new_bool_var(f"y_{i}_{t}") for t in range(len(e.tuples))] for i, e in enumerate(instance.edges)]
    r = [{v: model.new_bool_var(f"r_{i}_{v}") for v in e.vertices} for i, e in enumerate(instance.edges)]
    # One label per vertex.
    for v in range(instance.n):
        model.add_exactly_one(x[v].values())
    # One feasible labeling (algorithm) per expression.
    for i in range(instance.m):
        model.add_exactly_one(y[i])
    # Retiling: r[e, v] ≥ Σ_{l: l[v] = a} y[e, l] − x[v, a] for every label a (the Hamming term).
    for i, e in enumerate(instance.edges):
        for j, v in enumerate(e.vertices):
            wanted: dict[int, list] = {}
            for t, tup in enumerate(e.tuples):
                wanted.setdefault(tup[j], []).append(y[i][t])
            for a, ys in wanted.items():
                if a in x[v]:
                    model.add(r[i][v] >= sum(ys) - x[v][a])
                else:  # the label is outside v's domain: choosing l always retiles v
                    model.add(r[i][v] >= sum(ys))
    # Objective: Σ_e w(e) (Σ_l base(l) y[e, l] + Σ_v c(v) r[e, v]).
    terms = []
    for i, e in enumerate(instance.edges):
        terms += [e.weight * e.base_cost(t) * y[i][t] for t in range(len(e.tuples)) if e.base_cost(t)]
        terms += [e.weight * instance.vertex_weight[v] * r[i][v] for v in e.vertices
                  if e.weight * instance.vertex_weight[v]]
    model.minimize(sum(terms) if terms else 0)
    return model, x, y, r


def _add_hint(model: cp_model.CpModel, instance: Instance, hint: np.ndarray, x: list[dict],
              y: list[list], r: list[dict]) -> None:
    """AddHint of a full labeling: its labels, its best feasible labeling per edge and the retilings."""
    for v in range(instance.n):
        for a, var in x[v].items():
            model.add_hint(var, int(hint[v]) == a)
    for i, t in enumerate(instance.choices(hint)):
        e = instance.edges[i]
        for k, var in enumerate(y[i]):
            model.add_hint(var, k == t)
        for j, v in enumerate(e.vertices):
            model.add_hint(r[i][v], int(hint[v]) != e.tuples[t][j])
