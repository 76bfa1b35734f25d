"""Checkmate baselines (Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor
Rematerialization", MLSys 2020) on HiGHS: the MILP, and its LP relaxation with two-phase rounding.

Stages follow the input order: stage ``t`` ends with the first computation of the node at position ``t``
and may recompute any earlier node (nodes that may not be recomputed — input nodes and producers of graph
outputs — only in their own stage). Variables (Checkmate §4):

* ``R[t,k]`` (binary): node ``k`` is computed in stage ``t`` (``R[t,t] = 1``);
* ``S[t,x]`` (binary): tensor ``x`` is retained from stage ``t−1`` into stage ``t`` (graph outputs: 1);
* ``U[t,k]`` (continuous): memory at event ``k`` of stage ``t``;
* ``FREE[t,x,k]`` (continuous in [0,1]; at an optimum the product it bounds): ``x`` is freed after
  event ``k`` of stage ``t``.

Constraints: dependencies ``R[t,k] ≤ R[t,q] + S[t,x]`` for each input ``x`` of ``k`` produced by ``q``;
retention ``S[t+1,x] ≤ S[t,x] + R[t,q]``; memory accounting ``U[t,0] = Σ m_x S[t,x] + m_0 R[t,0]``,
``U[t,k] = U[t,k−1] − Σ m_x FREE[t,x,k−1] + m_k R[t,k]``, ``U[t,k] + internal_k R[t,k] ≤ M``; and
``FREE[t,x,k] ≤ R[t,k]``, ``≤ 1 − S[t+1,x]``, ``≤ 1 − R[t,j]`` for each later reader ``j`` of ``x`` in
the stage. Objective: the recomputed duration ``Σ_{k<t} w_k R[t,k]``. The memory rules are those of
:mod:`onnxpart.remat.sequence`, so both formulations share one optimum when ``C_v`` is not binding.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from onnxpart.board import Progress
from onnxpart.remat.model import Instance, MethodResult, Scale, scale
from onnxpart.solvers import SparseModel, solve_highs

log = logging.getLogger(__name__)

RESTRICTION = "the input topological order's stages (no limit on recomputations)"


@dataclass
class _Model:
    lp: SparseModel
    R: dict[tuple[int, int], int]  # (stage, position) -> column
    S: dict[tuple[int, int], int]  # (stage, value) -> column

    def r_terms(self, t: int, k: int, coef: float) -> list[tuple[int, float]]:
        """``coef · R[t, k]`` when that variable exists (a node that is never recomputed has none)."""
        return [(self.R[(t, k)], coef)] if (t, k) in self.R else []


@dataclass(frozen=True)
class _Stages:
    """The input order's stages as the MILP sees them: positions, each value's producer position and
    readers' positions, each position's output size in memory units."""

    instance: Instance
    sc: Scale
    order: tuple[int, ...]
    q: list[int]  # value -> its producer's position
    readers: list[list[int]]  # value -> its readers' positions, ascending
    out_units: list[int]  # position -> the units its outputs take


def _build(instance: Instance, capacity: int) -> _Model:
    """Checkmate's MILP over the input order's stages, one constraint family at a time."""
    sc = scale(instance)
    order = instance.order
    pos = {v: p for p, v in enumerate(order)}
    q = [pos[instance.value_producer[x]] for x in range(len(instance.value_sizes))]
    readers = [sorted(pos[c] for c in instance.value_consumers[x]) for x in range(len(q))]
    stages = _Stages(instance, sc, order, q, readers,
                     [sum(sc.sizes[x] for x in instance.node_outputs[order[k]]) for k in range(len(order))])
    model = _variables(stages)
    for t in range(len(order)):
        _dependencies(model, stages, t)
        _retention(model, stages, t)
        _memory(model, stages, t, capacity)
    return model


def _variables(stages: _Stages) -> _Model:
    """R (stage, position): computed in the stage (the stage's own node always); S (stage, value):
    retained into the stage (values kept to the end always)."""
    instance, sc, order = stages.instance, stages.sc, stages.order
    model = _Model(SparseModel(), {}, {})
    for t in range(len(order)):
        for k in range(t + 1):
            if k == t:
                model.R[(t, k)] = model.lp.var(1, 1)
            elif instance.recomputable(order[k]):
                model.R[(t, k)] = model.lp.var(0, 1, sc.weights[order[k]], integer=True)
        for x in range(len(stages.q)):
            if stages.q[x] < t and (stages.readers[x] or instance.value_to_end[x]):
                model.S[(t, x)] = model.lp.var(1 if instance.value_to_end[x] else 0, 1, integer=True)
    return model


def _dependencies(model: _Model, stages: _Stages, t: int) -> None:
    """An input of a node computed in stage t is recomputed in the stage or retained into it."""
    R, S, q = model.R, model.S, stages.q
    for k in range(t + 1):
        if (t, k) not in R:
            continue
        for x in stages.instance.node_inputs[stages.order[k]]:
            if (t, x) not in S and (t, q[x]) not in R:
                model.lp.row([(R[(t, k)], 1.0)], -np.inf, 0.0)
                continue
            model.lp.row([(R[(t, k)], 1.0)] + model.r_terms(t, q[x], -1.0)
                         + ([(S[(t, x)], -1.0)] if (t, x) in S else []), -np.inf, 0.0)


def _retention(model: _Model, stages: _Stages, t: int) -> None:
    """Only what was resident in stage t can be carried into stage t+1."""
    S, q = model.S, stages.q
    for x in range(len(q)):
        if (t + 1, x) in S and q[x] < t:
            model.lp.row([(S[(t + 1, x)], 1.0)] + ([(S[(t, x)], -1.0)] if (t, x) in S else [])
                         + model.r_terms(t, q[x], -1.0), -np.inf, 0.0)


def _memory(model: _Model, stages: _Stages, t: int, capacity: int) -> None:
    """Stage t's memory, event by event: U after each computation, with the frees its inputs and outputs allow."""
    lp, R, S, sc = model.lp, model.R, model.S, stages.sc
    previous, frees = None, []
    for k in range(t + 1):
        u = lp.var(0, capacity)
        terms = [(u, 1.0)] + model.r_terms(t, k, -float(stages.out_units[k]))
        if previous is None:
            terms += [(S[(t, x)], -float(sc.sizes[x])) for x in range(len(stages.q)) if (t, x) in S]
        else:
            terms += [(previous, -1.0)] + frees
        lp.row(terms, 0.0, 0.0)
        v = stages.order[k]
        if sc.internal[v] and (t, k) in R:
            lp.row([(u, 1.0), (R[(t, k)], float(sc.internal[v]))], -np.inf, capacity)
        previous, frees = u, []
        if (t, k) in R:
            frees = _frees(model, stages, t, k)


def _frees(model: _Model, stages: _Stages, t: int, k: int) -> list[tuple[int, float]]:
    """FREE variables of the values node ``k`` of stage t reads or writes: freed only when it is computed,
    not retained into stage t+1 and read by no later node of the stage."""
    lp, R, S, instance = model.lp, model.R, model.S, stages.instance
    v = stages.order[k]
    frees = []
    for x in set(instance.node_inputs[v]) | set(instance.node_outputs[v]):
        if instance.value_to_end[x]:
            continue
        later = [j for j in stages.readers[x] if k < j <= t]
        if t in later:
            continue  # the stage's own node still reads it
        f = lp.var(0, 1)
        frees.append((f, float(stages.sc.sizes[x])))
        lp.row([(f, 1.0), (R[(t, k)], -1.0)], -np.inf, 0.0)
        if (t + 1, x) in S:
            lp.row([(f, 1.0), (S[(t + 1, x)], 1.0)], -np.inf, 1.0)
        for j in later:
            if (t, j) in R:
                lp.row([(f, 1.0), (R[(t, j)], 1.0)], -np.inf, 1.0)
    return frees


def _sequence(instance: Instance, model: _Model, values) -> tuple[int, ...]:
    n = len(instance.order)
    return tuple(instance.order[k] for t in range(n) for k in range(t + 1)
                 if (t, k) in model.R and values[model.R[(t, k)]] > 0.5 and instance.order[k] < instance.n_ops)


def solve_checkmate(instance: Instance, budget: float, time_limit: float, seed: int = 0,
                    progress=None) -> MethodResult:
    """The Checkmate MILP on HiGHS; the lower bound is HiGHS's proven dual bound."""
    sc = scale(instance)
    capacity = sc.budget_units(budget, instance.constant_bytes)
    start = time.perf_counter()
    model = _build(instance, capacity)
    highs = model.lp.highs(relax=False)
    best_at: list[float] = []

    def improved(event) -> None:
        best_at.append(time.perf_counter() - start)
        if progress:
            progress(Progress(best_at[-1], instance.base_duration + sc.quantum * event.data_out.objective_function_value,
                              instance.base_duration + sc.quantum * max(event.data_out.mip_dual_bound, 0.0),
                              "checkmate"))

    highs.cbMipImprovingSolution.subscribe(improved)
    result = solve_highs(highs, max(time_limit - (time.perf_counter() - start), 1.0), seed=seed)
    notes = {"columns": len(model.lp.cost), "rows": len(model.lp.row_lower)}
    if result.status == "infeasible":
        return MethodResult(method="checkmate", status="infeasible", sequence=None, bound=None,
                            bound_status="infeasible", seconds=time.perf_counter() - start, time_to_best=None,
                            restriction=RESTRICTION, solver="highs", notes=notes)
    bound = instance.base_duration + sc.quantum * max(result.bound, 0.0) if result.bound > -1e300 else None
    sequence = _sequence(instance, model, result.values) if result.has_solution else None
    status = result.status if sequence is not None else "no_solution"
    return MethodResult(method="checkmate", status=status, sequence=sequence, bound=bound,
                        bound_status=result.status if bound is not None else "none",
                        seconds=time.perf_counter() - start, time_to_best=best_at[-1] if best_at else None,
                        restriction=RESTRICTION, solver="highs", notes=notes)


def solve_checkmate_lp(instance: Instance, budget: float, time_limit: float, seed: int = 0) -> MethodResult:
    """Checkmate's LP relaxation with two-phase rounding (Checkmate §5.2): round the retention matrix
    ``S`` at 0.5, then recompute exactly what the rounded ``S`` leaves missing. The result may exceed the
    budget (the paper's Table 2 shows it often does); the LP optimum is a proven lower bound."""
    sc = scale(instance)
    capacity = sc.budget_units(budget, instance.constant_bytes)
    start = time.perf_counter()
    model = _build(instance, capacity)
    result = solve_highs(model.lp.highs(relax=True), time_limit, seed=seed)
    notes = {"columns": len(model.lp.cost), "rows": len(model.lp.row_lower)}
    if not result.has_solution:
        status = "infeasible" if result.status == "infeasible" else "no_solution"
        return MethodResult(method="checkmate-lp", status=status, sequence=None, bound=None,
                            bound_status=status if status == "infeasible" else "none",
                            seconds=time.perf_counter() - start, time_to_best=None, restriction=RESTRICTION,
                            solver="highs", notes=notes)
    bound = _lp_bound(instance, result.objective) if result.status == "optimal" else None
    sequence = _round(instance, model, result.values)
    seconds = time.perf_counter() - start
    return MethodResult(method="checkmate-lp", status="rounded", sequence=sequence, bound=bound,
                        bound_status="optimal" if bound is not None else "none", seconds=seconds,
                        time_to_best=seconds, restriction=RESTRICTION + ", LP relaxation", solver="highs",
                        notes=notes)


def _lp_bound(instance: Instance, objective: float) -> float:
    """The duration bound of an LP optimum (in quanta): every integer solution's recomputed duration is a
    whole number of quanta (the weights are floored to integers, :func:`scale`), so the bound rounds up;
    the relative ``1e-6`` absorbs HiGHS's tolerances."""
    return instance.base_duration + scale(instance).quantum * max(math.ceil(objective - 1e-6 * max(1.0, objective)), 0)


def lp_lower_bound(instance: Instance, budget: float, time_limit: float, seed: int = 0) -> tuple[float | None, str]:
    """The Checkmate LP relaxation's optimum as a proven lower bound on the duration, and its status
    (``optimal`` with a bound; ``infeasible``: no stage-structured sequence fits the budget; else
    ``time_limit``/``error`` and no bound — an LP stopped early proves nothing).

    It bounds Moccasin's fixed-order problem too: both use the input order's stages (Moccasin Eq. 11,
    Checkmate's stages) and the same retention-interval memory (Eq. 4; see the module docstring — a
    tensor retained into stage ``t`` is never recomputed in ``t`` by a tightest sequence, because every
    reader follows its producer in position order, so ``S`` and ``R`` never count one value twice), and
    Checkmate allows any number of recomputations where Moccasin allows ``C_v``: the MILP's optimum is at
    most Moccasin's, and the LP's at most the MILP's."""
    capacity = scale(instance).budget_units(budget, instance.constant_bytes)
    result = solve_highs(_build(instance, capacity).lp.highs(relax=True), time_limit, seed=seed)
    if result.status == "optimal" and result.objective is not None:
        return _lp_bound(instance, result.objective), "optimal"
    return None, result.status


def _round(instance: Instance, model: _Model, values) -> tuple[int, ...]:
    """Two-phase rounding: ``S* = [S_lp ≥ ½]``, then per stage the least ``R`` that makes ``S*`` valid."""
    order = instance.order
    n = len(order)
    pos = {v: p for p, v in enumerate(order)}
    n_values = len(instance.value_sizes)
    resident = [False] * n_values  # retained into the current stage
    sequence: list[int] = []
    for t in range(n):
        needed = [False] * n_values
        compute = [False] * (t + 1)
        compute[t] = True
        for k in range(t, -1, -1):
            v = order[k]
            if not compute[k]:
                continue
            for x in instance.node_inputs[v]:
                if not resident[x]:
                    compute[pos[instance.value_producer[x]]] = True
                needed[x] = True
        sequence += [order[k] for k in range(t + 1) if compute[k] and order[k] < instance.n_ops]
        available = [resident[x] or compute[pos[instance.value_producer[x]]]
                     if pos[instance.value_producer[x]] <= t else False for x in range(n_values)]
        for x in range(n_values):
            wanted = (t + 1, x) in model.S and values[model.S[(t + 1, x)]] >= 0.5
            must = instance.value_to_end[x] or (not instance.recomputable(instance.value_producer[x])
                                                and any(pos[c] > t for c in instance.value_consumers[x]))
            resident[x] = available[x] and (wanted or must)
    return tuple(sequence)
