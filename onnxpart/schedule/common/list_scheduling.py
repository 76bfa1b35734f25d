"""What both objectives' list schedulers share: a device's busy intervals and the earliest idle gap on
it (HEFT's insertion policy), HEFT's upward rank, and turning a solver's start times into a topological
placement order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np

from onnxpart.schedule.common.instance import Instance


class Timeline:
    """A device's busy intervals, sorted (they never overlap, so starts and ends are both sorted), and the
    earliest idle gap a job fits in (HEFT's insertion policy): :meth:`earliest` finds the first interval
    ending after ``ready`` by bisection and scans the gaps after it in numpy chunks of doubling size, so a
    list scheduler over a 20,000-op graph stays in C where a Python walk over the busy list took minutes
    (issue 30); both kept in place in growing arrays."""

    def __init__(self) -> None:
        self.size = 0
        self._start = np.empty(16)
        self._end = np.empty(16)

    def earliest(self, ready: float, duration: float) -> float:
        """The earliest start ≥ ``ready`` at which a ``duration`` job overlaps no interval."""
        n, start, end = self.size, self._start, self._end
        first = int(np.searchsorted(end[:n], ready, side="right"))  # intervals ending by ready: skipped
        if first == n or start[first] >= ready + duration:
            return float(ready)
        low, step = first, 32
        while low < n - 1:  # the gap after interval q fits when start[q + 1] ≥ end[q] + duration
            high = min(n - 1, low + step)
            fits = np.flatnonzero(start[low + 1:high + 1] >= end[low:high] + duration)
            if fits.size:
                return float(end[low + fits[0]])
            low, step = high, 2 * step
        return float(end[n - 1])

    def add(self, start: float, end: float) -> None:
        """Book ``[start, end]`` (found by :meth:`earliest`, so it overlaps nothing), kept in (start, end)
        order."""
        n = self.size
        if n == len(self._start):
            self._start, self._end = (np.concatenate([a, np.empty(n)]) for a in (self._start, self._end))
        at = int(np.searchsorted(self._start[:n], start, side="left"))
        while at < n and self._start[at] == start and self._end[at] <= end:  # zero-length ops: ends sorted too
            at += 1
        for a, value in ((self._start, start), (self._end, end)):
            a[at + 1:n + 1] = a[at:n]
            a[at] = value
        self.size = n + 1


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
