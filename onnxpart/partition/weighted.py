"""Weighted bottleneck bound: Section 3.2's three-superblock relaxation with any pigeonhole weight, on CP-SAT.

Lemma 3.3's pigeonhole works for every weight π ≥ 0, not only work: the k blocks of a partition split
π(V), so some block P holds π(P) ≥ π(V)/k, and OPT ≥ f(P). P = I_j ∖ I_{j−1} for two ideals, so

    OPT ≥ min { f(S) : S = Y ∖ A for ideals A ⊆ Y, π(S) ≥ π(V)/k }                (weighted Eq. 14)

With π = work this is exactly the ``bottleneck`` MIP of Section 3.2 (Eq. 14 with L = Σ work / k; the
``max work`` part of L is the convex-block bound's business). Weights that also count an op's tensors,
π = work + α·io({v}) (io({v}) = the transfer of every tensor v produces or reads), force the heavy block
to hold ops whose tensors it must pay for, so its cost must exceed Σ work / k by their io — the io that
Σ work / k (the LP relaxation of the exact MIP, whatever the branching) cannot see on graphs such as the
REGAL family. Every α ≥ 0 gives a valid bound; :func:`weighted_bottleneck` tries a few and keeps the best.

The model is the superblock structure of Figure 3 for k = 3 in booleans: a_v (v in superblock 1), y_v
(v in superblock 1 or 2), a_v ≤ y_v, a_v ≤ a_u and y_v ≤ y_u for every edge u → v (Eq. 8), x_v = y_v − a_v
(v ∈ S); per tensor t, c_t ≥ x_u − x_v and c_t ≥ x_v − x_u for its producer u and each consumer v, so
c_t = 1 whenever t has a point in S and one outside (Eqs. 9–10: it is paid once, Eq. 1). The objective
Σ work·x + Σ transfer·c is f(S) without the overflow of Eq. (2), which is ≥ 0 (dropping it keeps a lower
bound). CP-SAT (with its LP relaxation at linearization level 2) solves these single-block models where
HiGHS' branch and bound stalls at the LP bound Σ work / k.

Integer data: CP-SAT needs integer coefficients, so costs are scaled by s and rounded **down** (every
set's integer objective is ≤ s·f(S)) and the weights are integers by construction (the pigeonhole holds
for them exactly: π(S) ≥ ⌈π(V)/k⌉). The solver's proven objective bound divided by s is then a lower
bound on OPT, also when it stops at the time limit.

Search, in two runs on one model. CP-SAT's default search first, for ``DEFAULT_SEARCH_SHARE`` of the
time: it finds solutions and closes small models outright (REGAL n = 113, k = 8, α = 0.5: optimal in
9 s), but stopped early its bound stays at the LP's. If it does not finish, CP-SAT's LB-tree search
(``optimize_with_lb_tree_search``) takes the rest, with the objective capped at the first run's
incumbent: it branches to raise the lower bound, and its bound rises steadily (REGAL n = 150–190,
k = 8, 20 s: +1.2% to +2.8% over the default search on all 6 graphs measured) where the default
search's jumps only at the end. The bound reported is the better of the two runs' proven bounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from ortools.sat.python import cp_model

from onnxpart.partition.cuts import singleton_costs
from onnxpart.partition.exact import BoundResult
from onnxpart.partition.model import Instance
from onnxpart.solvers import solve_cpsat, to_integers

#: The α of π = work + α·io({v}) tried in turn (0 is Section 3.2's bottleneck bound itself). Solved to
#: optimality on the REGAL graphs at k = 8, α = 0.5 gives the best bound on 6 of 10 and α = 0 on the
#: others. α = 0.25 is left out so these two get its time: in 15 s each, α ∈ {0, 0.25, 0.5} prove within
#: 1% of each other (5 REGAL graphs), and a longer run on one α proves more than two short ones.
ALPHAS = (0.0, 0.5)
DEFAULT_SEARCH_SHARE = 0.4  # of each model's time, for CP-SAT's default search before the LB tree
_UNITS = float(2 ** 30)  # integer units for Σ work + Σ transfer (and for Σ weights)
_MARGIN = 1e-12  # keeps floor(x·s) ≤ x·s despite the rounding of the product


def pigeonhole_weights(inst: Instance, alpha: float) -> np.ndarray:
    """Integer weights ∝ work + α·io({v}) (any non-negative integers are valid)."""
    weight = inst.work + alpha * (singleton_costs(inst) - inst.work)
    total = float(weight.sum())
    if total <= 0:
        return np.zeros(inst.n, dtype=np.int64)
    return to_integers(weight, unit=total / _UNITS)[0]  # ⌊2³⁰·weight/Σ⌋, rounded once


def heavy_block_bound(inst: Instance, k: int, weights: Sequence[int], time_limit: float,
                      seed: int = 0, on_bound: Callable[[float], None] | None = None) -> tuple[float, str]:
    """(min f(S) over S = Y ∖ A with weights(S) ≥ ⌈weights(V)/k⌉, proven by CP-SAT; its status). The value
    is a lower bound on OPT (module doc), also at the time limit; ``on_bound`` receives it (in the same
    units) each time CP-SAT proves more. ``time_limit`` includes building the model."""
    start = time.perf_counter()
    n = inst.n
    weights = np.asarray(weights, dtype=np.int64)
    total = float(inst.work.sum() + inst.transfer.sum())
    if total <= 0 or weights.sum() <= 0:
        return 0.0, "optimal"  # nothing to pay, or no block needs anything
    work, scale = to_integers(inst.work, _UNITS, "down", total=total, margin=_MARGIN)  # module doc
    transfer, _ = to_integers(inst.transfer, _UNITS, "down", total=total, margin=_MARGIN)

    model = cp_model.CpModel()
    before = [model.NewBoolVar(f"a{v}") for v in range(n)]
    upto = [model.NewBoolVar(f"y{v}") for v in range(n)]
    inside = [model.NewBoolVar(f"x{v}") for v in range(n)]
    for v in range(n):
        model.AddImplication(before[v], upto[v])
        model.Add(inside[v] == upto[v] - before[v])
    for u, v in inst.edges().tolist():  # Eq. (8) for both superblock boundaries
        model.AddImplication(before[v], before[u])
        model.AddImplication(upto[v], upto[u])
    model.Add(sum(int(p) * inside[v] for v, p in enumerate(weights) if p)
              >= -(-int(weights.sum()) // k))
    crossing = []
    for t in range(inst.num_tensors):
        u, cut = int(inst.producer[t]), model.NewBoolVar(f"c{t}")
        for v in inst.consumers(t).tolist():
            model.Add(cut >= inside[u] - inside[v])
            model.Add(cut >= inside[v] - inside[u])
        crossing.append(cut)
    objective = (sum(int(w) * inside[v] for v, w in enumerate(work) if w)
                 + sum(int(c) * crossing[t] for t, c in enumerate(transfer) if c))
    model.Minimize(objective)

    def in_units(bound: float) -> float:
        return max(bound, 0.0) / scale * (1.0 - 1e-9) if math.isfinite(bound) else 0.0

    report = None if on_bound is None else (lambda bound: on_bound(in_units(bound)))
    first, _ = solve_cpsat(model, DEFAULT_SEARCH_SHARE * time_limit - (time.perf_counter() - start), workers=1,
                           seed=seed, parameters={"linearization_level": 2}, on_bound=report)
    bound, status = first.bound, first.status
    left = time_limit - (time.perf_counter() - start)
    if status != "optimal" and left > 0.05:
        if first.objective is not None:  # lets the LB tree prune every node that cannot beat it
            model.Add(objective <= int(round(first.objective)))
        second, _ = solve_cpsat(model, left, workers=1, seed=seed, on_bound=report,
                                parameters={"linearization_level": 2, "optimize_with_lb_tree_search": True})
        bound, status = max(bound, second.bound), second.status
    return in_units(bound), status


def weighted_bottleneck(inst: Instance, k: int, time_limit: float, seed: int = 0,
                        alphas: Sequence[float] = ALPHAS,
                        on_bound: Callable[[float], None] | None = None) -> BoundResult:
    """The best :func:`heavy_block_bound` over π = work + α·io({v}) for α in ``alphas`` (method
    ``weighted-bottleneck``). Each α but the last gets half of what is left of ``time_limit``, and the
    time one leaves unused goes to the next. ``on_bound`` receives the best bound proven so far."""
    start = time.perf_counter()
    best, parts, statuses = 0.0, [], []

    def report(value: float) -> None:
        if on_bound is not None:
            on_bound(max(best, value))

    for i, alpha in enumerate(alphas):
        left = time_limit - (time.perf_counter() - start)
        if left <= 0.05:
            break
        share = left if i == len(alphas) - 1 else left / 2
        value, status = heavy_block_bound(inst, k, pigeonhole_weights(inst, alpha), share, seed, report)
        parts.append(value)
        statuses.append(status)
        best = max(best, value)
    status = "optimal" if len(statuses) == len(alphas) and all(s == "optimal" for s in statuses) else "time_limit"
    note = "; ".join(f"alpha={a:g}: {v:.6g} ({s})" for a, v, s in zip(alphas, parts, statuses))
    return BoundResult("weighted-bottleneck", best if parts else None, status, time.perf_counter() - start,
                       note=note, parts=parts)
