"""What both objectives' list schedulers share: the earliest idle gap on a device (HEFT's insertion
policy), HEFT's upward rank, and turning a solver's start times into a topological placement order.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterable

import numpy as np

from onnxpart.schedule.common.instance import Instance


def earliest_gap(slots: list[tuple[float, float]], ready: float, duration: float) -> float:
    """Earliest start ≥ ``ready`` of a ``duration`` job in a device's sorted busy ``slots``. The slots do
    not overlap, so their ends are sorted too: the slots ending by ``ready`` are skipped by bisection."""
    t = ready
    for s, e in itertools.islice(slots, bisect.bisect_right(slots, ready, key=_slot_end), None):
        if s >= t + duration:
            return t
        t = max(t, e)
    return t


def _slot_end(slot: tuple[float, float]) -> float:
    return slot[1]


def upward_rank(inst: Instance, time: np.ndarray | None = None) -> np.ndarray:
    """HEFT's upward rank with mean costs: ``rank(i) = w̄_i + max_j (c̄_ij + rank(j))``, ``w̄_i`` the
    mean of ``time`` (default ``inst.time``) over the devices ``i`` can run on, ``c̄_ij`` the mean finite
    delay over ordered pairs of distinct devices (Topcuoglu et al., 2002)."""
    time = inst.time if time is None else time
    w = np.array([np.mean(time[i, inst.allowed(i)]) for i in range(inst.n)])
    off = ~np.eye(inst.k, dtype=bool)
    c = np.zeros(len(inst.edges))
    for e in range(len(inst.edges)):
        vals = inst.delays[e][off]
        vals = vals[np.isfinite(vals)]
        c[e] = float(vals.mean()) if len(vals) else 0.0
    rank = np.zeros(inst.n)
    for i in reversed(inst.topo):
        rank[i] = w[i] + max((c[e] + rank[inst.edges[e][1]] for e in inst.out_edges[i]), default=0.0)
    return rank


def rank_order(inst: Instance, time: np.ndarray | None = None) -> list[int]:
    """Decreasing upward rank (:func:`upward_rank` of ``time``), ties by BFS position (a topological
    order: ranks never increase along an edge, and BFS puts a predecessor first)."""
    rank = upward_rank(inst, time)
    pos = {v: p for p, v in enumerate(inst.topo)}
    return sorted(range(inst.n), key=lambda i: (-rank[i], pos[i]))


def topological_repair(items: Iterable[Hashable], ready: Callable[[Hashable, set], bool]) -> list:
    """``items`` (sorted by a solver's start time) in that order, each moved after what it reads: passes
    over the items left take every one whose ``ready(item, placed)`` holds. A zero-length predecessor may
    share its successor's start time; the repair puts it first."""
    placed: set = set()
    out: list = []
    pending = list(items)
    while pending:
        rest = []
        for item in pending:
            if ready(item, placed):
                out.append(item)
                placed.add(item)
            else:
                rest.append(item)
        pending = rest
    return out
