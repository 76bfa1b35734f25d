"""The throughput objective (Sections 3.1–3.2 of the thesis): a batch of ``L`` inputs split into slices.

Semantics (every batched method here and the brute force in the tests use exactly these):

* A **split** of op ``i`` gives every device ``u`` a slice size ``n[i][u] ∈ {0} ∪ B_u`` with
  ``Σ_u n[i][u] = L`` — the thesis's ``b_{i,u,l}`` (one batch per op and device, constraints
  3.4–3.5). The slice on ``u`` runs ``time_batch(i, u, n)`` seconds (:meth:`Instance.time_batch`),
  without preemption; a device runs one slice at a time.
* Inputs are assigned to slices **contiguously in device order**: slice ``(i, u)`` holds inputs
  ``[lo, lo + n)`` with ``lo = Σ_{w<u} n[i][w]``. (The thesis's ``x_{i,u,l}`` leaves the assignment
  free; fixing it keeps the model polynomial to state and makes two ops split alike chain slice by
  slice — data parallelism without a barrier.)
* Precedence per input (3.3): slice ``(j, v)`` starts after every slice ``(i, u)`` of a predecessor
  sharing ``c > 0`` inputs with it has ended, plus the transfer of ``c`` inputs' tensors
  (:meth:`Instance.delay_count`; free on one device; contention-free links).
* Memory (3.7): ``Σ_{i with n[i][u] > 0} mem_i + act_i·(n[i][u] − 1) ≤ capacity_u`` (weights once,
  activations per input).
* **Throughput = L / C**, ``C`` the makespan of the whole batch — the thesis's objective "``L/C`` when
  optimizing for throughput" (Section 3.2), the low-latency regime of Section 4.4: one batch of ``B``
  inputs is run as fast as possible (no pipelining across batches).
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from onnxpart.certificate import LowerBound, slack
from onnxpart.errors import UserError
from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import earliest_gap
from onnxpart.solvers import SparseModel, solve_cpsat, solve_highs

Split = tuple[int, ...]  # slice size per device


# ----------------------------------------------------------------------------------------- splits
MAX_SPLITS = 1024  # candidate splits per op; past it, the ones with the fewest slices (split_family)

Sizes = tuple[tuple[int, ...], ...]  # per device, the nonzero slice sizes an op may take there


@dataclass(frozen=True)
class SplitFamily:
    """The splits the batched heuristics choose from (:func:`split_family`). ``canonical``: on each class
    of interchangeable devices (:meth:`Instance.symmetry_classes`) the sizes are nonincreasing in device
    order; ``complete``: every such split is listed. The bounds read both (:func:`load_lp`)."""

    splits: list[Split]
    canonical: bool
    complete: bool


def op_sizes(inst: Instance, i: int, batch: int) -> Sizes:
    """The slice sizes op ``i`` may take on each device: supported there, at most ``batch``, on a device it
    can run on, and fitting the device's memory alone (3.7 for one op)."""
    ok = set(inst.allowed(i))
    return tuple(tuple(sorted(b for b in set(bs) if b <= batch and u in ok
                              and inst.mem[i] + inst.act_mem[i] * (b - 1) <= inst.capacity[u]))
                 for u, bs in enumerate(inst.batch_sizes))


def split_family(inst: Instance, batch: int, sizes: Sizes | None = None) -> SplitFamily:
    """The splits of ``batch`` inputs into slices of ``sizes`` (default: every supported size), fewest
    slices first, then in lexicographic order. Where they are more than :data:`MAX_SPLITS` (24 GPUs with
    six sizes each have more than 10^15), two reductions keep the heuristics tractable: on interchangeable
    devices only the canonical order of the sizes (a relabelling of identical copies per op: the class's
    summed loads and memory and the split's slice times are those of the split it stands for), and at
    most :data:`MAX_SPLITS` of those, followed by :func:`_even_splits` (data parallelism over many
    devices needs many slices, past any cut by slice count). Below it every split is kept: the canonical
    order alone would bar two whole-batch ops from running side by side on two identical copies.
    Memoized per instance, batch and sizes; the family may be empty."""
    if sizes is None:
        sizes = tuple(tuple(sorted(b for b in set(bs) if b <= batch)) for bs in inst.batch_sizes)
    memo = inst.__dict__.setdefault("_split_memo", {})
    if (batch, sizes) not in memo:
        free = [-1] * inst.k
        out, complete = _first_splits(sizes, free, batch)
        canonical = False
        if not complete:
            before = list(free)  # the previous copy in u's symmetry class, when it offers the same sizes
            for cls in inst.symmetry_classes():
                for a, b in zip(cls, cls[1:]):
                    before[b] = a if sizes[a] == sizes[b] else -1
            if before != free:
                (out, complete), canonical = _first_splits(sizes, before, batch), True
        if not complete:
            listed = set(out)
            out += [s for s in _even_splits(sizes, batch, _fastest_first(inst)) if s not in listed]
        memo[(batch, sizes)] = SplitFamily(out, canonical, complete)
    return memo[(batch, sizes)]


def _first_splits(sizes: Sizes, before: list[int], batch: int) -> tuple[list[Split], bool]:
    """The first :data:`MAX_SPLITS` splits (:func:`_splits_using`, fewest slices first) and whether that
    is all of them."""
    every = itertools.chain.from_iterable(_splits_using(sizes, before, batch, m) for m in range(1, len(sizes) + 1))
    out = list(itertools.islice(every, MAX_SPLITS))
    return out, next(every, None) is None


def _fastest_first(inst: Instance) -> list[int]:
    """The devices by their time for every op it can run at batch 1, fastest first; ties (identical
    copies) in device order."""
    finite = np.where(np.isfinite(inst.time), inst.time, 0.0)
    return sorted(range(inst.k), key=lambda u: (float(finite[:, u].sum()), u))


def _even_splits(sizes: Sizes, batch: int, order: Sequence[int]) -> list[Split]:
    """For each ``m``, the split over the first ``m`` devices of ``order`` that offer sizes (the copies of
    a class first to last: :func:`_fastest_first` keeps them in device order) whose largest slice is
    smallest, the lexicographically largest among those (nonincreasing on identical copies: canonical);
    ``m`` with no such split is skipped. A subset-sum table per slice cap ``c``: ``reach[pos][s]`` says
    the devices from position ``pos`` to ``m − 1`` can each take a size in ``[1, c]`` summing to ``s``."""
    devices = [u for u in order if sizes[u]]
    caps = sorted({b for u in devices for b in sizes[u]})
    out = []
    for m in range(1, len(devices) + 1):
        used = devices[:m]
        for c in caps:
            reach = [np.zeros(batch + 1, dtype=bool) for _ in range(m + 1)]
            reach[m][0] = True
            for pos in range(m - 1, -1, -1):
                for b in (b for b in sizes[used[pos]] if b <= c):
                    reach[pos][b:] |= reach[pos + 1][:batch + 1 - b]
            if reach[0][batch]:
                split, left = [0] * len(sizes), batch
                for pos, u in enumerate(used):
                    split[u] = max(b for b in sizes[u] if b <= min(c, left) and reach[pos + 1][left - b])
                    left -= split[u]
                out.append(tuple(split))
                break
    return out


def _splits_using(sizes: Sizes, before: list[int], batch: int, count: int):
    """The splits of ``batch`` with exactly ``count`` slices, in lexicographic order, where device ``u``'s
    slice is at most that of ``before[u]`` (≥ 0: canonical on a symmetry class); a depth-first walk over
    the devices, pruned where the devices left cannot hold what is left."""
    k = len(sizes)
    top = [max((max(sizes[w], default=0) for w in range(u, k)), default=0) for u in range(k + 1)]
    cur: list[int] = []

    def extend(u: int, left: int, slots: int):
        if slots == 0:
            if left == 0:
                yield tuple(cur) + (0,) * (k - u)
            return
        if u == k or slots > k - u or left > slots * top[u] or left < slots:
            return
        cap = min(left, cur[before[u]] if before[u] >= 0 else left)
        for x in (0, *(b for b in sizes[u] if b <= cap)):
            cur.append(x)
            yield from extend(u + 1, left - x, slots - (x > 0))
            cur.pop()

    yield from extend(0, batch, count)


def op_families(inst: Instance, batch: int) -> list[SplitFamily]:
    """Each op's :func:`split_family` over its :func:`op_sizes`; UserError if the batch cannot be made of
    the devices' sizes at all, or some op has no split."""
    if not split_family(inst, batch).splits:
        names = "; ".join(f"{n}: {', '.join(map(str, bs))}" for n, bs in zip(inst.device_names, inst.batch_sizes))
        raise UserError(f"batch {batch} cannot be made of the devices' batch sizes ({names}): "
                        f"choose a batch that is a sum of supported sizes, one per device")
    out = [split_family(inst, batch, op_sizes(inst, i, batch)) for i in range(inst.n)]
    for i, fam in enumerate(out):
        if not fam.splits:
            raise UserError(f"op {inst.op_names[i]} cannot process a batch of {batch} on the devices it can run on")
    return out


def op_splits(inst: Instance, batch: int) -> list[list[Split]]:
    """The candidate splits of each op (:func:`op_families`)."""
    return [fam.splits for fam in op_families(inst, batch)]


def ranges(split: Split) -> list[tuple[int, int]]:
    """``[lo, hi)`` of every device's slice (contiguous in device order)."""
    out, lo = [], 0
    for x in split:
        out.append((lo, lo + x))
        lo += x
    return out


def overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


# ----------------------------------------------------------------------------------------- schedule
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


def slices(splits: Sequence[Split], i: int) -> list[int]:
    return [u for u, x in enumerate(splits[i]) if x > 0]


def slice_order(inst: Instance, splits: Sequence[Split], op_order: Sequence[int] | None = None) -> list[tuple[int, int]]:
    return [(i, u) for i in (inst.topo if op_order is None else op_order) for u in slices(splits, i)]


def _ready(inst: Instance, i: int, u: int, lohi: tuple[int, int], spans: Sequence[list[tuple[int, int]]], end) -> float:
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


def overlapping_slices(inst: Instance, splits: Sequence[Split]):
    """Every ``(e, (i, u), (j, v), (lo, hi))``: edge ``e = i → j``, a slice of ``i`` on ``u`` and one of
    ``j`` on ``v`` sharing the inputs ``[lo, hi)`` — the pairs precedence per input (3.3) ties together."""
    for e, (i, j, _) in enumerate(inst.edges):
        ri, rj = ranges(splits[i]), ranges(splits[j])
        for u in slices(splits, i):
            for v in slices(splits, j):
                if overlap(ri[u], rj[v]) > 0:
                    yield e, (i, u), (j, v), (max(ri[u][0], rj[v][0]), min(ri[u][1], rj[v][1]))


@dataclass(frozen=True)
class SliceTransfer:
    """Edge ``e``'s tensors for the inputs ``[lo, hi)`` from slice ``src = (i, u)`` to ``dst = (j, v)``,
    ``u ≠ v``: leaves when ``src`` ends, lasts :meth:`Instance.delay_count` (contention-free links)."""

    edge: int
    src: tuple[int, int]
    dst: tuple[int, int]
    inputs: tuple[int, int]
    bytes: float
    start: float
    end: float


def slice_transfers(inst: Instance, sched: BatchSchedule) -> list[SliceTransfer]:
    """Every transfer ``sched`` needs — one per overlapping producer/consumer slice pair on two devices —
    timed exactly as :func:`validate_batch` charges it; sorted by start."""
    out = []
    for e, (i, u), (j, v), (lo, hi) in overlapping_slices(inst, sched.splits):
        if u != v:
            start = sched.end[(i, u)]
            out.append(SliceTransfer(e, (i, u), (j, v), (lo, hi), inst.edges[e][2] * (hi - lo), start,
                                     start + inst.delay_count(e, u, v, hi - lo)))
    return sorted(out, key=lambda t: (t.start, t.src, t.dst, t.inputs))


def memory_violations(inst: Instance, splits: Sequence[Split]) -> list[str]:
    load = np.zeros(inst.k)
    for i, s in enumerate(splits):
        for u, x in enumerate(s):
            if x > 0:
                if not math.isfinite(inst.time[i, u]):
                    return [f"{inst.op_names[i]} cannot run on {inst.device_names[u]}"]
                load[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
    return [f"{inst.device_names[u]} holds {load[u]:.0f} bytes > capacity {inst.capacity[u]:.0f}"
            for u in range(inst.k) if load[u] > inst.capacity[u] * (1 + 1e-12)]


def simulate_batch(inst: Instance, splits: Sequence[Split], order: Sequence[tuple[int, int]] | None = None,
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
    busy: list[list[tuple[float, float]]] = [[] for _ in range(inst.k)]
    for i, u in order:
        d = inst.time_batch(i, u, splits[i][u])
        ready = _ready(inst, i, u, spans[i][u], spans, end)
        s = earliest_gap(busy[u], ready, d) if insertion else max(ready, free[u])
        start[(i, u)], end[(i, u)] = s, s + d
        free[u] = max(free[u], s + d)
        if insertion:
            bisect.insort(busy[u], (s, s + d))
    return BatchSchedule(batch, splits, start, end, order)


def batch_makespan(inst: Instance, splits: Sequence[Split], op_order=None, insertion: bool = False) -> float:
    if memory_violations(inst, splits):
        return math.inf
    return simulate_batch(inst, splits, slice_order(inst, splits, op_order), insertion).makespan


def validate_batch(inst: Instance, sched: BatchSchedule) -> list[str]:
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


# ----------------------------------------------------------------------------------------- heuristics
@dataclass
class BatchResult:
    method: str
    schedule: BatchSchedule | None
    seconds: float
    evaluations: int = 0
    timed_out: bool = False


def _fits(inst: Instance, load: np.ndarray, i: int, s: Split) -> bool:
    return all(x == 0 or load[u] + inst.mem[i] + inst.act_mem[i] * (x - 1) <= inst.capacity[u] * (1 + 1e-12)
               for u, x in enumerate(s))


def _add(inst: Instance, load: np.ndarray, i: int, s: Split) -> None:
    for u, x in enumerate(s):
        if x > 0:
            load[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)


def bmet(inst: Instance, batch: int, time_limit: float = math.inf) -> BatchResult:
    """bMET: each op (BFS order) on its best batch–device combination — the split whose slowest slice
    is fastest (fewest slices on ties) — ignoring transfers; ``timed_out`` as in :func:`_list_eft`."""
    t0 = time.perf_counter()
    cands = op_splits(inst, batch)
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    for i in inst.topo:
        if time.perf_counter() - t0 > time_limit:
            return BatchResult("met", None, time.perf_counter() - t0, timed_out=True)
        sizes, slowest = np.asarray(cands[i]), _slice_times(inst, i, cands[i]).max(axis=1)
        fits = np.all((sizes == 0) | (load + inst.mem[i] + inst.act_mem[i] * (sizes - 1)
                                      <= inst.capacity * (1 + 1e-12)), axis=1)  # _fits, for every split
        if not fits.any():
            return BatchResult("met", None, time.perf_counter() - t0)
        ranked = np.lexsort((np.arange(len(sizes)), (sizes > 0).sum(axis=1), slowest))
        splits[i] = cands[i][ranked[fits[ranked]][0]]
        _add(inst, load, i, splits[i])
    return BatchResult("met", simulate_batch(inst, splits), time.perf_counter() - t0)


def uniform(inst: Instance, batch: int, max_slices: int | None = None) -> BatchResult:
    """Plain data parallelism: one split for every op (each device runs its share of the inputs
    through the whole graph, no transfers between devices), the best over the splits every op can
    use — the "naive data parallelism" of the thesis's Section 5.1. With one split for all, a device's
    slices wait only on its own earlier slices, so a split's makespan is its busiest device's total
    ``Σ_i t(i, u, s_u)`` and its memory ``Σ_i mem_i + act_i·(s_u − 1)``: both are tabled per device and
    size, and only the best split is simulated. ``max_slices``: only splits with at most that many slices
    (each slice's lane is then one piece: :func:`.batch_pieces.merge`). ``schedule`` None if none fits."""
    t0 = time.perf_counter()
    cands = op_splits(inst, batch)
    common = set(cands[0]).intersection(*map(set, cands[1:])) if cands else set()
    if max_slices is not None:
        common = {s for s in common if sum(x > 0 for x in s) <= max_slices}
    used = {(u, x) for s in common for u, x in enumerate(s) if x > 0}
    total = {(u, x): sum(inst.time_batch(i, u, x) for i in range(inst.n)) for u, x in used}
    memory = {(u, x): float(np.sum(inst.mem + inst.act_mem * (x - 1))) for u, x in used}
    best = None
    for s in sorted(common, reverse=True):  # ties: the earlier devices (node0 before node5)
        if any(memory[(u, x)] > inst.capacity[u] * (1 + 1e-12) for u, x in enumerate(s) if x > 0):
            continue
        f = max(total[(u, x)] for u, x in enumerate(s) if x > 0)
        if best is None or f < best[0]:
            best = (f, s)
    sched = simulate_batch(inst, [best[1]] * inst.n) if best else None
    return BatchResult("uniform", sched, time.perf_counter() - t0)


def _list_eft(inst: Instance, batch: int, order: Sequence[int], insertion: bool, method: str,
              time_limit: float = math.inf) -> BatchResult:
    """Ops in ``order``, each given the split whose last slice finishes first given those placed (ties:
    least total time, then first listed); no schedule (``timed_out``) when ``time_limit`` ends first.
    The splits are tried by a lower bound on their finish — no slice starts before every predecessor
    has ended one slice (each slice of the op reads one of each), nor, appending, before its device is
    free — and the rest skipped once it passes the best finish: the same choice, found sooner (24
    devices give each op a thousand splits)."""
    t0 = time.perf_counter()
    cands = op_splits(inst, batch)
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    spans: list = [None] * inst.n
    end: dict = {}
    free = np.zeros(inst.k)
    busy: list[list[tuple[float, float]]] = [[] for _ in range(inst.k)]
    for i in order:
        if time.perf_counter() - t0 > time_limit:
            return BatchResult(method, None, time.perf_counter() - t0, timed_out=True)
        dur = _slice_times(inst, i, cands[i])
        first = max((min(end[(p, w)] for w in slices(splits, p)) for p in inst.preds[i]), default=0.0)
        floor = np.full(inst.k, first) if insertion else np.maximum(free, first)
        finish_lb = np.where(dur > 0, floor + dur, 0.0).max(axis=1)
        best = None
        for n in np.argsort(finish_lb, kind="stable"):
            if best is not None and finish_lb[n] > best[0][0]:
                break
            s = cands[i][n]
            if not _fits(inst, load, i, s):
                continue
            splits[i], spans[i] = s, ranges(s)
            plan, finish = [], 0.0
            for u in slices(splits, i):
                d = inst.time_batch(i, u, s[u])
                ready = _ready(inst, i, u, spans[i][u], spans, end)
                st = earliest_gap(busy[u], ready, d) if insertion else max(ready, free[u])
                plan.append((u, st, st + d))
                finish = max(finish, st + d)
            key = (finish, sum(inst.time_batch(i, u, x) for u, x in enumerate(s)), n)
            if best is None or key < best[0]:
                best = (key, s, plan)
        if best is None or not math.isfinite(best[0][0]):
            return BatchResult(method, None, time.perf_counter() - t0)
        _, s, plan = best
        splits[i], spans[i] = s, ranges(s)
        _add(inst, load, i, s)
        for u, st, en in plan:
            end[(i, u)] = en
            free[u] = max(free[u], en)
            bisect.insort(busy[u], (st, en))
    sched = simulate_batch(inst, splits, slice_order(inst, splits, order), insertion=insertion)
    return BatchResult(method, sched, time.perf_counter() - t0)


def _slice_times(inst: Instance, i: int, cands: list[Split]) -> np.ndarray:
    """(splits, K): the duration of each split's slice of op ``i`` on each device, 0 where it has none."""
    sizes = np.asarray(cands)
    out = np.zeros(sizes.shape)
    for u in range(inst.k):
        for b in np.unique(sizes[:, u]):
            if b > 0:
                out[sizes[:, u] == b, u] = inst.time_batch(i, u, int(b))
    return out


def bgreedy(inst: Instance, batch: int, time_limit: float = math.inf) -> BatchResult:
    return _list_eft(inst, batch, inst.topo, False, "greedy", time_limit)


def bheft(inst: Instance, batch: int, time_limit: float = math.inf) -> BatchResult:
    """bHEFT: ops by decreasing upward rank (mean whole-batch time over the devices), insertion."""
    return _list_eft(inst, batch, _rank_order(inst, batch), True, "heft", time_limit)


def _rank_order(inst: Instance, batch: int) -> list[int]:
    """The ops by decreasing upward rank with whole-batch times (HEFT's order)."""
    from onnxpart.schedule.heuristics import rank_order

    scaled = Instance.__new__(Instance)
    scaled.__dict__.update(inst.__dict__)
    scaled.time = np.array([[inst.time_batch(i, u, batch) for u in range(inst.k)] for i in range(inst.n)])
    return rank_order(scaled)


def _search(inst: Instance, batch: int, init: Sequence[Split], iterations: int, seed: int, time_limit: float,
            method: str) -> BatchResult:
    """SA (``sa``) or biased (1+1) EA (``ea``) over splits; fitness = the makespan of the slices list-
    scheduled in bHEFT's rank order with insertion. (The BFS order without insertion, used before, ran
    bHEFT's own splits slower than bHEFT does: on the benchmark's wd 2-channel stack a search started
    from them returned 924 inputs/s where bHEFT has 1998.)"""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    cands = op_splits(inst, batch)
    movable = [i for i in range(inst.n) if len(cands[i]) > 1]
    cur = list(init)
    order = _rank_order(inst, batch)
    f = f0 = batch_makespan(inst, cur, order, True)
    best, fbest = list(cur), f
    scale = f0 if math.isfinite(f0) and f0 > 0 else 1.0
    evals = 1
    for it in range(iterations if movable else 0):
        if time.perf_counter() - t0 > time_limit:
            break
        child = list(cur)
        flips = ([movable[int(rng.integers(len(movable)))]] if method == "sa" else
                 [i for i in movable if rng.random() < 1.0 / len(movable)] or [movable[int(rng.integers(len(movable)))]])
        for i in flips:
            opts = [s for s in cands[i] if s != cur[i]]
            child[i] = opts[int(rng.integers(len(opts)))]
        fc = batch_makespan(inst, child, order, True)
        evals += 1
        if method == "sa":
            temp = 0.05 * (1e-4 / 0.05) ** (it / max(1, iterations - 1))
            accept = fc <= f or (math.isfinite(fc) and rng.random() < math.exp(-(fc - f) / (temp * scale)))
        else:
            accept = fc <= f
        if accept:
            cur, f = child, fc
            if f < fbest:
                best, fbest = list(cur), f
    return BatchResult(method, simulate_batch(inst, best, slice_order(inst, best, order), True),
                       time.perf_counter() - t0, evals)


def bsa(inst, batch, init, iterations=2000, seed=0, time_limit=math.inf) -> BatchResult:
    return _search(inst, batch, init, iterations, seed, time_limit, "sa")


def bea(inst, batch, init, iterations=2000, seed=0, time_limit=math.inf) -> BatchResult:
    return _search(inst, batch, init, iterations, seed, time_limit, "ea")


# ----------------------------------------------------------------------------------------- bounds
def _min_slice(inst: Instance, i: int) -> float:
    return min(inst.time_batch(i, u, b) for u in inst.allowed(i) for b in inst.batch_sizes[u])


def critical_path_bound(inst: Instance, batch: int) -> LowerBound:
    """Every input crosses every path: along a path each op's slice holding a given input takes at
    least the op's fastest (device, supported size) time, and the slices of one input are ordered."""
    t0 = time.perf_counter()
    finish = [0.0] * inst.n
    for i in inst.topo:
        finish[i] = _min_slice(inst, i) + max((finish[p] for p in inst.preds[i]), default=0.0)
    return LowerBound("critical-path", max(finish), "bound", "formula", time.perf_counter() - t0,
                      "per-input longest path at each op's fastest slice; transfers free")


@dataclass
class LoadLP:
    """The load LP's proven bound and its fractional splits rounded to a schedule (None where the LP
    found no optimum or no rounding fits memory)."""

    bound: LowerBound
    rounded: BatchSchedule | None


def load_lp(inst: Instance, batch: int, time_limit: float = 10.0) -> LoadLP:
    """LP over fractional splits: ``Σ_s z_is = 1``, ``Σ_i Σ_s z_is·t(i,u,s_u) ≤ C`` per device (each
    device computes at most ``C`` seconds), and path rows ``e_i ≥ e_p + Σ_s z_is·m_i(s)``, ``C ≥ e_i``
    with ``m_i(s)`` the shortest slice of split ``s``, and memory (3.7) per device as a sum over the
    chosen splits. *Proof:* a schedule's splits are a 0/1 ``z`` (meeting 3.7);
    for any one input ``x``, ``e_i`` = the end of the slice of ``i`` holding ``x`` satisfies the path
    rows (that slice starts after the slice of each predecessor holding ``x`` ends, and lasts at least
    ``m_i``). At least the work bound "total work at the best split over the number of devices".
    Where the split families are canonical (:func:`split_family`), the load and memory rows are summed
    over each class of interchangeable devices (``≤ |class|·C``, ``≤ |class|·capacity``): sorting a
    split's sizes within a class keeps those sums and ``m_i``, so every schedule still gives a feasible
    ``z``. Where some family is cut at :data:`MAX_SPLITS`, :func:`_slice_lp` replaces it.
    Its optimum, rounded (:func:`_rounded`), is also a start for the searches: it chooses which ops
    hold the activations that do not fit the fast devices by the compute they cost, where list
    scheduling fills the fast devices first and leaves the graph's end to the slowest."""
    t0 = time.perf_counter()
    families = op_families(inst, batch)
    if not all(f.complete for f in families):
        return _slice_lp(inst, batch, time_limit, t0)
    cands = [f.splits for f in families]
    groups = inst.symmetry_classes() if any(f.canonical for f in families) else [[u] for u in range(inst.k)]
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    z = [[lp.var(0, 1) for _ in cands[i]] for i in range(inst.n)]
    for i in range(inst.n):
        lp.row({col: 1.0 for col in z[i]}, 1.0, 1.0)
    for group in groups:  # (3.7) and the loads per device, or per class of interchangeable devices
        load: dict[int, float] = {c: -float(len(group))}
        memory: dict[int, float] = {}
        for i in range(inst.n):
            for col, s in zip(z[i], cands[i]):
                for u in group:
                    if s[u] > 0:
                        load[col] = load.get(col, 0.0) + inst.time_batch(i, u, s[u])
                        memory[col] = memory.get(col, 0.0) + inst.mem[i] + inst.act_mem[i] * (s[u] - 1)
        lp.row(load, upper=0.0)
        cap = sum(inst.capacity[u] for u in group)
        if math.isfinite(cap):
            lp.row(memory, upper=cap)
    # per-input paths: e_i ≥ e_p + Σ_s z_is·(shortest slice of s), C ≥ e_i
    e = [lp.var(0, math.inf) for _ in range(inst.n)]
    for i in range(inst.n):
        dur = {col: min(inst.time_batch(i, u, x) for u, x in enumerate(sp) if x > 0) for col, sp in zip(z[i], cands[i])}
        for p in inst.preds[i] or [None]:
            lp.row({**{col: -d for col, d in dur.items()}, e[i]: 1.0, **({e[p]: -1.0} if p is not None else {})},
                   lower=0.0)
        lp.row({e[i]: 1.0, c: -1.0}, upper=0.0)
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else None
    rows = "per class of interchangeable devices" if len(groups) < inst.k else "per device"
    bound = LowerBound("load-lp", value, res.status, "highs", time.perf_counter() - t0,
                       f"LP relaxation over splits: loads ≤ C and memory (3.7) {rows}, per-input paths ≤ C")
    weights = [np.asarray(res.values)[cols] for cols in z] if value is not None else None
    return LoadLP(bound, _rounded(inst, batch, cands, weights) if weights is not None else None)


def _slice_lp(inst: Instance, batch: int, time_limit: float, t0: float) -> LoadLP:
    """The load LP for systems whose splits are too many to list: a variable ``y_iub`` per op, device and
    size (:func:`op_sizes`) instead of one per split, with ``Σ_b y_iub ≤ 1`` (3.5), ``Σ_u Σ_b b·y_iub =
    L`` (3.4), the device loads ``≤ C`` and memory (3.7). *Proof:* a schedule's slices are a 0/1 ``y``
    meeting every row. It has no path rows (the shortest slice of a split is not linear in ``y``; the
    critical-path bound covers paths) and no rounding."""
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    load: list[dict[int, float]] = [{c: -1.0} for _ in range(inst.k)]
    memory: list[dict[int, float]] = [{} for _ in range(inst.k)]
    for i in range(inst.n):
        inputs: dict[int, float] = {}
        for u, sizes in enumerate(op_sizes(inst, i, batch)):
            ys = {lp.var(0, 1): b for b in sizes}
            if ys:
                lp.row({y: 1.0 for y in ys}, upper=1.0)
            for y, b in ys.items():
                inputs[y] = float(b)
                load[u][y] = inst.time_batch(i, u, b)
                memory[u][y] = inst.mem[i] + inst.act_mem[i] * (b - 1)
        lp.row(inputs, float(batch), float(batch))
    for u in range(inst.k):
        lp.row(load[u], upper=0.0)
        if math.isfinite(inst.capacity[u]) and memory[u]:
            lp.row(memory[u], upper=inst.capacity[u])
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else None
    return LoadLP(LowerBound("load-lp", value, res.status, "highs", time.perf_counter() - t0,
                             "LP relaxation over slices (too many splits to list): device loads ≤ C, "
                             "memory (3.7)"), None)


def _rounded(inst: Instance, batch: int, cands: list[list[Split]], weights: list[np.ndarray]) -> BatchSchedule | None:
    """Each op's split of largest LP weight that still fits memory, the ops taken most decided first
    (so the ops the LP leaves fractional give way), then list-scheduled in bHEFT's rank order with
    insertion; None if some op fits nowhere."""
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    for i in sorted(range(inst.n), key=lambda i: (-weights[i].max(), i)):
        ok = [n for n in np.argsort(-weights[i], kind="stable") if _fits(inst, load, i, cands[i][n])]
        if not ok:
            return None
        splits[i] = cands[i][ok[0]]
        _add(inst, load, i, splits[i])
    return simulate_batch(inst, splits, slice_order(inst, splits, _rank_order(inst, batch)), insertion=True)


# ----------------------------------------------------------------------------------------- CP-SAT
@dataclass
class BatchExact:
    status: str
    schedule: BatchSchedule | None
    bound: float | None  # proven lower bound on the batch makespan C
    seconds: float
    note: str = ""


def _line(inst: Instance, e: int, u: int, v: int, batch: int) -> tuple[float, float] | None:
    """``(a, r)`` with ``a + r·c ≤ delay(c)`` for ``1 ≤ c ≤ batch`` (exact for a direct link: the delay
    is ``latency + c·bytes/bandwidth``; a route is a min of such lines, concave, above its chord)."""
    d1 = inst.delay_count(e, u, v, 1)
    if not math.isfinite(d1):
        return None
    if batch == 1:
        return d1, 0.0
    dl = inst.delay_count(e, u, v, batch)
    r = (dl - d1) / (batch - 1)
    return d1 - r, r


def cpsat(inst: Instance, batch: int, time_limit: float, hint: BatchSchedule | None = None, *, seed: int = 0,
          workers: int = 1, deterministic_time: float | None = None,
          pinned: dict[int, Split] | None = None) -> BatchExact:
    """The thesis MILP's batch model on CP-SAT: ``b_{i,u,l}`` booleans (at most one size per op and
    device, 3.5), ``Σ_u Σ_l l·b_{i,u,l} = L`` (3.4), slice ranges ``lo_{i,u} = Σ_{w<u} n_{i,w}``,
    overlap counts ``c = max(0, min(hi) − max(lo))`` gating the per-input precedence with transfers
    (3.3), optional intervals with NoOverlap per device (3.8), memory (3.7). Durations and delays are
    floored to ticks (a relaxation: the bound is proven); the solution is re-simulated. The sizes are
    all of :func:`op_sizes`, not the heuristics' candidate splits, so the bound holds on any system. ``pinned``
    (op → split) fixes those ops' splits; a hint that disagrees with a pin is not used."""
    t0 = time.perf_counter()
    op_families(inst, batch)  # UserError where an op has no split
    sizes = [{u: list(bs) for u, bs in enumerate(op_sizes(inst, i, batch))} for i in range(inst.n)]
    for i, sp in (pinned or {}).items():
        sizes[i] = {u: [x] if x > 0 else [] for u, x in enumerate(sp)}
    if hint is not None and any(tuple(hint.splits[i]) != tuple(sp) for i, sp in (pinned or {}).items()):
        hint = None
    from onnxpart.schedule.exact import _scale

    horizon = hint.makespan if hint is not None else sum(  # any size: a measured curve may fall with the size
        max(inst.time_batch(i, u, b) for u in inst.allowed(i) for b in (batch, *inst.batch_sizes[u]) if b <= batch)
        for i in range(inst.n)) * 2 + 1.0
    scale = _scale(horizon)
    top = math.ceil(horizon * scale) + 1
    tick = lambda sec: int(math.floor(sec * scale))  # noqa: E731
    m = cp_model.CpModel()
    b = [{u: {l: m.new_bool_var(f"b{i}_{u}_{l}") for l in sizes[i][u]} for u in range(inst.k)} for i in range(inst.n)]
    n = [[m.new_int_var(0, batch, f"n{i}_{u}") for u in range(inst.k)] for i in range(inst.n)]
    p = [[m.new_bool_var(f"p{i}_{u}") for u in range(inst.k)] for i in range(inst.n)]
    lo = [[m.new_int_var(0, batch, f"lo{i}_{u}") for u in range(inst.k)] for i in range(inst.n)]
    st = [[m.new_int_var(0, top, f"s{i}_{u}") for u in range(inst.k)] for i in range(inst.n)]
    en = [[m.new_int_var(0, top, f"e{i}_{u}") for u in range(inst.k)] for i in range(inst.n)]
    cmax = m.new_int_var(0, top, "C")
    ivs: list[list] = [[] for _ in range(inst.k)]
    for i in range(inst.n):
        for u in range(inst.k):
            bs = list(b[i][u].values())
            m.add(sum(bs) <= 1)  # (3.5) one batch size per op and device
            m.add(p[i][u] == sum(bs))
            m.add(n[i][u] == sum(l * v for l, v in b[i][u].items()))
            m.add(lo[i][u] == sum(n[i][w] for w in range(u)))
            dur = m.new_int_var(0, top, f"d{i}_{u}")
            m.add(dur == sum(tick(inst.time_batch(i, u, l)) * v for l, v in b[i][u].items()))
            m.add(en[i][u] == st[i][u] + dur)
            m.add(cmax >= en[i][u]).only_enforce_if(p[i][u])
            ivs[u].append(m.new_optional_interval_var(st[i][u], dur, en[i][u], p[i][u], f"iv{i}_{u}"))
        m.add(sum(n[i]) == batch)  # (3.4)
    for u in range(inst.k):
        m.add_no_overlap(ivs[u])
        if math.isfinite(inst.capacity[u]):  # (3.7)
            m.add(sum(math.floor(inst.mem[i] - inst.act_mem[i]) * p[i][u] + math.floor(inst.act_mem[i]) * n[i][u]
                      for i in range(inst.n)) <= math.floor(inst.capacity[u]))
    if not _slice_precedence(m, inst, batch, b, n, lo, st, en, tick, t0 + time_limit):
        return BatchExact("time_limit", hint, None, time.perf_counter() - t0,
                          f"the model ({inst.k} devices) was not built within the time limit")
    m.minimize(cmax)
    if hint is not None:
        for i in range(inst.n):
            for u in range(inst.k):
                for l, v in b[i][u].items():
                    m.add_hint(v, hint.splits[i][u] == l)
                if (i, u) in hint.start:
                    m.add_hint(st[i][u], tick(hint.start[(i, u)]))
    res, solver = solve_cpsat(m, max(time_limit - (time.perf_counter() - t0), 0.01), workers=workers, seed=seed,
                              parameters={"max_deterministic_time": deterministic_time} if deterministic_time else None)
    found = _resimulated(inst, solver, n, st) if res.has_solution else None
    cands_s = [s for s in (found, hint) if s is not None]
    best = min(cands_s, key=lambda s: s.makespan) if cands_s else None
    bound = math.inf if res.status == "infeasible" else res.bound / scale
    return BatchExact(res.status, best, bound, time.perf_counter() - t0, f"times floored to 1/{scale:g} s")


def _slice_precedence(m: cp_model.CpModel, inst: Instance, batch: int, b, n, lo, st, en, tick,
                      deadline: float) -> bool:
    """(3.3) per edge and device pair: when the slices [lo, lo + n) of producer and consumer share ``c ≥ 1``
    inputs, the consumer starts after the producer ends plus the transfer of those c inputs (none on one
    device); a pair with no link never shares inputs. False when the clock passes ``deadline`` first
    (``K²`` pairs per edge: 24 devices make 576)."""
    for e, (i, j, _) in enumerate(inst.edges):
        if time.perf_counter() > deadline:
            return False
        for u in range(inst.k):
            if not b[i][u]:
                continue
            for v in range(inst.k):
                if not b[j][v]:
                    continue
                hi_min = m.new_int_var(0, batch, "")
                lo_max = m.new_int_var(0, batch, "")
                m.add_min_equality(hi_min, [lo[i][u] + n[i][u], lo[j][v] + n[j][v]])
                m.add_max_equality(lo_max, [lo[i][u], lo[j][v]])
                c = m.new_int_var(0, batch, f"c{e}_{u}_{v}")
                m.add_max_equality(c, [hi_min - lo_max, 0])
                share = m.new_bool_var("")
                m.add(c >= 1).only_enforce_if(share)
                m.add(c == 0).only_enforce_if(~share)
                line = _line(inst, e, u, v, batch) if u != v else (0.0, 0.0)
                if line is None:
                    m.add(share == 0)
                    continue
                a, r = line
                m.add(st[j][v] >= en[i][u] + tick(a) + tick(r) * c).only_enforce_if(share)
                m.add(st[j][v] >= en[i][u]).only_enforce_if(share)
    return True


def _resimulated(inst: Instance, solver, n, st) -> BatchSchedule | None:
    """The solver's splits and slice order, re-simulated; None when they break memory or links (byte counts
    are floored in the model, a relaxation: only valid answers are kept)."""
    splits = [tuple(solver.value(n[i][u]) for u in range(inst.k)) for i in range(inst.n)]
    starts = {(i, u): solver.value(st[i][u]) for i in range(inst.n) for u in range(inst.k) if splits[i][u] > 0}
    found = simulate_batch(inst, splits, _order_by_start(inst, splits, starts))
    if memory_violations(inst, splits) or not math.isfinite(found.makespan):
        return None
    return found


def _order_by_start(inst: Instance, splits, starts: dict) -> list[tuple[int, int]]:
    """Slices by solver start time, repaired to respect the slice precedence (ties: BFS position)."""
    pos = {v: k for k, v in enumerate(inst.topo)}
    pending = sorted(starts, key=lambda key: (starts[key], pos[key[0]], key[1]))
    done: set = set()
    out = []
    while pending:
        rest = []
        for key in pending:
            i, u = key
            mine = ranges(splits[i])[u]
            if all((p, w) in done for p in inst.preds[i] for w, r in enumerate(ranges(splits[p]))
                   if overlap(r, mine) > 0):
                out.append(key)
                done.add(key)
            else:
                rest.append(key)
        pending = rest
    return out
