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
device tuples of ``Σ_k min_r LB(S_k, e_k, r, x_k[r])`` (:func:`onnxpart.schedule.split.join_dp`), with
``LB`` the sub-instance's device path and path LP (:mod:`.bounds`: with the pinned ends, their heads, tails and
binary Carlier rows count the round trip that moving work off the channels' devices costs). Memory
(3.7) is relaxed to each device's full capacity per segment (a relaxation: the bound stands).

Cost. Per segment, (the device tuples of ``R_k``) × (``Σ_{r ∈ R_{k+1}}`` devices of ``r``) floors, an
LP each (tens of milliseconds on 50 ops), receivers with the same in-edges and devices counted once
(their stand-ins give the same sub-instance): 27 a segment for two channels on three devices, 81 for
three; past :data:`MAX_FLOORS` the bound is not attempted and says so. Its values are a formula and LP
optima, so they do not depend on the machine's load — unless ``time_limit`` runs out first (then the
floors left count 0, and the status says so). Measured on the benchmark's ten-module sd stacks (CPU +
T4 + A100): 2 channels 2.814 ms against the whole-graph path LP's 2.462 (276 floors, 8 s), 3 channels
3.006 against 2.631 (816 floors, 21 s); best schedules known 3.681 and 4.287.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from onnxpart.schedule.model import Instance
from onnxpart.schedule.split import join_dp, segment_instance
from onnxpart.schedule.split_lane import floor_bound

#: Most ops in a barrier :func:`onnxpart.schedule.solve` looks for (the chain modules' most channels).
MAX_RECEIVERS = 4
#: Most sub-instance floors the bound computes (ten modules on three devices: 276 with two channels, 816
#: with three).
MAX_FLOORS = 1500

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


def _segment_costs(inst: Instance, ops: list[int], entry: tuple[int, ...] | None,
                   exit_: tuple[int, ...] | None, floor: Callable[[dict, tuple[int, int] | None], float]
                   ) -> dict[tuple, float]:
    """``(entry devices | None, exit devices | None) → min_r LB(S, e, r, x[r])`` for one segment, with
    ``floor(pins, stand-in)`` the sub-instance's LB."""
    entries = [None] if entry is None else list(itertools.product(*(inst.allowed(r) for r in entry)))
    if exit_ is None:
        return {(e, None): floor(dict(zip(entry or (), e or ())), None) for e in entries}
    exits = list(itertools.product(*(inst.allowed(r) for r in exit_)))
    kinds = {r: _stand_in_kind(inst, r) for r in exit_}
    stand_ins = {(kinds[r], x): (r, x) for r in reversed(exit_) for x in inst.allowed(r)}  # one per kind
    costs = {}
    for e in entries:
        pins = dict(zip(entry or (), e or ()))
        per = {key: floor(pins, stand_in) for key, stand_in in stand_ins.items()}
        for xs in exits:
            costs[(e, xs)] = min(per[(kinds[r], x)] for r, x in zip(exit_, xs))
    return costs


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


def barrier_bound(inst: Instance, cuts: list[Cut], time_limit: float) -> tuple[float | None, str, str]:
    """``(bound | None, status, note)``: the DP over the barriers' device tuples (module docstring);
    None, with the reason, when there is no cut with two or more ops or more than :data:`MAX_FLOORS`
    floors. Floors not computed within ``time_limit`` count 0 (status ``time_limit``: still a bound,
    but the clock decided how strong)."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    if not any(len(rs) > 1 for _, rs in cuts):
        return None, "none", "no barrier of two or more ops"
    needed = floors_needed(inst, cuts)
    if needed > MAX_FLOORS:
        return None, "none", f"{needed} segment floors needed, more than {MAX_FLOORS}: not attempted"
    bounds_at = [0] + [p for p, _ in cuts] + [inst.n]
    receivers: list[tuple[int, ...] | None] = [None] + [rs for _, rs in cuts] + [None]
    skipped = 0

    def floor(ops: list[int], pins: dict[int, int], stand_in: tuple[int, int] | None) -> float:
        """The segment's device path and path LP (``inf`` where the pins are infeasible); past the
        deadline 0, every segment cost's trivial bound."""
        nonlocal skipped
        if time.perf_counter() >= deadline:
            skipped += 1
            return 0.0
        built = segment_instance(inst, ops, pins, stand_in)
        return math.inf if built is None else floor_bound(built[0], max(0.01, deadline - time.perf_counter()))[0]

    tables = []
    for k in range(len(cuts) + 1):
        ops = list(inst.topo[bounds_at[k]:bounds_at[k + 1]])
        tables.append(_segment_costs(inst, ops, receivers[k], receivers[k + 1], functools.partial(floor, ops)))
    value, _ = join_dp(tables)
    late = skipped > 0
    widest = max(len(rs) for _, rs in cuts)
    return value, "time_limit" if late else "bound", (
        f"{len(cuts)} barriers of up to {widest} ops, {needed} segment floors"
        f"{f' ({skipped} cut by the time limit: they count 0)' if late else ''}, {time.perf_counter() - t0:.2f} s")
