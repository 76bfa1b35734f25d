"""What both objectives' list schedulers share: a device's busy intervals and the earliest idle gap on
it (HEFT's insertion policy), HEFT's upward rank, CPoP's priorities and critical path, and turning a
solver's start times into a topological placement order.

HEFT and CPoP follow Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity task scheduling
for heterogeneous computing" (IEEE TPDS 13(3), 2002): an op's mean computation cost ``w̄_i`` is the mean
of its times over the devices that can run it, an edge's mean communication cost ``c̄_ij = L̄ + data_ij /
B̄`` with ``L̄`` the links' mean latency and ``B̄`` their mean bandwidth (:func:`mean_link`). The paper
breaks ties at random; here a tie goes to the op first in BFS order, so the same input gives the same
schedule.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable, Iterable

import numpy as np

from onnxpart.schedule.common.instance import Instance


class Timeline:
    """A device's busy intervals, sorted (they never overlap, so starts and ends are both sorted), and the
    earliest idle gap a job fits in (HEFT's insertion policy). :meth:`earliest` finds the first interval
    ending after ``ready`` by bisection, scans the next :data:`PYTHON_GAPS` gaps in Python (most jobs fit
    there or go last) and the rest in one numpy comparison, so a list scheduler over a 20,000-op graph
    stays in C where a Python walk over the busy list took minutes (issue 30). The intervals are kept
    twice: in Python lists (bisection and the short scan) and in numpy arrays grown in place (the long
    scan; chunked numpy scans had cost ~2 µs of call overhead a chunk)."""

    #: Gaps scanned in Python before the numpy comparison (one numpy call costs as much as some dozens).
    PYTHON_GAPS = 16

    def __init__(self) -> None:
        self._start: list[float] = []
        self._end: list[float] = []
        self._starts = np.empty(16)
        self._ends = np.empty(16)

    def earliest(self, ready: float, duration: float) -> float:
        """The earliest start ≥ ``ready`` at which a ``duration`` job overlaps no interval."""
        start, end = self._start, self._end
        n = len(start)
        first = bisect.bisect_right(end, ready)  # intervals ending by ready: skipped
        if first == n or start[first] >= ready + duration:
            return float(ready)
        # the gap after interval q fits when start[q + 1] ≥ end[q] + duration
        low = min(n - 1, first + self.PYTHON_GAPS)
        for q in range(first, low):
            if start[q + 1] >= end[q] + duration:
                return float(end[q])
        if low < n - 1:
            fits = self._starts[low + 1:n] >= self._ends[low:n - 1] + duration
            q = int(fits.argmax())
            if fits[q]:
                return float(end[low + q])
        return float(end[n - 1])

    def add(self, start: float, end: float) -> None:
        """Book ``[start, end]`` (found by :meth:`earliest`, so it overlaps nothing), kept in (start, end)
        order: among equal starts, zero-length ops first, so that the ends stay sorted too."""
        n = len(self._start)
        at = bisect.bisect_left(self._start, start)
        while at < n and self._start[at] == start and self._end[at] <= end:
            at += 1
        self._start.insert(at, start)
        self._end.insert(at, end)
        if n == len(self._starts):
            self._starts, self._ends = (np.concatenate([a, np.empty(n)]) for a in (self._starts, self._ends))
        for a, value in ((self._starts, start), (self._ends, end)):
            a[at + 1:n + 1] = a[at:n]
            a[at] = value


def mean_link(inst: Instance) -> tuple[float, float]:
    """``(L̄, B̄)``: the mean latency (the receiver's switch cost included: a transfer's fixed part) and the
    mean bandwidth of the links between distinct devices — the system's links, or, for an instance built
    without a system, every ordered pair with a positive bandwidth; ``(0, inf)`` where there is none."""
    if inst.system is not None:
        switch = inst.system.switches()
        links = [(link.latency + switch[v], link.bandwidth) for (_, v), link in inst.system.links.items()]
    else:
        off = ~np.eye(inst.k, dtype=bool) & (inst._bw > 0)
        links = list(zip(inst._lat[off].tolist(), inst._bw[off].tolist()))
    if not links:
        return 0.0, math.inf
    return float(np.mean([lat for lat, _ in links])), float(np.mean([bw for _, bw in links]))


def mean_costs(inst: Instance, time: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(w̄, c̄)``: each op's mean time (of ``time``, default ``inst.time``) over the devices it can run
    on, and each edge's mean communication cost ``L̄ + bytes / B̄`` (:func:`mean_link`)."""
    time = inst.time if time is None else time
    allowed = inst.allowed_mask()
    w = np.where(allowed, time, 0.0).sum(axis=1) / allowed.sum(axis=1)
    latency, bandwidth = mean_link(inst)
    c = np.array([latency + nbytes / bandwidth for _, _, nbytes in inst.edges])
    return w, c


def upward_rank(inst: Instance, time: np.ndarray | None = None) -> np.ndarray:
    """HEFT's upward rank ``rank_u(i) = w̄_i + max_j (c̄_ij + rank_u(j))`` (:func:`mean_costs`)."""
    w, c = mean_costs(inst, time)
    rank = np.zeros(inst.n)
    for i in reversed(inst.topo):
        rank[i] = w[i] + max((c[e] + rank[inst.edges[e][1]] for e in inst.out_edges[i]), default=0.0)
    return rank


def downward_rank(inst: Instance, time: np.ndarray | None = None) -> np.ndarray:
    """CPoP's downward rank ``rank_d(j) = max_i (rank_d(i) + w̄_i + c̄_ij)`` over ``j``'s predecessors
    ``i`` (0 for an entry op)."""
    w, c = mean_costs(inst, time)
    rank = np.zeros(inst.n)
    for j in inst.topo:
        rank[j] = max((rank[inst.edges[e][0]] + w[inst.edges[e][0]] + c[e] for e in inst.in_edges[j]), default=0.0)
    return rank


def rank_order(inst: Instance, time: np.ndarray | None = None) -> list[int]:
    """Decreasing upward rank (:func:`upward_rank` of ``time``), ties by BFS position (a topological
    order: ranks never increase along an edge, and BFS puts a predecessor first)."""
    rank = upward_rank(inst, time)
    pos = {v: p for p, v in enumerate(inst.topo)}
    return sorted(range(inst.n), key=lambda i: (-rank[i], pos[i]))


def cpop_plan(inst: Instance, time: np.ndarray | None = None) -> tuple[list[int], list[int], int]:
    """CPoP's plan: ``(order, critical path, its device)``. An op's priority is ``rank_u + rank_d``; the
    critical path starts at the entry op of the largest priority ``|CP|`` and follows, from each op, its
    first successor whose priority is ``|CP|``; its device is the one running all of it in the least
    time (of ``time``); ``order`` takes, among the ops whose predecessors are all taken, the one of the
    largest priority (the paper's ready queue: the order does not depend on the devices chosen)."""
    time = inst.time if time is None else time
    priority = upward_rank(inst, time) + downward_rank(inst, time)
    pos = {v: p for p, v in enumerate(inst.topo)}
    tolerance = 1e-9 * max(1.0, float(priority.max()))
    op = max((i for i in range(inst.n) if not inst.preds[i]), key=lambda i: (priority[i], -pos[i]))
    path, size = [op], priority[op]
    while True:
        on_path = [j for j in sorted(inst.succs[op], key=pos.__getitem__) if priority[j] >= size - tolerance]
        if not on_path:
            break
        op = on_path[0]
        path.append(op)
    device = int(np.argmin(time[path].sum(axis=0)))
    return _ready_queue_order(inst, priority, pos), path, device


def _ready_queue_order(inst: Instance, priority: np.ndarray, pos: dict[int, int]) -> list[int]:
    """Ops taken one by one, each the ready op (all predecessors taken) of the largest ``priority``, ties
    by BFS position ``pos``."""
    waiting = [len(inst.preds[i]) for i in range(inst.n)]
    ready = [(-priority[i], pos[i], i) for i in range(inst.n) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        *_, i = heapq.heappop(ready)
        order.append(i)
        for j in inst.succs[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (-priority[j], pos[j], j))
    return order


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
