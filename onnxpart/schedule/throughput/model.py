"""The throughput objective's data (Sections 3.1–3.2 of the thesis): a batch of ``L`` inputs split into
slices — the splits each op may take, the slices they make, and memory (3.7) with batching.

Semantics (every batched method of :mod:`onnxpart.schedule.throughput` and the brute force in the tests
use exactly these):

* A **split** of op ``i`` gives every device ``u`` a slice size ``n[i][u] ∈ {0} ∪ B_u`` with
  ``Σ_u n[i][u] = L`` — the thesis's ``b_{i,u,l}`` (one batch per op and device, constraints
  3.4–3.5). The slice on ``u`` runs ``time_batch(i, u, n)`` seconds
  (:meth:`~onnxpart.schedule.common.instance.Instance.time_batch`), without preemption; a device runs one
  slice at a time.
* Inputs are assigned to slices **contiguously in device order**: slice ``(i, u)`` holds inputs
  ``[lo, lo + n)`` with ``lo = Σ_{w<u} n[i][w]``. (The thesis's ``x_{i,u,l}`` leaves the assignment
  free; fixing it keeps the model polynomial to state and makes two ops split alike chain slice by
  slice — data parallelism without a barrier.)
* Precedence per input (3.3): slice ``(j, v)`` starts after every slice ``(i, u)`` of a predecessor
  sharing ``c > 0`` inputs with it has ended, plus the transfer of ``c`` inputs' tensors
  (:meth:`~onnxpart.schedule.common.instance.Instance.delay_count`; free on one device; contention-free links).
* Memory (3.7): ``Σ_{i with n[i][u] > 0} mem_i + act_i·(n[i][u] − 1) ≤ capacity_u`` (weights once,
  activations per input).
* **Throughput = L / C**, ``C`` the makespan of the whole batch — the thesis's objective "``L/C`` when
  optimizing for throughput" (Section 3.2), the low-latency regime of Section 4.4: one batch of ``B``
  inputs is run as fast as possible (no pipelining across batches).
"""


from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.schedule.common.instance import Instance
from onnxpart.units import format_bytes

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


def size_patterns(inst: Instance, batch: int) -> tuple[list[Sizes], np.ndarray]:
    """``(patterns, which)``: the distinct :func:`op_sizes` of the ops and, per op, the index of its own
    among them — the same test as :func:`op_sizes`, on every op at once (20,000 ops: 0.3 s one by one)."""
    columns = [(u, b) for u, bs in enumerate(inst.batch_sizes) for b in sorted(set(bs)) if b <= batch]
    allowed = inst.allowed_mask()
    ok = np.array([allowed[:, u] & (inst.mem + inst.act_mem * (b - 1) <= inst.capacity[u]) for u, b in columns],
                  dtype=bool).reshape(len(columns), inst.n).T
    if not columns:
        return [((),) * inst.k], np.zeros(inst.n, dtype=np.int64)
    packed = np.ascontiguousarray(np.packbits(ok, axis=1))  # a row as bytes: np.unique on rows is 100× slower
    _, first, which = np.unique(packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1), return_index=True,
                                return_inverse=True)
    patterns = [tuple(tuple(b for (w, b), on in zip(columns, ok[row]) if on and w == u) for u in range(inst.k))
                for row in first]
    return patterns, which.reshape(-1)


def op_families(inst: Instance, batch: int) -> list[SplitFamily]:
    """Each op's :func:`split_family` over its :func:`op_sizes`; UserError if the batch cannot be made of
    the devices' sizes at all, or some op has no split."""
    if not split_family(inst, batch).splits:
        names = "; ".join(f"{n}: {', '.join(map(str, bs))}" for n, bs in zip(inst.device_names, inst.batch_sizes))
        raise UserError(f"batch {batch} cannot be made of the devices' batch sizes ({names}): "
                        f"choose a batch that is a sum of supported sizes, one per device")
    patterns, which = size_patterns(inst, batch)
    families = [split_family(inst, batch, sizes) for sizes in patterns]
    out = [families[w] for w in which.tolist()]
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


def slices(splits: Sequence[Split], i: int) -> list[int]:
    return [u for u, x in enumerate(splits[i]) if x > 0]


def overlapping_slices(inst: Instance, splits: Sequence[Split]):
    """Every ``(e, (i, u), (j, v), (lo, hi))``: edge ``e = i → j``, a slice of ``i`` on ``u`` and one of
    ``j`` on ``v`` sharing the inputs ``[lo, hi)`` — the pairs precedence per input (3.3) ties together."""
    for e, (i, j, _) in enumerate(inst.edges):
        ri, rj = ranges(splits[i]), ranges(splits[j])
        for u in slices(splits, i):
            for v in slices(splits, j):
                if overlap(ri[u], rj[v]) > 0:
                    yield e, (i, u), (j, v), (max(ri[u][0], rj[v][0]), min(ri[u][1], rj[v][1]))


def memory_violations(inst: Instance, splits: Sequence[Split]) -> list[str]:
    """Why ``splits`` break a hard rule: a slice on a device its op cannot run on, a device over capacity."""
    load = np.zeros(inst.k)
    for i, s in enumerate(splits):
        for u, x in enumerate(s):
            if x > 0:
                if not math.isfinite(inst.time[i, u]):
                    return [f"{inst.op_names[i]} cannot run on {inst.device_names[u]}"]
                load[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
    return [f"{inst.device_names[u]} holds {load[u]:.0f} bytes > capacity {inst.capacity[u]:.0f}"
            for u in range(inst.k) if load[u] > inst.capacity[u] * (1 + 1e-12)]


def memory_floor(inst: Instance, batch: int) -> float:
    """The least memory (3.7) any batched schedule holds, summed over the devices (:func:`floor_line` at
    ``batch``)."""
    per_input, fixed = floor_line(inst, batch)
    return per_input * batch + fixed


def floor_line(inst: Instance, batch: int) -> tuple[float, float]:
    """``(a, b)``: every split of any batch ``L' ≤ batch`` holds at least ``a·L' + b`` bytes (3.7) summed
    over the devices, exactly the least at ``L' = batch``. *Proof:* op ``i`` split into ``m`` slices holds
    ``Σ_u mem_i + act_i·(n_u − 1) = act_i·L' + m·(mem_i − act_i)`` (its slice sizes sum to ``L'``), linear
    in ``m``, with ``1 ≤ m ≤ min(k_i, L')``, ``k_i`` the devices where :func:`op_sizes` gives ``i`` a size
    at ``batch`` (at ``L' ≤ batch`` no more of them, nor slices): at least the smaller of its values at
    ``m = 1`` and ``m = min(k_i, batch)``. ``a = Σ_i act_i``. Closed form, O(n·K): no split is listed."""
    patterns, which = size_patterns(inst, batch)
    devices = [sum(1 for sizes in pattern if sizes) for pattern in patterns]
    fixed = 0.0
    for i, w in enumerate(which.tolist()):
        most = max(1, min(devices[w], batch))
        extra = inst.mem[i] - inst.act_mem[i]  # what a slice holds beyond its inputs' activations
        fixed += min(extra, most * extra)
    return float(np.sum(inst.act_mem)), fixed


def check_memory_floor(inst: Instance, batch: int) -> None:
    """:class:`InfeasibleError` (exit 4) where the batch's :func:`memory_floor` exceeds the devices'
    capacities together: no split of it fits (3.7), whatever the method or time limit; the message names
    the largest batch the same floor does not refuse (:func:`floor_line`), if any."""
    per_input, fixed = floor_line(inst, batch)
    floor, capacity = per_input * batch + fixed, float(np.sum(inst.capacity))
    if floor > capacity * (1 + 1e-12):
        most = math.floor((capacity - fixed) / per_input) if per_input > 0 else 0
        above = f"nor for any batch above {most}" if most > 0 else "nor for any batch"
        raise InfeasibleError(
            f"a batch of {batch} needs at least {format_bytes(floor)} of device memory in all (3.7: weights once "
            f"per slice, activations per input, {format_bytes(per_input)} per input) but the devices hold "
            f"{format_bytes(capacity)}: no batched schedule exists, {above}; use a smaller --batch or more memory")


def fits(inst: Instance, load: np.ndarray, i: int, s: Split) -> bool:
    """Whether op ``i`` split as ``s`` fits on top of the devices' ``load`` (3.7 with batching)."""
    return all(x == 0 or load[u] + inst.mem[i] + inst.act_mem[i] * (x - 1) <= inst.capacity[u] * (1 + 1e-12)
               for u, x in enumerate(s))


def add_load(inst: Instance, load: np.ndarray, i: int, s: Split) -> None:
    """Add op ``i`` split as ``s`` to the devices' ``load``: its weights once, its activations per input."""
    for u, x in enumerate(s):
        if x > 0:
            load[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
