"""Simple proven lower bounds on the optimal makespan, and the combination of all bounds.

Every value here is a proof, never an incumbent (ARCHITECTURE.md, "Bounds"):

* :func:`critical_path_bound` — the longest path with each op at its fastest allowed time. *Proof:*
  along a path every op starts after its predecessor ends (transfers only add delay), so the makespan
  is at least the sum of the path's durations, each at least the op's fastest time.
* :func:`work_bound` — total work at best speed over the number of devices,
  ``Σ_i min_u t(i,u) / K``. *Proof:* each device computes at most ``C`` seconds in a schedule of
  makespan ``C`` (it runs one op at a time inside ``[0, C]``), so ``K·C ≥ Σ_u busy_u = Σ_i t(i, π(i))
  ≥ Σ_i min_u t(i,u)``.
* :func:`load_lp_bound` — the same argument without the averaging: the LP relaxation of unrelated
  machine scheduling, ``min C`` s.t. ``Σ_u x_iu = 1``, ``Σ_i t(i,u)·x_iu ≤ C`` for every ``u``, memory
  (3.7) ``Σ_i mem_i·x_iu ≤ capacity_u``, ``x ≥ 0`` (any schedule's mapping is a feasible 0/1 point with
  ``C`` = its makespan). It is at least :func:`work_bound` (sum the load rows).
* :func:`path_lp_bound` — the load LP with per-op end times ``e`` and the precedence of 3.3:
  ``e_i ≥ Σ_u t(i,u)·x_iu``, ``e_j ≥ e_i + Σ_v t(j,v)·x_jv + Σ_v m_ev·y_ev`` for every edge ``e = (i,
  j)`` with ``y_ev ≥ x_jv − x_iv``, ``y ≥ 0`` and ``m_ev = min_{u≠v} delay_e(u, v)``, and ``C ≥ e_i``.
  *Proof:* a schedule's 0/1 mapping with ``e`` = its end times satisfies every row: ``j`` on ``v`` ends
  at least its duration after ``i`` ends, plus, when ``i`` is on another device (``y_ev = 1``), at least
  the cheapest transfer into ``v``. It is at least the load LP and the critical path (its rows contain
  theirs: ``Σ_v t(j,v)·x_jv ≥ min_v t(j,v)``).
* :func:`combine` — the best of the entries (exact's proven bound, SPLIT's, the simple ones).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from onnxpart.certificate import LowerBound
from onnxpart.schedule.model import Instance
from onnxpart.solvers import SparseModel, solve_highs


def _fastest(inst: Instance) -> list[float]:
    return [min(inst.time[i, u] for u in inst.allowed(i)) for i in range(inst.n)]


def critical_path_bound(inst: Instance) -> LowerBound:
    """Longest path, each op at its fastest allowed device (module docstring)."""
    t0 = time.perf_counter()
    fast = _fastest(inst)
    finish = [0.0] * inst.n
    for i in inst.topo:
        finish[i] = fast[i] + max((finish[p] for p in inst.preds[i]), default=0.0)
    return LowerBound("critical-path", max(finish), "bound", "formula", time.perf_counter() - t0,
                      "longest path at each op's fastest device; transfers taken as free")


def work_bound(inst: Instance) -> LowerBound:
    """Total work at each op's fastest device over the number of devices (module docstring)."""
    t0 = time.perf_counter()
    return LowerBound("work", sum(_fastest(inst)) / inst.k, "bound", "formula", time.perf_counter() - t0,
                      "Σ fastest op times / number of devices")


def load_lp_bound(inst: Instance, time_limit: float = 10.0) -> LowerBound:
    """LP relaxation of the per-device load (module docstring), solved by HiGHS."""
    t0 = time.perf_counter()
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    x = [{u: lp.var(0, 1) for u in inst.allowed(i)} for i in range(inst.n)]
    for i in range(inst.n):
        lp.row({col: 1.0 for col in x[i].values()}, 1.0, 1.0)
    for u in range(inst.k):
        lp.row({**{x[i][u]: inst.time[i, u] for i in range(inst.n) if u in x[i]}, c: -1.0}, upper=0.0)
        if math.isfinite(inst.capacity[u]):
            lp.row({x[i][u]: inst.mem[i] for i in range(inst.n) if u in x[i]}, upper=inst.capacity[u])
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else (math.inf if res.status == "infeasible" else None)
    return LowerBound("load-lp", value, res.status, "highs", time.perf_counter() - t0,
                      "LP relaxation: fractional mapping, every device's load ≤ C, memory (3.7)")


def path_lp_bound(inst: Instance, time_limit: float = 10.0, integer: bool = False,
                  nodes: int | None = None) -> LowerBound:
    """The load LP with the precedence rows of constraint 3.3 added (module docstring), by HiGHS;
    ``integer``: with a 0/1 mapping (a MIP whose proven dual bound is read, also at the time limit or
    after ``nodes`` branch-and-bound nodes)."""
    t0 = time.perf_counter()
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    x = [{u: lp.var(0, 1, integer=integer) for u in inst.allowed(i)} for i in range(inst.n)]
    end = [lp.var(0, math.inf) for _ in range(inst.n)]
    dur = [{col: inst.time[i, u] for u, col in x[i].items()} for i in range(inst.n)]
    for i in range(inst.n):
        lp.row({col: 1.0 for col in x[i].values()}, 1.0, 1.0)
        lp.row({end[i]: 1.0, **{col: -t for col, t in dur[i].items()}}, lower=0.0)  # e_i ≥ its duration
        lp.row({c: 1.0, end[i]: -1.0}, lower=0.0)
    for u in range(inst.k):
        lp.row({**{x[i][u]: inst.time[i, u] for i in range(inst.n) if u in x[i]}, c: -1.0}, upper=0.0)
        if math.isfinite(inst.capacity[u]):
            lp.row({x[i][u]: inst.mem[i] for i in range(inst.n) if u in x[i]}, upper=inst.capacity[u])
    for e, (i, j, _) in enumerate(inst.edges):
        row = {end[j]: 1.0, end[i]: -1.0, **{col: -t for col, t in dur[j].items()}}
        for v, xjv in x[j].items():
            into = [inst.delays[e, u, v] for u in x[i] if u != v]
            if not into or min(into) <= 0:
                continue
            moved = lp.var(0, math.inf)  # ≥ x_jv − x_iv: j on v, i elsewhere
            lp.row({moved: 1.0, xjv: -1.0, **({x[i][v]: 1.0} if v in x[i] else {})}, lower=0.0)
            row[moved] = -min(into)
        lp.row(row, lower=0.0)
    res = solve_highs(lp.highs(), time_limit, node_limit=nodes)
    value = res.bound if math.isfinite(res.bound) or res.status == "infeasible" else None
    return LowerBound("path-mip" if integer else "path-lp", value, res.status, "highs", time.perf_counter() - t0,
                      f"{'MIP' if integer else 'LP'} relaxation: device loads ≤ C, precedence with transfers (3.3)")


def simple_bounds(inst: Instance, lp: bool = True) -> list[LowerBound]:
    """The closed-form bounds, and the load and path LPs unless ``lp`` is False."""
    out = [critical_path_bound(inst), work_bound(inst)]
    if lp:
        out += [load_lp_bound(inst), path_lp_bound(inst)]
    return out


def combine(bounds: Sequence[LowerBound]) -> LowerBound | None:
    """The entry with the largest proven value (None if none proved anything)."""
    proven = [b for b in bounds if b.value is not None and not math.isnan(b.value)]
    return max(proven, key=lambda b: b.value) if proven else None


def combined_value(bounds: Sequence[LowerBound]) -> float:
    """The best proven value (0.0, trivially proven, when no entry proved anything)."""
    best = combine(bounds)
    return best.value if best is not None else 0.0
