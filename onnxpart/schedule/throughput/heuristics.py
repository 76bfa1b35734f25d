"""The thesis's baselines for the throughput objective (Section 4.2 with batches): bMET, bGreedy, bHEFT,
plain data parallelism, simulated annealing and the biased (1+1) EA over each op's split of the batch.

Each respects memory (3.7 with batching, :func:`.model.fits`) as ops are placed and returns no schedule
rather than an invalid one; SA and EA (:mod:`onnxpart.schedule.common.search`) are seeded and run a fixed
number of fitness evaluations. The list baselines take a ``time_limit`` (24 devices give each op a
thousand splits) and say when it ended them (``timed_out``).
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
from onnxpart.schedule.throughput.model import (Split, SplitFamily, add_load, fits, op_families, op_splits,
                                                 ranges, slices)
from onnxpart.schedule.throughput.simulator import makespan, ready_time, simulate, slice_order


def met(inst: Instance, batch: int) -> HeuristicResult:
    """bMET: each op (BFS order) on its best batch–device combination — the split whose slowest slice
    is fastest (fewest slices on ties) — ignoring transfers. It is the first answer, so it has no time
    limit: one pass over the ops, each over its splits (bounded work: 0.7 s for resnet50's 176 ops on
    24 devices at a batch of 64), whatever the clock says (issue 30). Each op's best split is found for
    all ops at once (:func:`_met_choices`); an op whose best does not fit the memory left takes the best
    that does."""
    t0 = now()
    families = op_families(inst, batch)
    best = _met_choices(inst, families)
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    for i in inst.topo:
        cands = families[i].splits
        if fits(inst, load, i, cands[best[i]]):
            splits[i] = cands[best[i]]
        else:
            sizes, slowest = np.asarray(cands), _slice_times(inst, i, cands).max(axis=1)
            room = np.all((sizes == 0) | (load + inst.mem[i] + inst.act_mem[i] * (sizes - 1)
                                          <= inst.capacity * (1 + 1e-12)), axis=1)  # fits, for every split
            if not room.any():
                return HeuristicResult("met", None, now() - t0)
            ranked = np.lexsort((np.arange(len(sizes)), (sizes > 0).sum(axis=1), slowest))
            splits[i] = cands[ranked[room[ranked]][0]]
        add_load(inst, load, i, splits[i])
    return HeuristicResult("met", simulate(inst, splits), now() - t0)


def _met_choices(inst: Instance, families: list[SplitFamily]) -> list[int]:
    """Each op's bMET split, memory aside: the index in its family of the split whose slowest slice is
    fastest (then fewest slices, then first). Computed per family on whole columns of slice times
    (:meth:`Instance.batch_times`), a block of ops at a time (about 10^6 slice entries: 24 devices
    give an op a thousand splits)."""
    best = np.zeros(inst.n, dtype=np.int64)
    groups: dict[int, list[int]] = {}
    for i, fam in enumerate(families):
        groups.setdefault(id(fam), []).append(i)
    columns: dict[tuple[int, int], np.ndarray] = {}
    for ops in groups.values():
        sizes = np.asarray(families[ops[0]].splits)
        tiebreak = (sizes > 0).sum(axis=1) * len(sizes) + np.arange(len(sizes))
        step = max(1, (1 << 20) // sizes.size)
        for lo in range(0, len(ops), step):
            block = np.asarray(ops[lo:lo + step])
            slowest = np.zeros((len(block), len(sizes)))
            for u in range(inst.k):
                for b in np.unique(sizes[:, u]).tolist():
                    if b > 0:
                        if (u, b) not in columns:
                            columns[(u, b)] = inst.batch_times(u, b)
                        on = sizes[:, u] == b
                        slowest[:, on] = np.maximum(slowest[:, on], columns[(u, b)][block][:, None])
            ties = slowest == slowest.min(axis=1, keepdims=True)
            best[block] = np.where(ties, tiebreak, np.iinfo(np.int64).max).argmin(axis=1)
    return best.tolist()


def uniform(inst: Instance, batch: int, max_slices: int | None = None) -> HeuristicResult:
    """Plain data parallelism: one split for every op (each device runs its share of the inputs
    through the whole graph, no transfers between devices), the best over the splits every op can
    use — the "naive data parallelism" of the thesis's Section 5.1. With one split for all, a device's
    slices wait only on its own earlier slices, so a split's makespan is its busiest device's total
    ``Σ_i t(i, u, s_u)`` and its memory ``Σ_i mem_i + act_i·(s_u − 1)``: both are tabled per device and
    size, and only the best split is simulated. ``max_slices``: only splits with at most that many slices
    (each slice's lane is then one piece: :func:`.pieces.merge`). ``schedule`` None if none fits."""
    t0 = now()
    families = list({id(f): f for f in op_families(inst, batch)}.values())  # each distinct family once
    common = set(families[0].splits).intersection(*(set(f.splits) for f in families[1:]))
    if max_slices is not None:
        common = {s for s in common if sum(x > 0 for x in s) <= max_slices}
    used = {(u, x) for s in common for u, x in enumerate(s) if x > 0}
    total = {(u, x): sum(inst.batch_times(u, x).tolist()) for u, x in used}  # summed in op order, as before
    memory = {(u, x): float(np.sum(inst.mem + inst.act_mem * (x - 1))) for u, x in used}
    best = None
    for s in sorted(common, reverse=True):  # ties: the earlier devices (node0 before node5)
        if any(memory[(u, x)] > inst.capacity[u] * (1 + 1e-12) for u, x in enumerate(s) if x > 0):
            continue
        f = max(total[(u, x)] for u, x in enumerate(s) if x > 0)
        if best is None or f < best[0]:
            best = (f, s)
    sched = simulate(inst, [best[1]] * inst.n) if best else None
    return HeuristicResult("uniform", sched, now() - t0)


def _list_eft(inst: Instance, batch: int, order: Sequence[int], insertion: bool, method: str,
              time_limit: float = math.inf, pins: Mapping[int, int] | None = None) -> HeuristicResult:
    """Ops in ``order``, each given the split whose last slice finishes first given those placed (ties:
    least total time, then first listed) — an op of ``pins`` the whole batch on its device where a split
    does that (:func:`_on_device`); no schedule (``timed_out``) when ``time_limit`` ends first.
    The splits are tried by a lower bound on their finish — no slice starts before every predecessor
    has ended one slice (each slice of the op reads one of each), nor, appending, before its device is
    free — and the rest skipped once it passes the best finish: the same choice, found sooner (24
    devices give each op a thousand splits)."""
    t0 = now()
    cands = op_splits(inst, batch)
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    spans: list = [None] * inst.n
    end: dict = {}
    free = np.zeros(inst.k)
    busy = [Timeline() for _ in range(inst.k)]
    for i in order:
        if now() - t0 > time_limit:
            return HeuristicResult(method, None, now() - t0, timed_out=True)
        choices = _on_device(cands[i], pins.get(i)) if pins else cands[i]
        dur = _slice_times(inst, i, choices)
        first = max((min(end[(p, w)] for w in slices(splits, p)) for p in inst.preds[i]), default=0.0)
        floor = np.full(inst.k, first) if insertion else np.maximum(free, first)
        finish_lb = np.where(dur > 0, floor + dur, 0.0).max(axis=1)
        best = None
        for n in np.argsort(finish_lb, kind="stable"):
            if best is not None and finish_lb[n] > best[0][0]:
                break
            s = choices[n]
            if not fits(inst, load, i, s):
                continue
            splits[i], spans[i] = s, ranges(s)
            plan, finish = [], 0.0
            for u in slices(splits, i):
                d = inst.time_batch(i, u, s[u])
                ready = ready_time(inst, i, u, spans[i][u], spans, end)
                st = busy[u].earliest(ready, d) if insertion else max(ready, free[u])
                plan.append((u, st, st + d))
                finish = max(finish, st + d)
            key = (finish, sum(inst.time_batch(i, u, x) for u, x in enumerate(s)), n)
            if best is None or key < best[0]:
                best = (key, s, plan)
        if best is None or not math.isfinite(best[0][0]):
            return HeuristicResult(method, None, now() - t0)
        _, s, plan = best
        splits[i], spans[i] = s, ranges(s)
        add_load(inst, load, i, s)
        for u, st, en in plan:
            end[(i, u)] = en
            free[u] = max(free[u], en)
            busy[u].add(st, en)
    sched = simulate(inst, splits, slice_order(inst, splits, order), insertion=insertion)
    return HeuristicResult(method, sched, now() - t0)


def _on_device(choices: list[Split], device: int | None) -> list[Split]:
    """The splits of ``choices`` running the whole batch on ``device`` (all of them where none does, or
    for no device)."""
    whole = [s for s in choices if all(x == 0 for u, x in enumerate(s) if u != device)] if device is not None else []
    return whole or choices


def _slice_times(inst: Instance, i: int, cands: list[Split]) -> np.ndarray:
    """(splits, K): the duration of each split's slice of op ``i`` on each device, 0 where it has none."""
    sizes = np.asarray(cands)
    out = np.zeros(sizes.shape)
    for u in range(inst.k):
        for b in np.unique(sizes[:, u]):
            if b > 0:
                out[sizes[:, u] == b, u] = inst.time_batch(i, u, int(b))
    return out


def greedy(inst: Instance, batch: int, time_limit: float = math.inf) -> HeuristicResult:
    return _list_eft(inst, batch, inst.topo, False, "greedy", time_limit)


def heft(inst: Instance, batch: int, time_limit: float = math.inf) -> HeuristicResult:
    """bHEFT: ops by decreasing upward rank (mean whole-batch time over the devices), insertion."""
    return _list_eft(inst, batch, heft_order(inst, batch), True, "heft", time_limit)


def cpop(inst: Instance, batch: int, time_limit: float = math.inf) -> HeuristicResult:
    """bCPoP: CPoP's order and critical path with whole-batch times, the critical path's ops the whole
    batch on its device, the others their earliest-finishing split, insertion."""
    order, path, device = cpop_plan(inst, _whole_batch(inst, batch))
    return _list_eft(inst, batch, order, True, "cpop", time_limit, pins=dict.fromkeys(path, device))


def lagrange(inst: Instance, batch: int, time_limit: float = math.inf) -> HeuristicResult:
    """The load dual's mapping of one input (:mod:`onnxpart.schedule.latency.dual_mapping`), each op's whole
    batch on its device where a split does that, by bHEFT's order with insertion."""
    t0 = now()
    mapping = dual_mapping(inst)
    if mapping is None:
        return HeuristicResult("lagrange", None, now() - t0)
    return _list_eft(inst, batch, heft_order(inst, batch), True, "lagrange", time_limit,
                     pins=dict(enumerate(mapping.tolist())))


def heft_order(inst: Instance, batch: int) -> list[int]:
    """The ops by decreasing upward rank with whole-batch times (HEFT's order)."""
    return rank_order(inst, _whole_batch(inst, batch))


def _whole_batch(inst: Instance, batch: int) -> np.ndarray:
    """(n, K): each op's time for the whole batch on each device."""
    return np.array([[inst.time_batch(i, u, batch) for u in range(inst.k)] for i in range(inst.n)])


def simulated_annealing(inst: Instance, batch: int, init: Sequence[Split], iterations: int = 2000, seed: int = 0,
                        time_limit: float = math.inf) -> HeuristicResult:
    """Simulated annealing over splits (:func:`onnxpart.schedule.common.search.search`)."""
    return _search("sa", inst, batch, init, iterations, seed, time_limit)


def one_plus_one_ea(inst: Instance, batch: int, init: Sequence[Split], iterations: int = 2000, seed: int = 0,
                    time_limit: float = math.inf) -> HeuristicResult:
    """The biased (1+1) EA over splits (:func:`onnxpart.schedule.common.search.search`)."""
    return _search("ea", inst, batch, init, iterations, seed, time_limit)


def _search(method: str, inst: Instance, batch: int, init: Sequence[Split], iterations: int, seed: int,
            time_limit: float) -> HeuristicResult:
    """SA or EA over each op's candidate splits (:func:`.model.op_splits`); fitness = the makespan of the
    slices list-scheduled in bHEFT's rank order with insertion. (The BFS order without insertion, used
    before, ran bHEFT's own splits slower than bHEFT does: on the benchmark's wd 2-channel stack a search
    started from them returned 924 inputs/s where bHEFT has 1998.)"""
    t0 = now()
    order = heft_order(inst, batch)
    found = search(method, lambda splits: makespan(inst, splits, order, True), init, op_splits(inst, batch),
                   iterations, seed, time_limit)
    sched = simulate(inst, found.best, slice_order(inst, found.best, order), True)
    return HeuristicResult(method, sched, now() - t0, found.evaluations)
