"""The dynamic program over the plan family: Alpa's inter-operator pass ("Alpa: Automating Inter- and
Intra-Operator Parallelism for Distributed Deep Learning", Zheng et al., OSDI 2022, §5.2, Eq. 2–5), with
tile as the intra-operator pass.

Stages are runs ``[i, j)`` of the units on a sub-mesh ``m`` (:mod:`onnxpart.plan.cluster`); a pipeline of
stages on meshes whose sizes sum to at most ``K`` devices (the cluster's over the replicas). Given per
(i, j, m) a latency contribution ``lat`` (the stage's compute and its incoming transfer) and a period ``per``
(compute plus both transfers), the objective of ``M`` micro-batches is

    T = Σ_s lat_s + (M − 1) · max_s per_s                                      (Alpa Eq. 2; GPipe)

For a fixed cap ``t`` on the period, ``G[i][k]`` — the least Σ lat of units ``i ..`` on at most ``k``
devices with every period ≤ ``t`` — obeys ``G[i][k] = min_{j > i, m} lat(i, j, m) + G[j][k − |m|]``
(Alpa Eq. 3–4). :func:`solve` sweeps ``t`` over the periods that occur, ascending, and stops once
``(M − 1) · t`` plus the least Σ lat cannot beat the best found (Alpa §5.2's early stop).

With more candidate periods than :data:`EXACT_CANDIDATES`, the periods are grouped, each group spanning at
most a factor ``1 + STEP`` (:func:`caps`): for an upper bound the cap is the group's largest, so the plan found
costs at most ``STEP`` more than the optimum; for a lower bound (``bound=True``) a group is priced
``G(cap: its largest) + (M − 1) · its least``, which no plan whose period falls in it beats — still proven.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Up to this many distinct periods every one is a cap (exact: the tests' brute force compares).
EXACT_CANDIDATES = 4096
#: The relative step between kept caps beyond that.
STEP = 1e-3


@dataclass(frozen=True)
class Found:
    """The best plan of the sweep: its objective, and stages as (first unit, end unit, mesh index)."""

    value: float
    stages: tuple[tuple[int, int, int], ...]


def _least_sum(lat: np.ndarray, sizes: np.ndarray, devices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G (module docstring) and its choices (end unit, mesh) per (i, k); ``lat`` is inf where not allowed."""
    units, meshes = lat.shape[0] - 1, lat.shape[2]
    g = np.full((units + 1, devices + 1), math.inf)
    g[units, :] = 0.0
    end = np.zeros((units + 1, devices + 1), dtype=np.int64)
    mesh = np.zeros((units + 1, devices + 1), dtype=np.int64)
    for i in range(units - 1, -1, -1):
        for m in range(meshes):
            s = int(sizes[m])
            if s > devices:
                continue
            vals = lat[i, i + 1:, m][:, None] + g[i + 1:, :devices + 1 - s]
            j = vals.argmin(axis=0)
            best = vals[j, np.arange(devices + 1 - s)]
            better = best < g[i, s:]
            g[i, s:] = np.where(better, best, g[i, s:])
            end[i, s:] = np.where(better, j + i + 1, end[i, s:])
            mesh[i, s:] = np.where(better, m, mesh[i, s:])
    return g, end, mesh


def _stages(end: np.ndarray, mesh: np.ndarray, sizes: np.ndarray, devices: int) -> tuple[tuple[int, int, int], ...]:
    out, i, k = [], 0, devices
    while i < end.shape[0] - 1:
        j, m = int(end[i, k]), int(mesh[i, k])
        out.append((i, j, m))
        i, k = j, k - int(sizes[m])
    return tuple(out)


def caps(per: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidate periods as groups, ascending: (least, largest) of each. Up to :data:`EXACT_CANDIDATES`
    distinct periods each is its own group; beyond, a group spans at most a factor ``1 + STEP``."""
    values = np.unique(per[np.isfinite(per)])
    if len(values) <= EXACT_CANDIDATES:
        return values, values
    lows: list[float] = []
    highs: list[float] = []
    for v in values:
        if lows and v <= lows[-1] * (1 + STEP):
            highs[-1] = v
        else:
            lows.append(v)
            highs.append(v)
    return np.array(lows), np.array(highs)


def solve(lat: np.ndarray, per: np.ndarray, sizes: np.ndarray, devices: int, micro_batches: int,
          bound: bool = False, deadline: float | None = None, clock=None) -> Found | None:
    """The least T (module docstring) over plans on at most ``devices`` devices; None when no plan exists.
    ``lat``, ``per``: arrays (units + 1, units + 1, meshes), inf where a stage is not allowed (memory, j ≤ i).
    For each group of caps (:func:`caps`) the program runs with the group's largest as the cap: an upper bound
    prices its plan, ``bound=True`` prices ``G + (M − 1) · the group's least`` — below every plan whose period
    falls in the group, so the least over groups is a proven bound (the optimum when no group was merged).
    ``deadline`` (on ``clock``) stops an upper-bound sweep early (its best so far); a bound sweep ignores it."""
    g, end, mesh = _least_sum(lat, sizes, devices)
    least = float(g[0, devices])
    if not math.isfinite(least):
        return None
    stages = _stages(end, mesh, sizes, devices)
    best = Found(least + (micro_batches - 1) * _period(per, stages), stages)
    if micro_batches == 1:
        return best
    lows, highs = caps(per)
    best = best if not bound else Found(math.inf, ())
    for k in range(_first_feasible(lat, per, sizes, devices, highs), len(lows)):
        if (micro_batches - 1) * lows[k] + least >= best.value:
            break
        if not bound and deadline is not None and clock() >= deadline:
            break
        g, end, mesh = _least_sum(np.where(per <= highs[k], lat, math.inf), sizes, devices)
        if not math.isfinite(g[0, devices]):
            continue
        stages = _stages(end, mesh, sizes, devices)
        value = g[0, devices] + (micro_batches - 1) * (lows[k] if bound else _period(per, stages))
        if value < best.value:
            best = Found(float(value), stages)
    return best


def _first_feasible(lat, per, sizes, devices: int, highs: np.ndarray) -> int:
    """The index of the first group under whose cap some plan exists (feasibility grows with the cap:
    bisection). Groups before it price no plan, so a sweep starting there misses none."""
    low, high = 0, len(highs) - 1
    while low < high:
        middle = (low + high) // 2
        g, _, _ = _least_sum(np.where(per <= highs[middle], lat, math.inf), sizes, devices)
        if math.isfinite(g[0, devices]):
            high = middle
        else:
            low = middle + 1
    return low


def _period(per: np.ndarray, stages) -> float:
    return max(float(per[i, j, m]) for i, j, m in stages)
