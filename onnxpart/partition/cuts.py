"""Single-block min-cut lower bound: the cheapest block that can hold a given op, by s–t minimum cut.

In every partition the block B holding op v costs f(B) ≤ OPT, and B is some set containing v. Dropping
every other requirement on B (convexity, the other k − 1 blocks) only enlarges the feasible set, so

    OPT ≥ max_v  min_{S ∋ v} f(S)        (for every k ≥ 1).

Write Eq. (3) without the overflow (it is ≥ 0):

    f(S) ≥ Σ_{u∈S} work(u) + Σ_t c_t·[u(t) ∉ S ∧ ∃ consumer ∈ S] + Σ_t c_t·[u(t) ∈ S ∧ ∃ consumer ∉ S]

with graph inputs and outputs free, exactly as :mod:`~onnxpart.partition.model` (a tensor here is an op
output that another op reads; tensors with no consumer in V never cross). The right-hand side is the
capacity of an s–t cut whose source side is S ∪ {s} in this network:

* s → v with infinite capacity (v ∈ S),
* u → sink with capacity work(u) (paid when u ∈ S),
* per tensor t, an in-crossing node z_t: consumer → z_t infinite, z_t → u(t) with capacity c_t. If a
  consumer is in S, z_t must be on the source side, and the edge to u(t) is cut iff u(t) ∉ S; otherwise
  z_t can join the sink side for free. So the cheapest placement of z_t pays exactly the in-crossing term.
* per tensor t, an out-crossing node w_t: u(t) → w_t with capacity c_t, w_t → consumer infinite. If some
  consumer is outside S, w_t must be on the sink side, and u(t) → w_t is cut iff u(t) ∈ S; otherwise w_t
  joins the source side for free: the out-crossing term.

Every S ∋ v has a cut of capacity equal to the right-hand side (aux nodes placed as described), and every
finite cut's capacity is at least the right-hand side of its S, so the min cut equals min_{S∋v} of it.

With ``--stage-memory`` M the overflow (params(S) − M)⁺/B ≥ (params(S) − M)/B is linear, so a second
network with work(u) + params(u)/B on the sink edges gives min_{S∋v} f(S) ≥ mincut′(v) − M/B too.

Max flows run on OR-tools' push-relabel (``SimpleMaxFlow``, integer capacities): every finite capacity is
scaled by 2⁴⁰/Σcap and rounded **down**, so every cut's integer capacity is ≤ its real one and the
returned min cut / scale is still a lower bound (the rounding loses < (#edges)/2⁴⁰ relative). One max
flow per op costs O(N²√M) worst case on N = n + 2T nodes and M = n + 2T + 2·(#tensor–consumer) arcs (a few
ms for n ≈ 400); ops v with f({v}) ≤ the best bound so far, or ≤ a bound the caller already holds (Lemma
3.3's), are skipped, since min_{S∋v} f(S) ≤ f({v}). On a 20,000-op chain that is every op: without the
caller's bound, 19,998 max flows took 68 s. What the loop does try stops at its deadline.

:func:`convex_block_bound` puts convexity back: the block holding v is I_j ∖ I_{j−1} for two ideals, so
min over *those* blocks (a three-superblock MIP, :func:`~onnxpart.partition.exact.convex_block_mip`) is a
stronger bound. When the min cut's own S is convex it already is that minimum and no MIP is needed.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow

from onnxpart.partition.exact import convex_block_mip, scaled
from onnxpart.partition.model import Instance
from onnxpart.solvers import to_integers

log = logging.getLogger(__name__)

_SCALE_BITS = 40


@dataclass(frozen=True)
class SingleBlockBound:
    value: float
    op: int  # the op whose cheapest block attains the bound (-1 if none)
    block: tuple[int, ...]  # that cheapest block (the min cut's source side, ops only)
    flows: int  # ops whose max flows were solved (the others were pruned, or the time ran out)
    mips: int = 0  # convex-block MIPs solved
    proven: bool = True  # False when a MIP stopped at its time limit (its dual bound still counts)
    complete: bool = True  # False when the deadline stopped the loop before every op that could raise it


def singleton_costs(inst: Instance) -> np.ndarray:
    """f({v}) of Eq. (3) without overflow, for every op: work + tensors read from other ops + its own
    tensors read by other ops (each tensor once)."""
    cost = inst.work.astype(float).copy()
    counts = np.diff(inst.cons_ptr)
    np.add.at(cost, inst.producer, inst.transfer * (counts > 0))
    owner = np.repeat(np.arange(inst.num_tensors), counts)
    pairs = np.unique(np.stack([owner, inst.cons_idx], axis=1), axis=0) if len(owner) else np.zeros((0, 2), int)
    if len(pairs):
        np.add.at(cost, pairs[:, 1], inst.transfer[pairs[:, 0]])
    return cost


class _Network:
    """The cut network above with a super source s joined to every op by a switchable arc."""

    def __init__(self, inst: Instance, node_weight: np.ndarray):
        n, T = inst.n, inst.num_tensors
        counts = np.diff(inst.cons_ptr)
        owner = np.repeat(np.arange(T), counts)
        total = float(node_weight.sum() + 2 * inst.transfer.sum())
        cap_v, self.scale = to_integers(node_weight, 2 ** _SCALE_BITS, "down", total=total)  # module doc
        cap_t, _ = to_integers(inst.transfer, 2 ** _SCALE_BITS, "down", total=total)
        self.inf = int(2 ** (_SCALE_BITS + 2))
        self.source, self.sink = n + 2 * T, n + 2 * T + 1
        z = n + np.arange(T)  # in-crossing nodes
        w = n + T + np.arange(T)  # out-crossing nodes
        tails = [np.arange(n), inst.cons_idx, z, inst.producer, w[owner]]
        heads = [np.full(n, self.sink), z[owner], inst.producer, w, inst.cons_idx]
        caps = [cap_v, np.full(len(owner), self.inf), cap_t, cap_t, np.full(len(owner), self.inf)]
        self.flow = max_flow.SimpleMaxFlow()
        self.flow.add_arcs_with_capacity(np.concatenate(tails).astype(np.int32),
                                         np.concatenate(heads).astype(np.int32), np.concatenate(caps))
        self.switch = self.flow.add_arcs_with_capacity(np.full(n, self.source, dtype=np.int32),
                                                       np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int64))
        self.n = n

    def min_cut(self, v: int) -> tuple[float, list[int]]:
        """(min_{S∋v} cut capacity, rounded down, in real units; the ops of the source side)."""
        arc = int(self.switch[v])
        self.flow.set_arc_capacity(arc, self.inf)
        status = self.flow.solve(self.source, self.sink)
        self.flow.set_arc_capacity(arc, 0)
        if status != self.flow.OPTIMAL:
            raise RuntimeError(f"max flow failed with status {status}")
        side = [u for u in self.flow.get_source_side_min_cut() if u < self.n]
        return self.flow.optimal_flow() / self.scale, side


def single_block_bound(inst: Instance, skip_below: float = 0.0, deadline: float = math.inf,
                       max_ops: int | None = None) -> SingleBlockBound:
    """``max_v min_{S∋v} f(S)`` over the ops v whose f({v}) exceeds both ``skip_below`` (a proven bound the
    caller already holds: no such op can raise the best bound above it) and the best cut so far, tried by
    decreasing f({v}); 0 with op −1 when none is. The max over any subset of ops is still a lower bound,
    so the loop may stop early: at ``deadline`` (``time.monotonic()``; then ``complete`` is False) or after
    ``max_ops`` ops (a check re-deriving a bound that stopped there)."""
    single = singleton_costs(inst) + inst.overflow(inst.params)  # f({v}) with overflow: min_{S∋v} ≤ it
    best, best_op, best_block, tried = 0.0, -1, (), 0
    order = [v for v in np.argsort(-single, kind="stable").tolist() if single[v] > skip_below]
    if not order:
        return SingleBlockBound(best, best_op, best_block, 0)
    networks = [(_Network(inst, inst.work), 0.0)]
    if inst.stage_memory is not None and inst.bandwidth and inst.params.any():
        networks.append((_Network(inst, inst.work + inst.params / inst.bandwidth),
                         inst.stage_memory / inst.bandwidth))
    complete = True
    for v in order:
        if single[v] <= best:
            break  # sorted: no later op can beat the bound either
        if tried == max_ops or time.monotonic() >= deadline:
            complete = max_ops is not None and tried == max_ops
            break
        tried += 1
        for network, offset in networks:
            value, side = network.min_cut(v)
            if value - offset > best:
                best, best_op, best_block = value - offset, v, tuple(side)
    log.debug("single-block bound %.6g at op %d (%d ops' max flows)", best, best_op, tried)
    return SingleBlockBound(best, best_op, best_block, tried, complete=complete)


def is_convex(inst: Instance, block: set[int] | tuple[int, ...]) -> bool:
    """True iff no path leaves ``block`` and comes back (then the block fits in some partition)."""
    inside = set(block)
    succs = inst.dag.succ_lists
    stack = [w for u in inside for w in succs[u] if w not in inside]
    seen = set(stack)
    while stack:
        u = stack.pop()
        for w in succs[u]:
            if w in inside:
                return False
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return True


def convex_block_bound(inst: Instance, floor: float, deadline: float, seed: int = 0) -> SingleBlockBound:
    """``max(floor, max_v min{f(B) : B ∋ v a block of some partition})`` (module doc), ``floor`` being a
    proven bound. Ops are tried by decreasing f({v}) and skipped when f({v}) ≤ the bound so far; each op
    costs a max flow, plus a MIP (its proven dual bound, with the min cut as objective floor) when the
    min cut's set is not convex. Stops at ``deadline`` (``time.monotonic()``) with the bound proven so far."""
    single = singleton_costs(inst) + inst.overflow(inst.params)
    network = _Network(inst, inst.work)
    scale = float(single.max()) if inst.n and single.max() > 0 else 1.0
    small = scaled(inst, scale)
    best, best_op, best_block, flows, mips, proven = floor, -1, (), 0, 0, True
    for v in np.argsort(-single, kind="stable").tolist():
        if single[v] <= best:
            break
        left = deadline - time.monotonic()
        if left <= 0.05:
            proven = False
            break
        cut, side = network.min_cut(v)
        flows += 1
        value = cut
        if not is_convex(inst, side):
            result = convex_block_mip(small, v, left, floor=cut / scale, seed=seed)
            mips += 1
            proven &= result.status == "optimal"
            value = max(cut, result.value * scale) if result.value is not None else cut
            side = ()
        if value > best:
            best, best_op, best_block = value, v, tuple(side)
    log.debug("convex-block bound %.6g at op %d (%d max flows, %d MIPs)", best, best_op, flows, mips)
    return SingleBlockBound(best, best_op, best_block, flows, mips, proven)
