"""The thesis's baselines (Section 4.2): MET, Greedy, HEFT, simulated annealing and the biased (1+1) EA;
CPoP, and the load dual's mapping (memory-aware, issue 30).

All respect the hard rules of :mod:`onnxpart.schedule.common.instance` (an op only on devices it can run on,
no impossible transfer, memory (3.7) summed as ops are placed); a constructive heuristic that paints
itself into a corner returns ``None`` rather than an invalid answer. SA and EA search mappings with the
append list schedule in the breadth-first topological order as fitness (Section 4.2, "Fitness
function"); they are seeded and run a fixed number of iterations, so the same seed gives the same
answer (the wall-clock ``time_limit`` is only a safety cap that ends a run early).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from time import monotonic as now

import numpy as np

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.list_scheduling import Timeline, cpop_plan, rank_order
from onnxpart.schedule.common.search import search
from onnxpart.schedule.common.solution import HeuristicResult
from onnxpart.schedule.latency.dual_mapping import dual_mapping
from onnxpart.schedule.latency.simulator import Schedule, makespan, ready_time, simulate


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
    t0 = now()
    mapping = np.full(inst.n, -1, dtype=np.int64)
    load = np.zeros(inst.k)
    for i in inst.topo:
        cands = _candidates(inst, i, mapping, load)
        if not cands:
            return None
        u = min(cands, key=lambda u: (inst.time[i, u], u))
        mapping[i] = u
        load[u] += inst.mem[i]
    return HeuristicResult("met", simulate(inst, mapping), now() - t0)


def _list_eft(inst: Instance, order: Sequence[int], insertion: bool, method: str,
              pins: Mapping[int, int] | None = None) -> HeuristicResult | None:
    """Place ops in ``order``, each on the device giving it the earliest finish time (ties: the shorter
    run there, then the first device) — an op of ``pins`` on its device where it may go there."""
    t0 = now()
    mapping = np.full(inst.n, -1, dtype=np.int64)
    end = np.zeros(inst.n)
    load = np.zeros(inst.k)
    free = np.zeros(inst.k)
    slots = [Timeline() for _ in range(inst.k)]
    for i in order:
        best = None
        cands = _candidates(inst, i, mapping, load)
        for u in [pins[i]] if pins and pins.get(i) in cands else cands:
            ready = ready_time(inst, i, u, mapping, end)
            s = slots[u].earliest(ready, inst.time[i, u]) if insertion else max(ready, free[u])
            key = (s + inst.time[i, u], inst.time[i, u], u)
            if best is None or key < best[0]:
                best = (key, u, s)
        if best is None:
            return None
        (finish, _, _), u, s = best
        mapping[i], end[i] = u, finish
        load[u] += inst.mem[i]
        free[u] = max(free[u], finish)
        slots[u].add(s, finish)
    sched = simulate(inst, mapping, list(order), insertion=insertion)
    return HeuristicResult(method, sched, now() - t0)


def greedy(inst: Instance) -> HeuristicResult | None:
    """Greedy: ops in BFS order, each on the device where it finishes first given the ops so far."""
    return _list_eft(inst, inst.topo, insertion=False, method="greedy")


def heft(inst: Instance) -> HeuristicResult | None:
    """HEFT (Topcuoglu et al. 2002): ops by decreasing upward rank, each on its insertion-based
    earliest-finish device."""
    return _list_eft(inst, rank_order(inst), insertion=True, method="heft")


def cpop(inst: Instance) -> HeuristicResult | None:
    """CPoP (Topcuoglu et al. 2002): ops by CPoP's ready queue of ``rank_u + rank_d``, the critical path's
    ops on the device running all of it fastest, the others on their insertion-based earliest-finish
    device (:func:`onnxpart.schedule.common.list_scheduling.cpop_plan`)."""
    order, path, device = cpop_plan(inst)
    return _list_eft(inst, order, insertion=True, method="cpop", pins=dict.fromkeys(path, device))


def lagrange(inst: Instance) -> HeuristicResult | None:
    """The load dual's mapping (:mod:`onnxpart.schedule.latency.dual_mapping`: memory-aware where the list
    schedulers are not), by HEFT's upward rank with insertion; None where it breaks a hard rule."""
    t0 = now()
    mapping = dual_mapping(inst)
    if mapping is None or inst.mapping_violations(mapping):
        return None
    return HeuristicResult("lagrange", simulate(inst, mapping, rank_order(inst), insertion=True), now() - t0)


def best_constructive(inst: Instance) -> Schedule | None:
    """The shortest of the MET, Greedy and HEFT schedules (None if none is feasible): the warm start
    of the module solves, where no one of the three is best everywhere."""
    found = [r.schedule for r in (met(inst), greedy(inst), heft(inst)) if r is not None]
    return min(found, key=lambda s: s.makespan) if found else None


def simulated_annealing(inst: Instance, init: Sequence[int], iterations: int = 2000, seed: int = 0,
                        time_limit: float = math.inf) -> HeuristicResult:
    """Simulated annealing over mappings (:func:`onnxpart.schedule.common.search.search`)."""
    return _search("sa", inst, init, iterations, seed, time_limit)


def one_plus_one_ea(inst: Instance, init: Sequence[int], iterations: int = 2000, seed: int = 0,
                    time_limit: float = math.inf) -> HeuristicResult:
    """The biased (1+1) EA over mappings (:func:`onnxpart.schedule.common.search.search`), started from
    ``init`` (the fastest-device mapping, Section 4.2); its answer is its last parent, the latest of the
    best ones."""
    return _search("ea", inst, init, iterations, seed, time_limit)


def _search(method: str, inst: Instance, init: Sequence[int], iterations: int, seed: int,
            time_limit: float) -> HeuristicResult:
    """SA or EA over device mappings, fitness the append list schedule in BFS order (Section 4.2)."""
    t0 = now()
    choices = [inst.allowed(i) for i in range(inst.n)]
    found = search(method, lambda mapping: makespan(inst, mapping), list(np.asarray(init, dtype=np.int64)),
                   choices, iterations, seed, time_limit)
    answer = found.best if method == "sa" else found.last
    return HeuristicResult(method, simulate(inst, answer), now() - t0, found.evaluations)
