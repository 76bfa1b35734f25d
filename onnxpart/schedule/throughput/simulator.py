"""List scheduling of a batched schedule's slices, and the independent validator of every throughput
answer (the semantics of :mod:`onnxpart.schedule.throughput.model`).

:func:`simulate` starts each slice, in order, when its inputs have arrived — every predecessor's slice
sharing inputs with it has ended, plus the transfer of those inputs across devices (contention-free
links) — and its device is free (append), or in the earliest idle gap that fits (insertion).
:func:`validate` checks a :class:`BatchSchedule` from scratch: (3.4), (3.5), precedence per input with
the transfers of :func:`slice_transfers`, no overlap per device, memory (3.7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxpart.certificate import slack
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.list_scheduling import Timeline, topological_repair
from onnxpart.schedule.throughput.model import Split, memory_violations, overlap, overlapping_slices, ranges, slices


@dataclass
class BatchSchedule:
    """Every slice ``(op, device)`` with size, start and end; ``batch`` inputs in all."""

    batch: int
    splits: list[Split]
    start: dict[tuple[int, int], float]
    end: dict[tuple[int, int], float]
    order: list[tuple[int, int]] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max(self.end.values(), default=0.0)

    @property
    def throughput(self) -> float:
        """Inputs per second: ``L / C`` (Section 3.2)."""
        return self.batch / self.makespan if self.makespan > 0 else math.inf

    @property
    def mapping(self) -> list[Split]:
        return self.splits

    def busy(self, k: int) -> np.ndarray:
        b = np.zeros(k)
        for (i, u), e in self.end.items():
            b[u] += e - self.start[(i, u)]
        return b


def slice_order(inst: Instance, splits: Sequence[Split],
                op_order: Sequence[int] | None = None) -> list[tuple[int, int]]:
    return [(i, u) for i in (inst.topo if op_order is None else op_order) for u in slices(splits, i)]


def ready_time(inst: Instance, i: int, u: int, lohi: tuple[int, int], spans: Sequence[list[tuple[int, int]]],
               end) -> float:
    """When the inputs ``lohi`` of slice ``(i, u)`` have arrived: each predecessor's slice sharing ``c``
    of them ends, plus the transfer of ``c`` inputs (``spans[p]`` is :func:`ranges` of ``p``'s split)."""
    ready = 0.0
    lo, hi = lohi
    for e in inst.in_edges[i]:
        p = inst.edges[e][0]
        for w, (plo, phi) in enumerate(spans[p]):
            c = min(hi, phi) - max(lo, plo)
            if c > 0:
                t = end[(p, w)] if w == u else end[(p, w)] + inst.delay_count(e, w, u, c)
                if t > ready:
                    ready = t
    return ready


@dataclass(frozen=True)
class SliceTransfer:
    """Edge ``e``'s tensors for the inputs ``[lo, hi)`` from slice ``src = (i, u)`` to ``dst = (j, v)``,
    ``u ≠ v``: leaves when ``src`` ends, lasts :meth:`~onnxpart.schedule.common.instance.Instance.delay_count`
    (contention-free links)."""

    edge: int
    src: tuple[int, int]
    dst: tuple[int, int]
    inputs: tuple[int, int]
    bytes: float
    start: float
    end: float


def slice_transfers(inst: Instance, sched: BatchSchedule) -> list[SliceTransfer]:
    """Every transfer ``sched`` needs — one per overlapping producer/consumer slice pair on two devices —
    timed exactly as :func:`validate` charges it; sorted by start."""
    out = []
    for e, (i, u), (j, v), (lo, hi) in overlapping_slices(inst, sched.splits):
        if u != v:
            start = sched.end[(i, u)]
            out.append(SliceTransfer(e, (i, u), (j, v), (lo, hi), inst.edges[e][2] * (hi - lo), start,
                                     start + inst.delay_count(e, u, v, hi - lo)))
    return sorted(out, key=lambda t: (t.start, t.src, t.dst, t.inputs))


def simulate(inst: Instance, splits: Sequence[Split], order: Sequence[tuple[int, int]] | None = None,
             insertion: bool = False) -> BatchSchedule:
    """The list schedule of the slices of ``splits`` in ``order`` (default: ops in BFS order, devices
    ascending); each slice starts when its inputs have arrived and its device is free (append) or in
    the earliest gap (insertion). Transfers that no route carries make the start ``inf``."""
    splits = [tuple(s) for s in splits]
    batch = sum(splits[0]) if splits else 0
    order = list(slice_order(inst, splits) if order is None else order)
    spans = [ranges(s) for s in splits]
    start: dict = {}
    end: dict = {}
    free = np.zeros(inst.k)
    busy = [Timeline() for _ in range(inst.k)]
    for i, u in order:
        d = inst.time_batch(i, u, splits[i][u])
        ready = ready_time(inst, i, u, spans[i][u], spans, end)
        s = busy[u].earliest(ready, d) if insertion else max(ready, free[u])
        start[(i, u)], end[(i, u)] = s, s + d
        free[u] = max(free[u], s + d)
        if insertion:
            busy[u].add(s, s + d)
    return BatchSchedule(batch, splits, start, end, order)


def makespan(inst: Instance, splits: Sequence[Split], op_order=None, insertion: bool = False) -> float:
    """The list schedule's batch makespan, ``inf`` for splits that break memory (SA/EA fitness)."""
    if memory_violations(inst, splits):
        return math.inf
    return simulate(inst, splits, slice_order(inst, splits, op_order), insertion).makespan


def validate(inst: Instance, sched: BatchSchedule) -> list[str]:
    """Everything wrong with ``sched`` (3.4, 3.5, precedence per input with the transfers of
    :func:`slice_transfers`, no overlap, memory); times within :func:`onnxpart.certificate.slack` of
    the makespan."""
    problems: list[str] = []
    eps = slack(sched.makespan)
    if len(sched.splits) != inst.n:
        return ["one split per op needed"]
    for i, s in enumerate(sched.splits):
        if sum(s) != sched.batch:
            problems.append(f"{inst.op_names[i]}'s slices sum to {sum(s)}, not {sched.batch} (3.4)")
        for u, x in enumerate(s):
            if x > 0 and x not in inst.batch_sizes[u]:
                problems.append(f"{inst.op_names[i]}: batch {x} not supported on {inst.device_names[u]} (3.5)")
            if x > 0 and (i, u) not in sched.end:
                problems.append(f"slice {inst.op_names[i]} on {inst.device_names[u]} not scheduled")
    if problems:
        return problems
    problems += memory_violations(inst, sched.splits)
    for (i, u), s in sched.start.items():
        want, ran = inst.time_batch(i, u, sched.splits[i][u]), sched.end[(i, u)] - s
        if s < -eps or abs(ran - want) > eps:
            problems.append(f"slice {inst.op_names[i]}@{inst.device_names[u]} mistimed: " +
                            (f"starts at {s}" if s < -eps else f"runs {ran} s, not {want}"))
    arrive = {(t.edge, t.src, t.dst): t.end for t in slice_transfers(inst, sched)}  # same device: on end
    for e, (i, u), (j, v), _ in overlapping_slices(inst, sched.splits):
        if sched.start[(j, v)] < arrive.get((e, (i, u), (j, v)), sched.end[(i, u)]) - eps:
            problems.append(f"{inst.op_names[j]}@{inst.device_names[v]} starts before its inputs arrive")
    for u in range(inst.k):
        on = sorted((s, sched.end[key]) for key, s in sched.start.items() if key[1] == u)
        for a, b in zip(on, on[1:]):
            if b[0] < a[1] - eps:
                problems.append(f"two slices overlap on {inst.device_names[u]}")
    if not math.isfinite(sched.makespan):
        problems.append("a transfer has no route")
    return problems


def order_by_start(inst: Instance, splits, starts: dict) -> list[tuple[int, int]]:
    """Slices by solver start time, repaired to respect the slice precedence (ties: BFS position)."""
    pos = {v: k for k, v in enumerate(inst.topo)}

    def ready(key: tuple[int, int], placed: set) -> bool:
        i, u = key
        mine = ranges(splits[i])[u]
        return all((p, w) in placed for p in inst.preds[i] for w, r in enumerate(ranges(splits[p]))
                   if overlap(r, mine) > 0)

    return topological_repair(sorted(starts, key=lambda key: (starts[key], pos[key[0]], key[1])), ready)
