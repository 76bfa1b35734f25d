"""MILP-SPLIT over multi-channel modules (Section 3.3.2): when no single op separates the graph, the
modules of :func:`.multichannel.chain_modules` (topological intervals joined by at most ``c`` tensors)
are solved one after the other by CP-SAT and joined — the thesis's "solve for each subgraph
independently", a heuristic (it "may result in a loss of optimality"); the proven bound beside it is
:func:`.multichannel.multichannel_bound`.

Module ``s`` is solved with the ops of earlier modules that feed it as zero-time stand-ins pinned to
the devices already chosen for them, so the transfers into the module are in its model (where its
inputs live), though not when they arrive. The join re-simulates the whole mapping with the modules'
start orders in sequence (:func:`.simulator.simulate`), so the returned schedule is exact for the cost
model whatever the module solves assumed.

With a :class:`Guide` (:func:`split_on_channels` passes the barrier DP's segments and its best
chain's devices for their receivers: a guide from lower bounds, not a proof) the guide's segments are
solved as the modules, with the receivers pinned. Each module's exit then holds zero-time stand-ins of
the pinned ops it feeds (so its makespan includes delivering its data to their devices), and a pinned op
gets no feeder stand-ins: its data is there when the module that fed it ended (counting that transfer
again made every segment wait twice). Such segments are independent where their only way in is their
pinned receivers (:func:`_independent`): with ``workers`` > 1 they are solved at once on the shared
runner. The modules are also joined free, and the shorter join is kept.
On the benchmark's sd 2-channel stack the chain is every receiver on the A100; ten 41–51-op segments
at about 3 s each joined to 3.29–3.30 ms against the barrier DP's 3.03 (LB/UB 0.92), where the chain
modules with the same pins and their feeders kept joined to 3.37.

Modules run one after the other in the join, so a graph whose channels are nearly independent (the
benchmark's wd stacks: each channel a chain of its own) loses the overlap across modules that a
whole-graph list schedule keeps: there HEFT beat the join by 5–15% at 60 s. With a ``warm`` schedule of
the whole graph (:func:`onnxpart.schedule.latency.solve` passes its best heuristic's, as it warm-starts exact)
the better of the two is returned and the note says which — a warm-started method never answers worse
than its start.
"""

from __future__ import annotations

from time import monotonic as now
from typing import NamedTuple

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.parallel import Runner
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, has_modules
from onnxpart.schedule.common.solution import ExactResult
from onnxpart.schedule.latency import barrier, exact, heuristics, multichannel
from onnxpart.schedule.latency import split_lane as lane
from onnxpart.schedule.latency.simulator import Schedule, order_by_start, simulate
from onnxpart.strategy import FLOOR, Budget


class Guide(NamedTuple):
    """Modules and op → device pins to try first (the barrier DP's segments and best chain), and the
    fraction of the time that try gets."""
    modules: list[list[int]]
    pins: dict[int, int]
    share: float = 0.5


def _module_instance(inst: Instance, ops: list[int], mapping: np.ndarray,
                     pins: dict[int, int]) -> tuple[Instance, list[int], int, int]:
    """The sub-instance of ``ops`` (those in ``pins`` pinned) with the already-mapped feeders of its
    unpinned ops first and the pinned ops they feed last, both as zero-time, zero-memory ops pinned to
    their devices (so the module's makespan includes delivering its data there; a pinned op's data was
    delivered by the module that fed it); returns it, the local → global map and the local range
    ``[first, last)`` of ``ops``."""
    inside = set(ops)
    feeders = sorted({p for j in ops if j not in pins for p in inst.preds[j] if mapping[p] >= 0})
    exits = sorted({j for i in ops for j in inst.succs[i] if j not in inside and j in pins})
    fixed = {f: int(mapping[f]) for f in feeders} | {j: pins[j] for j in ops + exits if j in pins}
    sub, index = inst.subinstance(feeders + list(ops) + exits, fixed)
    sub.mem = sub.mem.copy()
    stand_ins = list(range(len(feeders))) + list(range(len(feeders) + len(ops), sub.n))
    for local in stand_ins:
        sub.time[local, fixed[index[local]]] = 0.0
        sub.mem[local] = 0.0
    return sub, index, len(feeders), len(feeders) + len(ops)


def _solve_module(sub: Instance, until: float, seed: int) -> ExactResult:
    """One module's CP-SAT solve from its best constructive schedule, until ``until`` (:func:`now`)."""
    return exact.cpsat(sub, max(FLOOR, until - now()), heuristics.best_constructive(sub), seed=seed,
                       interleave=True, probing=False)


def _independent(inst: Instance, modules: list[list[int]], pins: dict[int, int]) -> bool:
    """Whether every module's unpinned ops are fed from inside it only: then no module's instance
    depends on the devices chosen for another (it has no feeder stand-ins), and they can be solved at
    once (the barrier DP's segments, whose edges in enter at the pinned receivers)."""
    home = {i: s for s, ops in enumerate(modules) for i in ops}
    return all(home.get(p) == s for s, ops in enumerate(modules) for j in ops if j not in pins
               for p in inst.preds[j])


def _solved_apart(subs: list[Instance], budget: Budget, seed: int, workers: int) -> list:
    """Independent modules' solves as jobs on ``workers`` processes (:class:`onnxpart.parallel.Runner`),
    a round of ``workers`` jobs lasting in proportion to its largest module (:func:`.split_lane.deadlines`);
    a module the clock stops before it reports gets its best constructive schedule."""
    ends = lane.deadlines([float(sub.n) for sub in subs], workers, now(), budget.share())
    out: list = [None] * len(subs)
    with Runner(workers) as runner:
        jobs = {runner.submit(_solve_module, sub, end, seed): s for s, (sub, end) in enumerate(zip(subs, ends))}

        def take(events) -> bool:
            for event in events:
                if event.kind == "done":
                    out[jobs[event.job]] = event.value
            return now() > ends[-1] + lane.GRACE

        runner.wait(take)
    return [res if res is not None else
            ExactResult("cpsat", "time_limit", heuristics.best_constructive(sub), None, 0.0, "cp-sat")
            for res, sub in zip(out, subs)]


def _in_sequence(inst: Instance, modules: list[list[int]], budget: Budget, seed: int,
                 pins: dict[int, int], workers: int = 1) -> tuple[Schedule | None, str, str]:
    """``(schedule | None, status, reason)``: the modules solved one after the other (module docstring),
    each with an equal share of ``budget``'s time left, the ops in ``pins`` on their devices —
    at once on ``workers`` processes where they are independent (:func:`_independent`)."""
    mapping = np.full(inst.n, -1, dtype=np.int64)
    start = np.zeros(inst.n)
    offset, statuses = 0.0, set()
    built = apart = None
    if workers > 1 and _independent(inst, modules, pins):  # no feeders: built before any is mapped
        built = [_module_instance(inst, ops, mapping, pins) for ops in modules]
        apart = _solved_apart([sub for sub, *_ in built], budget, seed, workers)
    for s, ops in enumerate(modules):
        sub, index, first, last = built[s] if built else _module_instance(inst, ops, mapping, pins)
        res = apart[s] if apart else _solve_module(sub, now() + budget.share(1, len(modules) - s - 1), seed)
        if res.schedule is None:
            return None, "failed", f"module {s} got no schedule"
        statuses.add(res.status)
        for local in range(first, last):
            mapping[index[local]] = res.schedule.mapping[local]
            start[index[local]] = offset + res.schedule.start[local]
        offset += res.schedule.makespan
    if inst.mapping_violations(mapping):
        return None, "memory", "the joined modules overflow a device's memory (3.7)"
    status = "optimal-modules" if statuses == {"optimal"} else "time_limit"
    return simulate(inst, mapping, order_by_start(inst, start)), status, ""


def chain_split(inst: Instance, modules: list[list[int]], time_limit: float, seed: int = 0,
                warm: Schedule | None = None, guide: Guide | None = None, workers: int = 1
                ) -> tuple[Schedule | None, str, float, str]:
    """``(schedule | None, status, seconds, note)``: the modules solved in sequence (module docstring)
    with an equal share each of the time left; with a ``guide`` (the barrier DP's segments and chain,
    which may mislead), its modules with its pins first (``guide.share`` of the time; on ``workers``
    processes at once where they are independent) and then ``modules`` free, the shorter join returned;
    ``warm`` instead where it is shorter than the join."""
    clock = Budget(time_limit)
    t0 = clock.start
    tries = [guide, Guide(modules, {})] if guide else [Guide(modules, {})]
    joins = []
    for parts, fixed, share in tries:
        budget = Budget(max(0.0, t0 + time_limit * share - now())) if len(joins) + 1 < len(tries) else clock
        joins.append(_in_sequence(inst, parts, budget, seed, fixed, workers))
    done = [(sched.makespan, n) for n, (sched, _, _) in enumerate(joins) if sched is not None]
    if not done:
        return None, joins[0][1], now() - t0, joins[0][2]
    best = min(done)[1]
    sched, status, _ = joins[best]
    note = f"{len(tries[best].modules)} multi-channel modules solved in sequence"
    if guide:
        note += (f" (the barrier DP's segments with its devices for {len(guide.pins)} receivers)" if best == 0 else
                 f" (shorter than the {len(guide.modules)} barrier DP segments with its devices)")
    if warm is not None and warm.makespan < sched.makespan:
        note += f" (joined: {sched.makespan:.6g} s; the warm start is shorter: returned it)"
        sched = warm
    return sched, status, now() - t0, note


def chain_of_modules(inst: Instance) -> tuple[int, list[list[int]]] | None:
    """``(channels, modules)``: when no single op cuts the graph into modules
    (:func:`onnxpart.schedule.common.modules.cut_ops`), the first chain of 2-, 3- or 4-channel modules
    (:func:`.multichannel.chain_modules`), if any."""
    cuts = cut_ops(inst)
    if has_modules(inst, cuts):
        return None
    for channels in (2, 3, 4):
        modules = multichannel.chain_modules(inst, channels)
        if modules is not None:
            return channels, modules
    return None


def split_on_channels(inst: Instance, chain: tuple[int, list[list[int]]], time_limit: float, seed: int,
                      workers: int, hint: Schedule | None) -> tuple[tuple, list[LowerBound]]:
    """SPLIT where no single op cuts the graph: ``((schedule | None, status, seconds, note), bounds)`` —
    the barrier DP bound (:mod:`.barrier`, where barriers of several ops exist; up to a third of the
    time), the join (:func:`chain_split`: the DP's segments with its chain's devices, then the chain
    modules free) and the modules' recursive bound (:mod:`.multichannel`). The join gets half of what is
    left, three quarters with a chain from the DP and nine tenths where the DP completed (its chain then
    rests on full floors, and its bound is the one that counts: on the benchmark's sd stacks the
    recursion proved 2.47 against 3.03 ms, 2.35 against 3.12); the recursion gets the rest."""
    channels, modules = chain
    clock = Budget(time_limit)
    out = []
    cuts = barrier.barrier_cuts(inst, barrier.MAX_RECEIVERS)
    found = barrier.barrier_bound(inst, cuts, time_limit / 3)
    if found.value is not None:
        out.append(LowerBound("barrier-dp", found.value, found.status, "highs", now() - clock.start, found.note))
    left, completed = clock.left(), found.status == "bound"
    # a chain resting on full floors is the better guide: it gets most of the join's time
    guide = (Guide(barrier.segments(inst, cuts), found.pins, 0.75 if completed else 0.25) if found.pins else None)
    join_share = 0.9 if guide and completed else 0.75 if guide else 0.5
    joined = chain_split(inst, modules, left * join_share, seed, hint, guide, workers)
    t0 = now()
    value, status, note = multichannel.multichannel_bound(inst, modules, clock.share(), seed)
    out.append(LowerBound(f"multichannel-{channels}", value, status, "cp-sat", now() - t0, note))
    return joined, out
