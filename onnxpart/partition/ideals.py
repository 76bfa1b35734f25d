"""Exact MTPP for narrow graphs: a dynamic program over the ideals (down-sets) of the DAG.

Blocks numbered in DAG order make every prefix P₁ ∪ … ∪ Pⱼ an *ideal* (closed under predecessors), and
every chain of ideals ∅ = I₀ ⊆ I₁ ⊆ … ⊆ I_k = V gives a valid partition Pⱼ = Iⱼ ∖ Iⱼ₋₁ (possibly
empty). Hence, as in Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph
Operators" (NeurIPS 2020),

    best_j(J) = min over ideals I ⊆ J of max(best_{j-1}(I), f(J ∖ I)),      best_0(∅) = 0,

and best_K(V) is the proven optimum for every K in one pass. It is only usable when the ideals are few
(graphs with little parallelism), so they are counted first, with a limit.

The cost f(J ∖ I) of Eq. (3) is vectorized with per-ideal point counts: a tensor with point set
{producer} ∪ consumers crosses the block J ∖ I iff the block holds some but not all of its points, i.e.
``0 < cnt_t(J) − cnt_t(I) < |points(t)|``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from onnxpart.partition.model import Instance

log = logging.getLogger(__name__)

#: Default cap of the (ideal pairs × tensors) work for the pair costs.
PAIR_WORK_LIMIT = 3e8


def enumerate_ideals(inst: Instance, limit: int) -> list[int] | None:
    """All ideals as bitmasks (bit v = op v), by size, or None as soon as there are more than ``limit``."""
    preds = [0] * inst.n
    for u, v in inst.edges():
        preds[v] |= 1 << int(u)
    succs = inst.dag.succ_lists
    start_avail = frozenset(v for v in range(inst.n) if preds[v] == 0)
    layer = {0: start_avail}
    ideals = [0]
    while layer:
        nxt: dict[int, frozenset[int]] = {}
        for ideal, avail in layer.items():
            for v in avail:
                grown = ideal | (1 << v)
                if grown in nxt:
                    continue
                freed = [w for w in succs[v] if preds[w] & ~grown == 0]
                nxt[grown] = (avail - {v}) | frozenset(freed)
                if len(ideals) + len(nxt) > limit:
                    return None
        ideals.extend(sorted(nxt))
        layer = nxt
    return ideals


@dataclass(frozen=True)
class IdealDpResult:
    ideals: int
    pairs: int
    optimum_by_k: tuple[float, ...]  # index j-1 -> optimum with at most j blocks
    assignment: np.ndarray  # an optimal partition for the requested k


def _masks_to_matrix(ideals: list[int], n: int) -> np.ndarray:
    width = (n + 7) // 8
    raw = b"".join(m.to_bytes(width, "little") for m in ideals)
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(len(ideals), width), axis=1,
                         bitorder="little")
    return bits[:, :n].astype(bool)


def ideal_dp(inst: Instance, k: int, limit: int,
             pair_work_limit: float = PAIR_WORK_LIMIT) -> IdealDpResult | None:
    """Proven-optimal partition into ≤ k blocks, or None when the ideals (or their pairs) exceed the limits."""
    ideals = enumerate_ideals(inst, limit)
    if ideals is None:
        log.info("ideal-dp: more than %d ideals, not used", limit)
        return None
    member = _masks_to_matrix(ideals, inst.n)  # (N, n)
    sub_lists = _sub_ideals(inst, member, pair_work_limit)
    if sub_lists is None:
        log.info("ideal-dp: %d ideals but too many pairs, not used", len(ideals))
        return None
    pair_i = np.concatenate(sub_lists)
    pair_j = np.repeat(np.arange(len(ideals)), [len(s) for s in sub_lists])
    cost = _pair_costs(inst, member, pair_i, pair_j)

    # best_j over all ideals, for j = 0..k.
    count, full = len(ideals), len(ideals) - 1
    starts = np.concatenate([[0], np.cumsum([len(s) for s in sub_lists])[:-1]])
    best = np.full((k + 1, count), np.inf)
    best[0, 0] = 0.0
    for j in range(1, k + 1):
        best[j] = np.minimum.reduceat(np.maximum(best[j - 1][pair_i], cost), starts)
    # Backtrack an optimal chain for k blocks.
    blocks: list[np.ndarray] = []
    current = full
    for j in range(k, 0, -1):
        lo, hi = starts[current], starts[current] + len(sub_lists[current])
        pick = lo + int(np.argmin(np.maximum(best[j - 1][pair_i[lo:hi]], cost[lo:hi])))
        previous = int(pair_i[pick])
        blocks.append(member[current] & ~member[previous])
        current = previous
    assignment = np.zeros(inst.n, dtype=np.int64)
    for block, ops in enumerate(ops for ops in reversed(blocks) if ops.any()):
        assignment[ops] = block
    return IdealDpResult(count, int(len(pair_i)), tuple(float(best[j, full]) for j in range(1, k + 1)), assignment)


def _sub_ideals(inst: Instance, member: np.ndarray, pair_work_limit: float) -> list[np.ndarray] | None:
    """For each ideal j, the ideals i ⊆ j (bitset words compared 64 ops at a time); None once the pairs
    times the tensors exceed ``pair_work_limit``."""
    words = np.packbits(member, axis=1, bitorder="little")
    pad = (-words.shape[1]) % 8
    words = np.ascontiguousarray(np.pad(words, ((0, 0), (0, pad)))).view(np.uint64)
    sub_lists = []
    pairs = 0
    for j in range(len(member)):
        subs = np.flatnonzero(((words[:j + 1] & ~words[j]) == 0).all(axis=1))
        sub_lists.append(subs)
        pairs += len(subs)
        if pairs * max(inst.num_tensors, 1) > pair_work_limit:
            return None
    return sub_lists


def _pair_costs(inst: Instance, member: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray) -> np.ndarray:
    """Eq. (3) of the block ``j ∖ i`` for every pair of ideals ``i ⊆ j``: its work, overflow and the transfer
    of every tensor with some but not all of its points (producer and consumers) in the block."""
    work = member @ inst.work
    params = member @ inst.params
    cost = work[pair_j] - work[pair_i]
    if inst.stage_memory is not None:
        cost = cost + inst.overflow(params[pair_j] - params[pair_i])
    T = inst.num_tensors
    if T:
        counts = np.diff(inst.cons_ptr)
        owner = np.repeat(np.arange(T), counts)
        points = np.zeros((inst.n, T), dtype=np.int32)
        np.add.at(points, (inst.producer, np.arange(T)), 1)
        np.add.at(points, (inst.cons_idx, owner), 1)
        cnt = member.astype(np.int32) @ points  # (N, T): each ideal's points of each tensor
        size = counts + 1
        io = np.empty(len(pair_i))
        chunk = max(1, int(2e7 // T))
        for lo in range(0, len(pair_i), chunk):
            diff = cnt[pair_j[lo:lo + chunk]] - cnt[pair_i[lo:lo + chunk]]
            io[lo:lo + chunk] = ((diff > 0) & (diff < size)) @ inst.transfer
        cost = cost + io
    return np.maximum(cost, 0.0)
