"""Segment costs of a topological order and SliceGraph, its optimal slicing (Section 4, Appendix B).

For an order π, a *segment* [l, r] is the block {π(l), …, π(r)}. Lemma 4.1 of Archer et al. builds
all O(n²) segment costs with a 2-D Fenwick tree in O(n² + m log² n); here the same rectangle updates
of Algorithm 5 go into a 2-D **difference array** and one 2-D prefix sum recovers every entry, in
O(n² + m) and without a tree:

A tensor with sorted positions p₁ < … < p_d (its producer and its consumers) is paid by a segment iff
the segment contains some but not all of them (then it is an input or an output of the block, counted
once: Eq. 1). So start every entry at Σ transfer and subtract the tensor's transfer on

* segments containing all points: l ≤ p₁ and r ≥ p_d (one rectangle), and
* segments containing none: l, r inside one gap [0, p₁−1], [pᵢ+1, pᵢ₊₁−1], [p_d+1, n−1] (d+1 squares;
  their l > r halves are never queried).

Work and parameter bytes are 1-D prefix sums, and the overflow of Eq. (2) is applied entrywise.
:func:`slice_order` is Algorithm 1's dynamic program, vectorized over r with numpy: O(n²) per block.

Layout: the matrix is stored by segment end, ``by_end[r, l]`` = f([l, r]), so the DP's minimum over l
for each r runs along contiguous memory (3× faster than over columns at n = 1000), into one reused
buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.partition.model import Instance


class SegmentCosts:
    """All segment costs of one order: ``by_end[r, l]`` = f({π(l..r)}) for l ≤ r, +inf for l > r."""

    def __init__(self, inst: Instance, order: Sequence[int]):
        self.inst = inst
        self.order = np.asarray(order, dtype=np.int64)
        n = inst.n
        position = np.empty(n, dtype=np.int64)
        position[self.order] = np.arange(n)
        self.position = position
        cost = _io_by_end(inst, position)
        work = np.concatenate([[0.0], np.cumsum(inst.work[self.order])])
        params = np.concatenate([[0.0], np.cumsum(inst.params[self.order])])
        cost += work[1:, None]  # [l, r] += Σ work of π(l..r) = W[r+1] - W[l]
        cost -= work[None, :-1]
        if inst.stage_memory is not None:
            cost += inst.overflow(params[1:, None] - params[None, :-1])
        cost += _after_diagonal(n)
        self.by_end = cost

    def query(self, l: int, r: int) -> float:
        """f of segment [l, r] (inclusive); 0 for an empty segment (l > r)."""
        return 0.0 if l > r else float(self.by_end[r, l])


@functools.lru_cache(maxsize=4)
def _after_diagonal(n: int) -> np.ndarray:
    """+inf strictly above the diagonal, 0 elsewhere (``by_end[r, l]`` with l > r is no segment)."""
    return np.where(np.tri(n, k=0, dtype=bool), 0.0, np.inf)


def _io_by_end(inst: Instance, position: np.ndarray) -> np.ndarray:
    """``io[r, l]`` of every segment [l, r], via rectangle updates on a 2-D difference array (see module
    doc; the rectangles are over (l, r), written transposed)."""
    n = inst.n
    T = inst.num_tensors
    if T == 0 or n == 0:
        return np.zeros((n, n))
    counts = np.diff(inst.cons_ptr) + 1  # points per tensor: producer + consumers
    owner = np.repeat(np.arange(T), counts)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    points = np.empty(counts.sum(), dtype=np.int64)
    is_producer = np.zeros(len(points), dtype=bool)
    is_producer[start] = True
    points[start] = position[inst.producer]
    points[~is_producer] = position[inst.cons_idx]
    sort = np.lexsort((points, owner))
    points = points[sort]  # sorted within each tensor (owner is already grouped)
    value = inst.transfer
    first = points[start]
    last = points[start + counts - 1]

    # Rectangles [r0, r1] x [c0, c1] whose entries lose the tensor's transfer.
    r0 = [np.zeros(T, dtype=np.int64)]
    r1 = [first]
    c0 = [last]
    c1 = [np.full(T, n - 1, dtype=np.int64)]
    vals = [value]
    inner = np.ones(len(points), dtype=bool)
    inner[start + counts - 1] = False  # a gap follows every point but the tensor's last
    gap_a = np.concatenate([np.zeros(T, dtype=np.int64), points[inner] + 1, last + 1])
    gap_b = np.concatenate([first - 1, points[np.flatnonzero(inner) + 1] - 1, np.full(T, n - 1, dtype=np.int64)])
    gap_v = np.concatenate([value, value[owner[inner]], value])
    keep = gap_a <= gap_b
    r0.append(gap_a[keep])
    r1.append(gap_b[keep])
    c0.append(gap_a[keep])
    c1.append(gap_b[keep])
    vals.append(gap_v[keep])
    r0, r1, c0, c1, vals = (np.concatenate(x) for x in (r0, r1, c0, c1, vals))

    width = n + 1
    # Entry (l, r) is stored at (r, l): rectangle rows (l) become columns.
    index = np.concatenate([c0 * width + r0, (c1 + 1) * width + r0, c0 * width + r1 + 1, (c1 + 1) * width + r1 + 1])
    weight = np.concatenate([-vals, vals, vals, -vals])
    diff = np.bincount(index, weights=weight, minlength=width * width).reshape(width, width)
    np.cumsum(diff, axis=0, out=diff)
    np.cumsum(diff, axis=1, out=diff)
    io = diff[:n, :n] + float(value.sum())
    np.maximum(io, 0.0, out=io)  # clear float dust on segments that pay nothing
    return io


@dataclass(frozen=True)
class Slicing:
    value: float  # bottleneck cost
    assignment: np.ndarray  # op -> block (0..k-1), non-empty blocks first


def slice_value(costs: SegmentCosts, k: int) -> float:
    """Optimal bottleneck of the order sliced into at most k blocks (Algorithm 1), value only."""
    n = costs.by_end.shape[0]
    if n == 0:
        return 0.0
    prev = costs.by_end[:, 0].copy()
    shifted = np.empty(n)
    buffer = np.empty((n, n))
    for _ in range(k - 1):
        shifted[0] = 0.0
        shifted[1:] = prev[:-1]
        new = np.minimum(np.maximum(shifted[None, :], costs.by_end, out=buffer).min(axis=1), prev)
        if np.array_equal(new, prev):
            break
        prev = new
    return float(prev[-1])


def slice_order(costs: SegmentCosts, k: int) -> Slicing:
    """Algorithm 1 (SliceGraph's DP) with backtracking: an optimal slicing of the order into ≤ k blocks.

    ``dp_j[r] = min(dp_{j-1}[r], min_{l ≤ r} max(dp_{j-1}[l-1], cost[l, r]))`` with ``dp_{j-1}[-1] = 0``;
    the first term leaves block j empty (blocks may be empty, Section 2.2).
    """
    n = costs.by_end.shape[0]
    if n == 0:
        return Slicing(0.0, np.zeros(0, dtype=np.int64))
    prev = costs.by_end[:, 0].copy()
    ends = np.arange(n)
    choices: list[tuple[np.ndarray, np.ndarray]] = []
    shifted = np.empty(n)
    candidates = np.empty((n, n))
    for _ in range(k - 1):
        shifted[0] = 0.0
        shifted[1:] = prev[:-1]
        np.maximum(shifted[None, :], costs.by_end, out=candidates)  # [r, l]: max(dp_{j-1}[l-1], f([l, r]))
        start = np.argmin(candidates, axis=1)
        best = candidates[ends, start]
        empty = prev <= best
        new = np.where(empty, prev, best)
        if np.array_equal(new, prev):
            break
        choices.append((start, empty))
        prev = new
    blocks_of_position = np.empty(n, dtype=np.int64)
    r = n - 1
    segments: list[tuple[int, int]] = []
    for start, empty in reversed(choices):
        if r < 0:
            break
        if not empty[r]:
            segments.append((int(start[r]), r))
            r = int(start[r]) - 1
    if r >= 0:
        segments.append((0, r))
    for block, (lo, hi) in enumerate(reversed(segments)):
        blocks_of_position[lo:hi + 1] = block
    assignment = np.empty(n, dtype=np.int64)
    assignment[costs.order] = blocks_of_position
    return Slicing(float(prev[-1]), assignment)
