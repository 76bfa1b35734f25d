"""The load LP's Lagrangian dual maximized by cutting planes (Kelley 1960): the load bound where the LP is
skipped, as strong as the LP itself.

Every mapping's makespan is at least each device's load, so for device weights ``λ ≥ 0`` with ``Σ λ = 1``
and memory prices ``μ ≥ 0`` on the devices of finite capacity (constraint 3.7: ``mem_u ≤ capacity_u``)

    makespan ≥ Σ_u λ_u·load_u + Σ_u μ_u·(mem_u − capacity_u)
             ≥ g(λ, μ) = Σ_i min_u (λ_u·t(i,u) + μ_u·mem_i) − Σ_u μ_u·capacity_u,

the minimum over the devices op ``i`` can run on: any ``(λ, μ)`` proves ``g(λ, μ)``, the same bound as
:func:`onnxpart.schedule.latency.bounds.load_dual_bound`, whose maximum over ``(λ, μ)`` is the load LP's
optimum (LP duality). ``g`` is concave and piecewise linear in 2K − 1 free variables, and at each point
its supergradient is read off the minimizing devices (each device's load, and its memory minus its
capacity); Kelley's method maximizes the tightest model ``min_k g_k + s_k·(p − p_k)`` of the cuts met so
far (a (2K + 1)-column LP on HiGHS) and evaluates ``g`` at the model's maximum, O(n·K) time and memory a
step. On the 20,000-op random DAG on CPU + T4 + A100 (issue 30), where memory binds, the subgradient
ascent of ``load_dual_bound`` proved 0.609 s, the load LP (HiGHS, 19 s) 0.7239 s and the cuts 0.7239 s
in 0.05 s (24 steps).
"""

from __future__ import annotations

import math
import time
import weakref

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.instance import Instance
from onnxpart.solvers import SparseModel, solve_highs

#: Most cutting-plane steps (each one evaluation of ``g`` and one small LP).
STEPS = 150
#: The model's maximum within this fraction of the best value proven: the bound is the LP's, stop.
TOLERANCE = 1e-6
#: The memory prices' box, in units of (Σ fastest times) / (Σ op bytes): the price at which an op's
#: bytes cost its share of the work; the box keeps the model bounded before enough cuts are met.
PRICE_BOX = 1e4


def load_cuts_bound(inst: Instance) -> LowerBound:
    """``max g(λ, μ)`` by Kelley's cutting planes (:func:`maximized`): the best value met, each of which is
    proven."""
    t0 = time.perf_counter()
    best, _, taken = maximized(inst)[1:]
    return LowerBound("load-cuts", best, "bound", "formula+highs", time.perf_counter() - t0,
                      f"max of Σ_i min_u (λ_u·t(i,u) + μ_u·mem_i) − Σ_u μ_u·capacity_u by Kelley's cutting "
                      f"planes, {taken} steps")


#: Each instance's :func:`maximized`, while the instance lives: the bound and the load dual's mapping
#: (:mod:`.dual_mapping`) read the same cutting planes, solved once.
_MAXIMA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def maximized(inst: Instance) -> tuple["Dual", float, np.ndarray, int]:
    """``(the instance's Dual, then what :func:`maximize` gives)``, solved once per instance."""
    if inst not in _MAXIMA:
        dual = Dual(inst)
        _MAXIMA[inst] = (dual, *maximize(dual))
    return _MAXIMA[inst]


def maximize(dual: "Dual", steps: int = STEPS) -> tuple[float, np.ndarray, int]:
    """``(the best g met, its point (λ, μ), the steps taken)``: Kelley's cutting planes (module docstring)
    from the uniform weights and no prices (the work bound), until the model's maximum is the best value
    met (to :data:`TOLERANCE`) or ``steps`` steps."""
    point = np.concatenate([np.full(dual.k, 1.0 / dual.k), np.zeros(dual.k)])
    cuts: list[tuple[float, np.ndarray, np.ndarray]] = []
    best, best_point = -math.inf, point
    for step in range(steps):
        value, slope = dual.evaluate(point)
        if value > best:
            best, best_point = value, point
        cuts.append((value, slope, point))
        point, model_max = dual.maximize_model(cuts)
        if point is None or model_max <= best + TOLERANCE * abs(best):
            break
    return best, best_point, step + 1


class Dual:
    """``g`` and its supergradient (module docstring) on one instance, the prices scaled to
    :data:`PRICE_BOX`'s unit."""

    def __init__(self, inst: Instance):
        self.allowed = inst.allowed_mask()
        self.time = np.where(self.allowed, inst.time, 0.0)
        self.capped = np.isfinite(inst.capacity)
        fastest = float(np.where(self.allowed, inst.time, math.inf).min(axis=1).sum())
        self.unit = fastest / max(float(inst.mem.sum()), 1.0) or 1.0
        self.mem = inst.mem * self.unit  # the prices' unit folded into the bytes
        self.capacity = np.where(self.capped, inst.capacity, 0.0) * self.unit
        self.k, self.rows = inst.k, np.arange(inst.n)

    def costs(self, point: np.ndarray) -> np.ndarray:
        """(n, K): ``λ_u·t(i,u) + μ_u·mem_i`` at ``point = (λ, μ)``, ``inf`` where op ``i`` cannot run."""
        weight, price = point[:self.k], point[self.k:]
        return np.where(self.allowed, weight * self.time + price * self.mem[:, None], math.inf)

    def evaluate(self, point: np.ndarray) -> tuple[float, np.ndarray]:
        """``(g(λ, μ), its supergradient)`` at ``point = (λ, μ)``."""
        price = point[self.k:]
        cost = self.costs(point)
        pick = cost.argmin(axis=1)
        load = np.bincount(pick, weights=self.time[self.rows, pick], minlength=self.k)
        used = np.bincount(pick, weights=self.mem, minlength=self.k)
        value = float(cost[self.rows, pick].sum() - price @ self.capacity)
        return value, np.concatenate([load, np.where(self.capped, used - self.capacity, 0.0)])

    def maximize_model(self, cuts: list[tuple[float, np.ndarray, np.ndarray]]) -> tuple[np.ndarray | None, float]:
        """The point maximizing ``min_k value_k + slope_k·(p − p_k)`` over the weights' simplex and the
        prices' box, and that maximum (``(None, -inf)`` if HiGHS does not solve it)."""
        lp = SparseModel()
        bound = lp.var(-math.inf, math.inf, cost=-1.0)
        point = lp.vars(2 * self.k, upper=np.concatenate([np.ones(self.k), np.where(self.capped, PRICE_BOX, 0.0)]))
        lp.row({int(c): 1.0 for c in point[:self.k]}, 1.0, 1.0)
        for value, slope, at in cuts:  # bound ≤ value + slope·(p − at)
            lp.row({bound: 1.0, **{int(c): -float(s) for c, s in zip(point, slope) if s}},
                   upper=value - float(slope @ at))
        res = solve_highs(lp.highs(), 10.0)
        if res.status != "optimal":
            return None, -math.inf
        found = np.clip(np.asarray(res.values)[point], 0.0, None)
        found[:self.k] /= found[:self.k].sum()  # on the simplex however HiGHS rounded: the proof needs Σ λ = 1
        return found, -float(res.objective)
