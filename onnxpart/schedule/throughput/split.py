"""MILP-SPLIT for the throughput objective (Sections 3.3.1 and 4.4): the modules between cut ops
(:mod:`onnxpart.schedule.common.modules`) solved one after the other on the whole batch by the CP-SAT
batch model (:func:`.exact.cpsat`), each seeing the
split its entry cut op was given by the module before, then joined and re-simulated.

Why in sequence, with the entry pinned. Solved alone, module ``k`` chooses the split of its entry cut
``c_k`` blind to where module ``k−1`` left the batch, and the join then pays a whole-batch transfer at
every cut where the two solves disagree — enough to make SPLIT worse than bMET on RWNN stacks. Here
module ``k−1`` is solved together with ``c_k`` (the real op: the data feeding ``c_k`` and its transfers
are in that model) and module ``k`` with ``c_k`` pinned to the split module ``k−1`` chose, so every edge
of the joined schedule was costed by one of the module solves. Memory (3.7) sums over the whole
graph, so each module gets what the modules before it left free on every device.

No SPLIT bound. Under data parallelism the modules overlap in time — slices of inputs already through
``c_k`` run in module ``k`` while module ``k−1`` still processes other inputs — so ``Σ_k OPT_batch(S_k)``
is not a lower bound on the batch makespan ``C`` (two modules of equal work on two devices can overlap
almost entirely). What does hold is ``C ≥ LB_lat(before c_k) + LB_batch(S_k) + LB_lat(after S_k)``: the
first slice of ``c_k`` starts only after one input crossed everything before it, and the inputs of
the last slice of ``S_k`` to end still cross everything after. With one module's batch work against
single-input latencies it is dominated by the whole-graph load LP (:func:`.bounds.load_lp`) on the
batched stacks, so it is not computed; the throughput certificate uses the whole-graph bounds.

No symmetry reduction. Latency SPLIT solves one (entry, exit) pair per orbit of the device
automorphisms (:mod:`onnxpart.schedule.latency.symmetry`); here there are no pairs — each module is
solved once, with its entry pinned to the split the module before chose and the memory those modules
left — so it does not apply.

Warm start. :func:`onnxpart.schedule.throughput.solve` passes its best baseline's schedule: a graph without cut ops
is solved whole from the better of it and :func:`_warm`'s (bHEFT re-simulated from its splits alone
loses its order: on the wd stacks that start left CP-SAT at 1179 inputs/s against bHEFT's 1998), and the
join is replaced by it where it is shorter.

Determinism. Each module solve is one-worker CP-SAT stopped by a *deterministic* budget,
``DET_PER_SECOND·T·n_s/Σn`` for a module of ``n_s`` ops (:mod:`onnxpart.schedule.common.ticks`, latency
SPLIT's rule), with the wall clock (an equal share of the time left) only as a safety net counted in the
note. So ``--workers`` changes
neither the answer nor, the modules depending on one another, the time: it is used by the whole-graph
solve of a graph without modules.
"""

from __future__ import annotations

import math
from time import monotonic as now

import numpy as np

from onnxpart.errors import UserError
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, has_modules, segments
from onnxpart.schedule.common.ticks import deterministic_seconds
from onnxpart.schedule.throughput import exact, heuristics
from onnxpart.schedule.throughput.model import Split, memory_violations
from onnxpart.schedule.throughput.simulator import BatchSchedule, order_by_start, simulate
from onnxpart.strategy import Budget


def _warm(inst: Instance, batch: int, pinned: dict[int, Split],
          time_limit: float = math.inf) -> BatchSchedule | None:
    """The best of bMET (the first answer: no limit), bHEFT (within half of ``time_limit``: on 24 devices it
    took 1.2 s a module) and plain data parallelism, with the pinned splits put in."""
    out = []
    for res in (heuristics.met(inst, batch), heuristics.heft(inst, batch, time_limit / 2),
                heuristics.uniform(inst, batch)):
        if res.schedule is None:
            continue
        splits = [pinned.get(i, s) for i, s in enumerate(res.schedule.splits)]
        if not memory_violations(inst, splits):
            out.append(simulate(inst, splits))
    out = [s for s in out if math.isfinite(s.makespan)]
    return min(out, key=lambda s: s.makespan) if out else None


def _used(inst: Instance, splits: list, entry: int | None) -> np.ndarray:
    """Memory (3.7) per device taken by the ops whose splits are chosen so far, but ``entry`` (the
    module's own entry cut, counted in its sub-instance)."""
    used = np.zeros(inst.k)
    for i, sp in enumerate(splits):
        for u, x in enumerate(sp if i != entry and sp else ()):
            if x > 0:
                used[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
    return used


def split_throughput(inst: Instance, batch: int, time_limit: float, seed: int = 0, workers: int = 1,
                     warm: BatchSchedule | None = None):
    """``(schedule | None, status, seconds, note)`` of throughput MILP-SPLIT (module docstring); a
    graph without cut ops is solved whole with ``workers`` CP-SAT threads. ``warm``, a schedule of the
    whole graph (:func:`onnxpart.schedule.throughput.solve` passes its best baseline's), warm-starts that solve and is
    returned where it beats the modules' join: a warm-started method never answers worse than its start."""
    clock = Budget(time_limit)
    t0 = clock.start
    cuts = cut_ops(inst)
    if not has_modules(inst, cuts):
        starts = [s for s in (_warm(inst, batch, {}, time_limit / 2), warm) if s is not None]
        hint = min(starts, key=lambda s: s.makespan) if starts else None
        res = exact.cpsat(inst, batch, clock.left(), hint, seed=seed, workers=workers)
        return res.schedule, res.status, now() - t0, "no modules: solved whole"
    segs = segments(inst, cuts)
    per = deterministic_seconds(time_limit) / max(1, sum(len(ops) + (exit_ is not None) for ops, _, exit_ in segs))
    splits: list = [None] * inst.n
    order: list[tuple[int, int]] = []
    statuses: set[str] = set()
    walls = 0
    for s, (ops, entry, exit_) in enumerate(segs):
        sub, index = inst.subinstance(ops + ([exit_] if exit_ is not None else []))
        sub.capacity = inst.capacity - _used(inst, splits, entry)  # what the modules before left free
        pinned = {0: splits[entry]} if entry is not None and splits[entry] else {}  # ops[0]: the entry cut
        limit = clock.share(1, len(segs) - s - 1)
        started = now()
        try:
            hint = _warm(sub, batch, pinned, limit / 2)
            limit = max(0.01, limit - (now() - started))  # what the warm start left
            res = exact.cpsat(sub, batch, limit, hint, seed=seed, pinned=pinned, deterministic_time=per * sub.n)
        except UserError:  # an op of the module fits on no device with what is left
            return None, "memory", now() - t0, f"module {s} does not fit in the memory left (3.7)"
        statuses.add(res.status)
        walls += res.status == "time_limit" and res.seconds >= 0.95 * limit
        if res.schedule is None:
            return None, "failed", now() - t0, f"module {s} got no batched schedule"
        for local, sp in enumerate(res.schedule.splits):
            splits[index[local]] = tuple(sp)
        mine = sorted(res.schedule.start, key=lambda key: (res.schedule.start[key], key))
        order += [(index[i], u) for i, u in mine if index[i] != exit_]  # the next module places its entry
    if memory_violations(inst, splits):
        return None, "memory", now() - t0, "the joined modules overflow a device's memory"
    sched = simulate(inst, splits, order_by_start(inst, splits, {k: p for p, k in enumerate(order)}))
    status = "optimal-modules" if statuses == {"optimal"} else "time_limit"
    note = f"{len(segs)} modules solved in sequence" + (
        f"; {walls} stopped by the wall clock, not their deterministic budget: another run may differ" if walls else "")
    if warm is not None and warm.makespan < sched.makespan:
        note += f" (joined: {sched.makespan:.6g} s; the warm start is shorter: returned it)"
        sched = warm
    return sched, status, now() - t0, note
