"""List scheduling of a mapping, and the independent validator of every method's answer.

:func:`simulate` turns a mapping (op → device) and a priority order (a topological order) into a
schedule under the semantics of :mod:`onnxpart.schedule.common.instance`: each op, in order, starts at the
earliest time its inputs have arrived (producer's end + link delay across devices, contention-free
links) and its device is free — after the device's last op (*append*), or in the earliest idle gap
that fits (*insertion*, HEFT's insertion policy).

Why append scheduling over all topological orders reaches the optimum (the brute force in the tests
relies on it): sort any optimal schedule's ops by start time; appending them in that order starts each
op no later than the optimal schedule does (induction over the order), so the makespan is no larger.

:func:`validate` checks a :class:`Schedule` from scratch — durations, precedence with transfer delays,
no overlap per device, memory (constraint 3.7), the makespan — without trusting how it was built.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxpart.certificate import slack
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.list_scheduling import Timeline, topological_repair


@dataclass(frozen=True)
class Transfer:
    """Edge ``src → dst`` moving ``bytes`` from ``src_device`` to ``dst_device`` during [start, end]."""

    src: int
    dst: int
    src_device: int
    dst_device: int
    bytes: float
    start: float
    end: float


@dataclass
class Schedule:
    """A complete schedule: every op's device, start and end; every transfer; the summary numbers."""

    mapping: np.ndarray  # op -> device
    start: np.ndarray  # seconds
    end: np.ndarray
    order: list[int]  # the order the ops were placed in
    transfers: list[Transfer] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    @property
    def latency(self) -> float:
        return self.makespan

    @property
    def throughput(self) -> float:
        """Inferences per second for one input (1 / latency): the latency-mode throughput."""
        return 1.0 / self.makespan if self.makespan > 0 else math.inf

    def busy(self, k: int) -> np.ndarray:
        """Seconds each device computes."""
        return np.bincount(self.mapping, weights=self.end - self.start, minlength=k)

    def memory(self, instance: Instance) -> np.ndarray:
        """Bytes resident on each device under constraint (3.7)'s static model."""
        return np.bincount(self.mapping, weights=instance.mem, minlength=instance.k)


class InfeasibleMapping(ValueError):
    """The mapping breaks a hard rule (cannot run, no route, memory)."""


def _check_order(inst: Instance, order: Sequence[int]) -> None:
    seen = np.zeros(inst.n, dtype=bool)
    if len(order) != inst.n:
        raise ValueError("order must list every op once")
    for i in order:
        if seen[i] or any(not seen[p] for p in inst.preds[i]):
            raise ValueError("order must be a topological order listing every op once")
        seen[i] = True


def ready_time(inst: Instance, i: int, u: int, mapping: Sequence[int], end: Sequence[float]) -> float:
    """When all of op ``i``'s inputs are on device ``u`` (its predecessors already placed)."""
    ready = 0.0
    for e in inst.in_edges[i]:
        p = inst.edges[e][0]
        ready = max(ready, end[p] + inst.delays[e, mapping[p], u])
    return ready


def simulate(inst: Instance, mapping: Sequence[int], order: Sequence[int] | None = None,
             insertion: bool = False, check: bool = True) -> Schedule:
    """The list schedule of ``mapping`` in priority ``order`` (default: the BFS topological order).
    Raises :class:`InfeasibleMapping` if the mapping breaks a hard rule."""
    mapping = np.asarray(mapping, dtype=np.int64)
    order = list(inst.topo if order is None else order)
    if check:
        _check_order(inst, order)
        problems = inst.mapping_violations(mapping)
        if problems:
            raise InfeasibleMapping("; ".join(problems))
    start = np.zeros(inst.n)
    end = np.zeros(inst.n)
    free = np.zeros(inst.k)
    slots = [Timeline() for _ in range(inst.k)]
    for i in order:
        u = int(mapping[i])
        d = float(inst.time[i, u])
        ready = ready_time(inst, i, u, mapping, end)
        s = slots[u].earliest(ready, d) if insertion else max(ready, free[u])
        start[i], end[i] = s, s + d
        free[u] = max(free[u], s + d)
        if insertion:
            slots[u].add(s, s + d)
    return Schedule(mapping, start, end, order, transfers_of(inst, mapping, end))


def transfers_of(inst: Instance, mapping: Sequence[int], end: Sequence[float]) -> list[Transfer]:
    """Every edge across devices as a transfer leaving when its producer ends and arriving one link (or
    route) delay later: ``latency + bytes / bandwidth`` (:attr:`Instance.delays`)."""
    return [Transfer(i, j, int(mapping[i]), int(mapping[j]), b, float(end[i]),
                     float(end[i] + inst.delays[e, mapping[i], mapping[j]]))
            for e, (i, j, b) in enumerate(inst.edges) if mapping[i] != mapping[j]]


def makespan(inst: Instance, mapping: Sequence[int], order: Sequence[int] | None = None) -> float:
    """The append list schedule's makespan, ``inf`` for an infeasible mapping (SA/EA fitness)."""
    if inst.mapping_violations(mapping):
        return math.inf
    return simulate(inst, mapping, order, check=False).makespan


def order_by_start(inst: Instance, start: Sequence[float]) -> list[int]:
    """A topological order sorted by start time (ties by BFS position): turns a solver's start times
    into a priority order for :func:`simulate` (which then starts no op later)."""
    pos = {v: p for p, v in enumerate(inst.topo)}
    key = sorted(range(inst.n), key=lambda i: (start[i], pos[i]))
    return topological_repair(key, lambda i, placed: all(p in placed for p in inst.preds[i]))


def validate(inst: Instance, sched: Schedule) -> list[str]:
    """Everything wrong with ``sched`` for ``inst`` ([] when it is a valid schedule). Times compare
    within the one tolerance rule (:func:`onnxpart.certificate.slack`) of the makespan."""
    problems: list[str] = []
    eps = slack(float(np.max(sched.end, initial=0.0)))
    m = np.asarray(sched.mapping)
    if m.shape != (inst.n,) or ((m < 0) | (m >= inst.k)).any():
        return ["mapping must give every op a device index"]
    problems += inst.mapping_violations(m)
    for i in range(inst.n):
        if sched.start[i] < -eps:
            problems.append(f"{inst.op_names[i]} starts before 0")
        if math.isfinite(inst.time[i, m[i]]) and abs(sched.end[i] - sched.start[i] - inst.time[i, m[i]]) > eps:
            problems.append(f"{inst.op_names[i]} runs {sched.end[i] - sched.start[i]} s, not {inst.time[i, m[i]]}")
    for e, (i, j, _) in enumerate(inst.edges):
        need = sched.end[i] + inst.delays[e, m[i], m[j]]
        if sched.start[j] < need - eps:
            problems.append(f"{inst.op_names[j]} starts at {sched.start[j]} before its input from "
                            f"{inst.op_names[i]} arrives at {need}")
    for u in range(inst.k):
        ops = sorted((i for i in range(inst.n) if m[i] == u), key=lambda i: (sched.start[i], sched.end[i]))
        for a, b in zip(ops, ops[1:]):
            if sched.start[b] < sched.end[a] - eps:
                problems.append(f"{inst.op_names[a]} and {inst.op_names[b]} overlap on {inst.device_names[u]}")
    cross = {(t.src, t.dst): t for t in sched.transfers}
    for e, (i, j, _) in enumerate(inst.edges):
        if m[i] != m[j]:
            t = cross.get((i, j))
            if t is None:
                problems.append(f"no transfer recorded for {inst.op_names[i]} → {inst.op_names[j]}")
            elif (t.start < sched.end[i] - eps or t.end > sched.start[j] + eps
                  or t.end - t.start < inst.delays[e, m[i], m[j]] - eps):
                problems.append(f"transfer {inst.op_names[i]} → {inst.op_names[j]} is mistimed")
    return problems
