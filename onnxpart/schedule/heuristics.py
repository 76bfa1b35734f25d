"""The thesis's baselines (Section 4.2): MET, Greedy, HEFT, simulated annealing and the biased (1+1) EA.

All respect the hard rules of :mod:`onnxpart.schedule.model` (an op only on devices it can run on,
no impossible transfer, memory (3.7) summed as ops are placed); a constructive heuristic that paints
itself into a corner returns ``None`` rather than an invalid answer. SA and EA search mappings with the
append list schedule in the breadth-first topological order as fitness (Section 4.2, "Fitness
function"); they are seeded and run a fixed number of iterations, so the same seed gives the same
answer (the wall-clock ``time_limit`` is only a safety cap that ends a run early).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import Schedule, earliest_gap, makespan, ready_time, simulate


@dataclass
class HeuristicResult:
    method: str
    schedule: Schedule
    seconds: float
    evaluations: int = 0

    @property
    def makespan(self) -> float:
        return self.schedule.makespan

    @property
    def mapping(self) -> np.ndarray:
        return self.schedule.mapping


def _candidates(inst: Instance, i: int, mapping: np.ndarray, load: np.ndarray) -> list[int]:
    """Devices op ``i`` may go to now: it runs there, fits the remaining memory, and every placed
    predecessor can send it its input."""
    out = []
    for u in inst.allowed(i):
        if load[u] + inst.mem[i] > inst.capacity[u] * (1 + 1e-12):
            continue
        if all(math.isfinite(inst.delays[e, mapping[inst.edges[e][0]], u]) for e in inst.in_edges[i]):
            out.append(u)
    return out


def met(inst: Instance) -> HeuristicResult | None:
    """Minimum Execution Time: each op (BFS order) on the device where it runs fastest."""
    t0 = time.perf_counter()
    mapping = np.full(inst.n, -1, dtype=np.int64)
    load = np.zeros(inst.k)
    for i in inst.topo:
        cands = _candidates(inst, i, mapping, load)
        if not cands:
            return None
        u = min(cands, key=lambda u: (inst.time[i, u], u))
        mapping[i] = u
        load[u] += inst.mem[i]
    return HeuristicResult("met", simulate(inst, mapping), time.perf_counter() - t0)


def _list_eft(inst: Instance, order: Sequence[int], insertion: bool, method: str) -> HeuristicResult | None:
    """Place ops in ``order``, each on the device giving it the earliest finish time."""
    t0 = time.perf_counter()
    mapping = np.full(inst.n, -1, dtype=np.int64)
    end = np.zeros(inst.n)
    load = np.zeros(inst.k)
    free = np.zeros(inst.k)
    slots: list[list[tuple[float, float]]] = [[] for _ in range(inst.k)]
    for i in order:
        best = None
        for u in _candidates(inst, i, mapping, load):
            ready = ready_time(inst, i, u, mapping, end)
            s = earliest_gap(slots[u], ready, inst.time[i, u]) if insertion else max(ready, free[u])
            key = (s + inst.time[i, u], inst.time[i, u], u)
            if best is None or key < best[0]:
                best = (key, u, s)
        if best is None:
            return None
        (finish, _, _), u, s = best
        mapping[i], end[i] = u, finish
        load[u] += inst.mem[i]
        free[u] = max(free[u], finish)
        slots[u].append((s, finish))
        slots[u].sort()
    sched = simulate(inst, mapping, list(order), insertion=insertion)
    return HeuristicResult(method, sched, time.perf_counter() - t0)


def greedy(inst: Instance) -> HeuristicResult | None:
    """Greedy: ops in BFS order, each on the device where it finishes first given the ops so far."""
    return _list_eft(inst, inst.topo, insertion=False, method="greedy")


def upward_rank(inst: Instance) -> np.ndarray:
    """HEFT's upward rank with mean costs: ``rank(i) = w̄_i + max_j (c̄_ij + rank(j))``, ``w̄_i`` the
    mean time over the devices ``i`` can run on, ``c̄_ij`` the mean finite delay over ordered pairs
    of distinct devices (Topcuoglu et al., 2002)."""
    w = np.array([np.mean(inst.time[i, inst.allowed(i)]) for i in range(inst.n)])
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


def rank_order(inst: Instance) -> list[int]:
    """Decreasing upward rank, ties by BFS position (a topological order: ranks never increase along
    an edge, and BFS puts a predecessor first)."""
    rank = upward_rank(inst)
    pos = {v: p for p, v in enumerate(inst.topo)}
    return sorted(range(inst.n), key=lambda i: (-rank[i], pos[i]))


def heft(inst: Instance) -> HeuristicResult | None:
    """HEFT: ops by decreasing upward rank, each on its insertion-based earliest-finish device."""
    return _list_eft(inst, rank_order(inst), insertion=True, method="heft")


def best_constructive(inst: Instance) -> Schedule | None:
    """The shortest of the MET, Greedy and HEFT schedules (None if none is feasible): the warm start
    of the module solves, where no one of the three is best everywhere."""
    found = [r.schedule for r in (met(inst), greedy(inst), heft(inst)) if r is not None]
    return min(found, key=lambda s: s.makespan) if found else None


def _mutable_ops(inst: Instance) -> list[int]:
    return [i for i in range(inst.n) if len(inst.allowed(i)) > 1]


def simulated_annealing(inst: Instance, init: Sequence[int], iterations: int = 2000, seed: int = 0,
                        time_limit: float = math.inf, t_start: float = 0.05, t_end: float = 1e-4,
                        ) -> HeuristicResult:
    """Simulated annealing over mappings (Kirkpatrick et al., 1983): move one random op to another
    random device; accept a worse fitness ``f'`` with probability ``exp(-(f'-f)/(T·f0))``, ``T``
    cooling geometrically from ``t_start`` to ``t_end`` (relative to the initial fitness ``f0``)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    current = np.asarray(init, dtype=np.int64).copy()
    f = f0 = makespan(inst, current)
    best, fbest = current.copy(), f
    movable = _mutable_ops(inst)
    scale = f0 if math.isfinite(f0) and f0 > 0 else 1.0
    evals = 1
    for it in range(iterations if movable else 0):
        if time.perf_counter() - t0 > time_limit:
            break
        temp = t_start * (t_end / t_start) ** (it / max(1, iterations - 1))
        i = movable[int(rng.integers(len(movable)))]
        options = [u for u in inst.allowed(i) if u != current[i]]
        cand = current.copy()
        cand[i] = options[int(rng.integers(len(options)))]
        fc = makespan(inst, cand)
        evals += 1
        if fc <= f or (math.isfinite(fc) and rng.random() < math.exp(-(fc - f) / (temp * scale))):
            current, f = cand, fc
            if f < fbest:
                best, fbest = current.copy(), f
    return HeuristicResult("sa", simulate(inst, best), time.perf_counter() - t0, evals)


def one_plus_one_ea(inst: Instance, init: Sequence[int], iterations: int = 2000, seed: int = 0,
                    time_limit: float = math.inf) -> HeuristicResult:
    """Biased (1+1) EA (Droste et al., 2002; biased: started from the fastest-device mapping, Section
    4.2): each op moves to another random device with probability 1/n (at least one moves); the child
    replaces the parent when it is no worse."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    parent = np.asarray(init, dtype=np.int64).copy()
    f = makespan(inst, parent)
    movable = _mutable_ops(inst)
    evals = 1
    for _ in range(iterations if movable else 0):
        if time.perf_counter() - t0 > time_limit:
            break
        flips = [i for i in movable if rng.random() < 1.0 / len(movable)]
        if not flips:
            flips = [movable[int(rng.integers(len(movable)))]]
        child = parent.copy()
        for i in flips:
            options = [u for u in inst.allowed(i) if u != parent[i]]
            child[i] = options[int(rng.integers(len(options)))]
        fc = makespan(inst, child)
        evals += 1
        if fc <= f:
            parent, f = child, fc
    return HeuristicResult("ea", simulate(inst, parent), time.perf_counter() - t0, evals)
