"""SliceGraph on long orders in linear memory: slice the order at the boundaries of *runs*.

:class:`~onnxpart.partition.segments.SegmentCosts` holds every segment cost of an order, an n × n matrix
(3 GB at n = 20,000). Above :data:`DENSE_LIMIT` ops the order is cut into at most that many runs of
consecutive positions and each run is contracted into one op: its work and parameters summed, each
tensor kept once with the runs of its producer and consumers (a tensor whose points all lie in one run
never crosses a boundary between runs and is dropped). A segment of runs is a segment of the order, and
a tensor crosses its boundary exactly when it crosses the union's, so every cost of the contracted
instance is the exact Eq. (3) cost of that block: the slicing found is an exact slicing of the order,
optimal among those that cut only at run boundaries.

The runs are refined where it matters: first :data:`DENSE_LIMIT` / 2 runs of about equal work and op
count; then every position within ``h`` of a cut of the best slicing becomes a run of its own (``h``
as large as the limit allows) and the order is sliced again, until the cuts stay put (at most
:data:`REFINE_ROUNDS` rounds). Each round's runs refine the last's, so the bottleneck never rises.
Memory and time per slicing are those of a :data:`DENSE_LIMIT`-op order plus O(n + m).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxpart.partition.model import Instance
from onnxpart.partition.segments import SegmentCosts, Slicing, slice_order, slice_value

DENSE_LIMIT = 2000  # orders up to this many ops are sliced on their dense segment costs
REFINE_ROUNDS = 3


def best_slicing(inst: Instance, order: np.ndarray, k: int) -> Slicing:
    """An optimal slicing of ``order`` into ≤ k blocks (:func:`slice_order`); above :data:`DENSE_LIMIT`
    ops, the best among slicings at run boundaries (module doc)."""
    order = np.asarray(order, dtype=np.int64)
    if inst.n <= DENSE_LIMIT:
        return slice_order(SegmentCosts(inst, order), k)
    starts = _even_runs(inst, order, DENSE_LIMIT // 2)
    best = _sliced_at(inst, order, starts, k)
    for _ in range(REFINE_ROUNDS):
        cuts = _cuts(best.assignment[order])
        finer = _around(starts, cuts, inst.n)
        if len(finer) == len(starts):
            break
        trial = _sliced_at(inst, order, finer, k)
        starts = finer
        if trial.value >= best.value:
            break
        best = trial
    return best


def best_value(inst: Instance, order: np.ndarray, k: int) -> float:
    """The bottleneck of :func:`best_slicing` (value only: no backtracking on dense orders)."""
    if inst.n <= DENSE_LIMIT:
        return slice_value(SegmentCosts(inst, np.asarray(order, dtype=np.int64)), k)
    return best_slicing(inst, order, k).value


def _even_runs(inst: Instance, order: np.ndarray, count: int) -> np.ndarray:
    """Start positions of ``count`` runs (or fewer) of about equal share of work plus op count."""
    work = inst.work[order]
    total = float(work.sum())
    weight = np.full(inst.n, 1.0 / inst.n) + (work / total if total > 0 else 0.0)
    cumulative = np.concatenate([[0.0], np.cumsum(weight)[:-1]])
    targets = np.linspace(0.0, cumulative[-1], count, endpoint=False)
    return np.unique(np.searchsorted(cumulative, targets, side="left").clip(0, inst.n - 1))


def _cuts(blocks_by_position: np.ndarray) -> np.ndarray:
    """Positions where a new block starts (the first position excluded)."""
    return np.flatnonzero(np.diff(blocks_by_position)) + 1


def _around(starts: np.ndarray, cuts: np.ndarray, n: int) -> np.ndarray:
    """``starts`` plus every position within ``h`` of a cut, ``h`` as large as :data:`DENSE_LIMIT` allows."""
    if not len(cuts):
        return starts
    h = max(1, (DENSE_LIMIT - len(starts)) // (2 * len(cuts)))
    near = (cuts[:, None] + np.arange(-h, h + 1)[None, :]).ravel()
    return np.union1d(starts, near[(near >= 0) & (near < n)])


def _sliced_at(inst: Instance, order: np.ndarray, starts: np.ndarray, k: int) -> Slicing:
    """The optimal slicing of ``order`` that cuts only at ``starts`` (sorted, starting with 0)."""
    run_of_op = np.empty(inst.n, dtype=np.int64)
    run_of_op[order] = np.searchsorted(starts, np.arange(inst.n), side="right") - 1
    runs = contract(inst, order, starts, run_of_op)
    sliced = slice_order(SegmentCosts(runs, np.arange(runs.n)), k)
    return Slicing(sliced.value, sliced.assignment[run_of_op])


def contract(inst: Instance, order: np.ndarray, starts: np.ndarray, run_of_op: np.ndarray) -> Instance:
    """The instance whose op ``i`` is run ``i`` of ``order`` (positions ``starts[i]`` to the next start):
    work and parameters summed, each tensor with its producer's run and its other consumers' runs."""
    work = np.add.reduceat(inst.work[order], starts)
    params = np.add.reduceat(inst.params[order], starts)
    counts = np.diff(inst.cons_ptr)
    owner = np.repeat(np.arange(inst.num_tensors), counts)
    producer_run = run_of_op[inst.producer]
    consumer_run = run_of_op[inst.cons_idx]
    crossing = consumer_run != producer_run[owner]
    pairs = np.unique(owner[crossing] * len(starts) + consumer_run[crossing])  # sorted by tensor, then run
    pair_owner, pair_run = np.divmod(pairs, len(starts))
    kept, per_tensor = np.unique(pair_owner, return_counts=True)
    return dataclasses.replace(
        inst, op_names=(), members=(), tensor_names=(), work=work, params=params, producer=producer_run[kept],
        cons_ptr=np.concatenate([[0], np.cumsum(per_tensor)]), cons_idx=pair_run, transfer=inst.transfer[kept])
