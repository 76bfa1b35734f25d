"""Barrier cuts: SPLIT's one-op cut (Section 3.3.1) widened to a set of ops that every later op waits
for, and the lower bound of the DP over them — the multi-channel modules of Section 3.3.2 with the
channels' devices as the DP's state, so that the transfers at the cuts count.

Cuts. A *barrier* at position ``p`` of a topological order is the set ``R`` of the ops at or after
``p`` that read from an op before ``p`` (the channels' receivers), when

* every op before ``p`` is an ancestor of **every** op of ``R``, and
* every op at or after ``p`` is in ``R`` or a descendant of some op of ``R``.

A single articulation op is the one-op case. In the benchmark's "sd" RWNN stacks (every source of a
module reads every channel, every channel sums every sink) the per-channel Sums form one of size ``c``
at each module boundary; in "wd" stacks (each channel a chain of its own) none exists.

Windows. With barriers ``R_1, …, R_m`` at positions ``p_1 < … < p_m`` (each ``R_k`` before ``p_{k+1}``),
segment ``S_k`` is the ops at positions ``[p_k, p_{k+1})`` (``S_0`` those before ``p_1``, ``S_m`` those
from ``p_m``) and ``σ_k = min_{r ∈ R_k} start(r)`` in a schedule of makespan ``C`` (``σ_0 = 0``,
``σ_{m+1} = C``). Every op of ``S_k`` starts at or after ``σ_k`` (it is in ``R_k`` or after one of its
ops) and ends, its data sent, before every op of ``R_{k+1}`` starts (it is an ancestor of each), so by
``σ_{k+1}``: the windows ``[σ_k, σ_{k+1}]`` partition ``[0, C]``. Data enters ``S_k`` from earlier
segments only through ``R_k`` (an edge across ``p_k`` lands in ``R_k`` by definition).

Segment costs. For ``R_k`` on devices ``e`` (a tuple) and one op ``r`` of ``R_{k+1}`` on device ``x``,
``OPT(S_k, e, r, x)`` is the optimum of the sub-instance of ``S_k`` with ``R_k`` pinned to ``e`` (released
at 0) and a zero-time, zero-memory stand-in of ``r`` pinned to ``x`` as its exit. *Proof that*
``σ_{k+1} − σ_k ≥ min_{r ∈ R_{k+1}} OPT(S_k, e_k, r, x_k[r])``: take ``r*`` the op of ``R_{k+1}`` that
starts first; the schedule's ops of ``S_k`` shifted by ``σ_k``, with the stand-in at ``start(r*) − σ_k
= σ_{k+1} − σ_k``, schedule that sub-instance (each op of ``S_k`` ends, data sent, before ``r*`` starts)
within that length. Summing over the windows, ``C`` is at least the DP's minimum over the barriers'
device tuples of ``Σ_k min_r LB(S_k, e_k, r, x_k[r])`` (:func:`onnxpart.schedule.latency.split.join_dp`), with
``LB`` the sub-instance's device path and path LP (:mod:`.bounds`: with the pinned ends, their heads, tails and
binary Carlier rows count the round trip that moving work off the channels' devices costs). Memory
(3.7) is relaxed to each device's full capacity per segment (a relaxation: the bound stands).

Cost. Per segment, (the device tuples of ``R_k``) × (``Σ_{r ∈ R_{k+1}}`` devices of ``r``) floors,
receivers with the same in-edges and devices counted once (their stand-ins give the same sub-instance):
27 a segment for two channels on three devices, 81 for three; past :data:`MAX_FLOORS` the bound is not
attempted and says so. Lazily (:class:`_SegmentFloors`): every floor's device path (a closed form), then
only the floors the DP's best chain rests on are raised, each first to the path LP with fractional
device-used columns, then to the full floor, until that chain is all full floors — the same value as
the DP over every full floor. Its values are formulas and LP optima, so they do not depend on the
machine's load — unless ``time_limit`` runs out first (then the DP stops where it is, or the device
paths left count 0, and the status says so). Measured on the benchmark's ten-module sd stacks (CPU + T4
+ A100; with :func:`.bounds.carlier_sets`' rows; the floors' table as arrays and the path LP built by
rows of arrays, about a quarter faster than row by row): 2 channels 3.032 ms against the whole-graph
path LP's 2.462 (276 device paths, 220 LPs, 8–9 s), 3 channels 3.118 (816, 434, 18 s), 4 channels 3.413
(2,436, 1,937, 98 s).
"""

from __future__ import annotations

import itertools
import math
from time import monotonic as now
from typing import NamedTuple

import numpy as np

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency.bounds import device_path_bound, path_lp_bound
from onnxpart.schedule.latency.split import join_dp, segment_instance
from onnxpart.schedule.latency.split_lane import floor_bound

#: Most ops in a barrier :func:`.chain_split.split_on_channels` looks for (the chain modules' most channels).
MAX_RECEIVERS = 4
#: Most sub-instance floors the bound sets up (their device paths; ten modules on three devices: 276 with
#: two channels, 816 with three, 2,436 with four).
MAX_FLOORS = 5000

Cut = tuple[int, tuple[int, ...]]  # (position in inst.topo, receivers R)


def barrier_cuts(inst: Instance, max_size: int) -> list[Cut]:
    """The barriers of at most ``max_size`` ops (module docstring), in order, each wholly before the next
    one's position."""
    reach = inst.ancestors_closure()  # reach[a, b]: a path a → b
    pos = np.empty(inst.n, dtype=np.int64)
    pos[inst.topo] = np.arange(inst.n)
    topo = np.asarray(inst.topo, dtype=np.int64)
    cuts: list[Cut] = []
    for p in range(1, inst.n):
        receivers = sorted({j for i in topo[:p] for j in inst.succs[i] if pos[j] >= p})
        if not receivers or len(receivers) > max_size:
            continue
        if not reach[np.ix_(topo[:p], receivers)].all():
            continue
        after = topo[p:]
        if not (reach[receivers][:, after].any(axis=0) | np.isin(after, receivers)).all():
            continue
        if cuts and max(pos[r] for r in cuts[-1][1]) >= p:
            continue  # the previous barrier's receivers must lie in its own segment
        cuts.append((p, tuple(receivers)))
    return cuts


def segments(inst: Instance, cuts: list[Cut]) -> list[list[int]]:
    """The segments ``S_0, …, S_m`` of the barriers ``cuts`` (module docstring, "Windows"): their ops in
    topological order."""
    at = [0] + [p for p, _ in cuts] + [inst.n]
    return [list(inst.topo[at[k]:at[k + 1]]) for k in range(len(cuts) + 1)]


class _SegmentFloors:
    """One segment's floors ``LB(S, e, r, x)`` by (entry devices ``e``, exit stand-in kind and device), in
    three levels, each a proven bound on the sub-instance's optimum: the device path for every pair up
    front (:meth:`fill`), then, for the pairs the DP asks for (:meth:`refine`), the path LP with its
    device-used columns fractional, and last the full floor (device path and path LP with them 0/1)."""

    FULL = 2

    def __init__(self, inst: Instance, ops: list[int], entry: tuple[int, ...] | None,
                 exit_: tuple[int, ...] | None):
        self.inst, self.ops, self.entry, self.exit = inst, ops, entry, exit_
        self.entries = [None] if entry is None else list(itertools.product(*(inst.allowed(r) for r in entry)))
        self.exits = [None] if exit_ is None else list(itertools.product(*(inst.allowed(r) for r in exit_)))
        self.kinds = {r: _stand_in_kind(inst, r) for r in exit_ or ()}
        self.stand_ins = ({(self.kinds[r], x): (r, x) for r in reversed(exit_) for x in inst.allowed(r)}
                          if exit_ is not None else {None: None})  # one per kind
        self.row = {e: n for n, e in enumerate(self.entries)}
        self.keys = list(self.stand_ins)
        self.col = {key: n for n, key in enumerate(self.keys)}
        self.exit_at = {xs: n for n, xs in enumerate(self.exits)}
        # parts[xs]: the stand-in columns of an exit tuple's receivers (the pair's cost is their least)
        self.parts = np.array([[0] if xs is None else [self.col[(self.kinds[r], x)] for r, x in zip(exit_, xs)]
                               for xs in self.exits], dtype=np.int64)
        self.value = np.zeros((len(self.entries), len(self.col)))  # floor by (e, stand-in)
        self.level = np.zeros(self.value.shape, dtype=np.int64)  # 0: device path, 1: fractional path LP, 2: full
        self.lps = 0

    def _sub(self, e: tuple | None, stand_in: tuple | None) -> Instance | None:
        built = segment_instance(self.inst, self.ops, dict(zip(self.entry or (), e or ())), self.stand_ins[stand_in])
        return None if built is None else built[0]

    def fill(self, deadline: float) -> int:
        """Every pair's device path (``inf``, final, where the pins are infeasible); past the deadline 0,
        the trivial bound. Returns how many the deadline skipped."""
        skipped = 0
        for e, stand_in in itertools.product(self.entries, self.stand_ins):
            if now() >= deadline:
                skipped += 1
                continue
            sub = self._sub(e, stand_in)
            at = self.row[e], self.col[stand_in]
            self.value[at] = math.inf if sub is None else device_path_bound(sub).value
            self.level[at] = self.FULL if sub is None else 0
        return skipped

    def _least(self, e: tuple | None, xs: tuple | None) -> tuple[int, int]:
        """``(row, column)`` of the pair's least part (the highest level among equal values)."""
        row, cols = self.row[e], self.parts[self.exit_at[xs]]
        return row, int(min(cols, key=lambda c: (self.value[row, c], -self.level[row, c])))

    def costs(self) -> dict[tuple, float]:
        """``(e, exit devices) → min_r`` floor (module docstring), from what is known so far."""
        least = self.value[:, self.parts].min(axis=2)  # (entries, exits)
        return {(e, xs): v for e, values in zip(self.entries, least.tolist()) for xs, v in zip(self.exits, values)}

    def refine(self, e: tuple | None, xs: tuple | None, deadline: float) -> None:
        """Raise the least part of the pair's cost one level (the DP then looks again: a fractional LP
        often already lifts it above another chain)."""
        at = self._least(e, xs)
        sub = self._sub(self.entries[at[0]], self.keys[at[1]])
        left = max(0.01, deadline - now())
        if self.level[at] == 0:
            lp = path_lp_bound(sub, left, relaxed=True).value or 0.0
        else:
            lp = floor_bound(sub, left)[0]
        self.value[at], self.level[at] = max(self.value[at], lp), self.level[at] + 1
        self.lps += 1

    def exact(self, e: tuple | None, xs: tuple | None) -> bool:
        return self.level[self._least(e, xs)] == self.FULL


def _stand_in_kind(inst: Instance, r: int) -> tuple:
    """What an exit stand-in's sub-instance depends on: its devices and its in-edges (source, delays).
    Receivers alike (the sd stacks' per-channel Sums of the same sinks) give the same floors."""
    return (tuple(inst.allowed(r)),
            tuple(sorted((inst.edges[e][0], inst.delays[e].tobytes()) for e in inst.in_edges[r])))


def floors_needed(inst: Instance, cuts: list[Cut]) -> int:
    """How many sub-instance floors :func:`barrier_bound` would compute (module docstring, "Cost")."""
    states = [1] + [math.prod(len(inst.allowed(r)) for r in rs) for _, rs in cuts]
    exits = [sum(len(kind[0]) for kind in {_stand_in_kind(inst, r) for r in rs}) for _, rs in cuts] + [1]
    return sum(s * x for s, x in zip(states, exits))


class BarrierBound(NamedTuple):
    value: float | None  # None: not attempted (``note`` says why)
    status: str  # "bound", "time_limit" or "none"
    note: str
    pins: dict[int, int]  # receiver → device on the DP's best chain (a guide for a schedule, not a proof)


def barrier_bound(inst: Instance, cuts: list[Cut], time_limit: float) -> BarrierBound:
    """The DP over the barriers' device tuples (module docstring); no value, with the reason, when there
    is no cut with two or more ops or more than :data:`MAX_FLOORS` floors. Lazy: the DP runs on every
    pair's device path, then, round by round, raises the floors its best chain rests on one level, until
    that chain is all full floors — the DP's value over the full floors, with a fraction of their LPs.
    Past ``time_limit`` the DP stops where it is (its value a bound still; status ``time_limit``: the
    clock decided how strong)."""
    t0 = now()
    deadline = t0 + time_limit
    if not any(len(rs) > 1 for _, rs in cuts):
        return BarrierBound(None, "none", "no barrier of two or more ops", {})
    needed = floors_needed(inst, cuts)
    if needed > MAX_FLOORS:
        return BarrierBound(None, "none", f"{needed} segment floors needed, more than {MAX_FLOORS}: not attempted",
                            {})
    receivers: list[tuple[int, ...] | None] = [None] + [rs for _, rs in cuts] + [None]
    floors = [_SegmentFloors(inst, ops, receivers[k], receivers[k + 1]) for k, ops in enumerate(segments(inst, cuts))]
    skipped = sum(seg.fill(deadline) for seg in floors)
    rounds = 0
    while True:
        value, chain = join_dp([seg.costs() for seg in floors])
        open_ = [(seg, e, xs) for seg, (e, xs) in zip(floors, chain) if not seg.exact(e, xs)]
        if not open_ or now() >= deadline:
            break
        rounds += 1
        for seg, e, xs in open_:
            if now() < deadline:
                seg.refine(e, xs, deadline)
    late = skipped > 0 or bool(open_)
    widest = max(len(rs) for _, rs in cuts)
    pins = {r: d for rs, (e, _) in zip(receivers, chain) if rs for r, d in zip(rs, e)}
    lps = sum(seg.lps for seg in floors)
    return BarrierBound(value, "time_limit" if late else "bound", (
        f"{len(cuts)} barriers of up to {widest} ops, {needed} segment device paths"
        f"{f' ({skipped} cut by the time limit: they count 0)' if skipped else ''}, {lps} path LPs in {rounds} "
        f"rounds{' (stopped by the time limit)' if open_ else ''}, {now() - t0:.2f} s"), pins)
