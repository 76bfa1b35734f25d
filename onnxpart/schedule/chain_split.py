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

Modules run one after the other in the join, so a graph whose channels are nearly independent (the
benchmark's wd stacks: each channel a chain of its own) loses the overlap across modules that a
whole-graph list schedule keeps: there HEFT beat the join by 5–15% at 60 s. With a ``warm`` schedule of
the whole graph (:func:`onnxpart.schedule.solve` passes its best heuristic's, as it warm-starts exact)
the better of the two is returned and the note says which — a warm-started method never answers worse
than its start.
"""

from __future__ import annotations

import time

import numpy as np

from onnxpart.schedule import exact, heuristics
from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import Schedule, order_by_start, simulate


def _module_instance(inst: Instance, ops: list[int], mapping: np.ndarray) -> tuple[Instance, list[int], int]:
    """The sub-instance of ``ops`` with their already-mapped feeders first, as zero-time, zero-memory
    ops pinned to their devices; returns it, the local → global map and the number of feeders."""
    feeders = sorted({p for j in ops for p in inst.preds[j] if mapping[p] >= 0})
    sub, index = inst.subinstance(feeders + list(ops), {f: int(mapping[f]) for f in feeders})
    sub.mem = sub.mem.copy()
    for local, f in enumerate(feeders):
        sub.time[local, mapping[f]] = 0.0
        sub.mem[local] = 0.0
    return sub, index, len(feeders)


def chain_split(inst: Instance, modules: list[list[int]], time_limit: float, seed: int = 0,
                warm: Schedule | None = None) -> tuple[Schedule | None, str, float, str]:
    """``(schedule | None, status, seconds, note)``: the modules solved in sequence (module docstring)
    with an equal share each of the time left; ``warm`` instead where it is shorter than their join."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    mapping = np.full(inst.n, -1, dtype=np.int64)
    start = np.zeros(inst.n)
    offset, statuses = 0.0, set()
    for s, ops in enumerate(modules):
        sub, index, skip = _module_instance(inst, ops, mapping)
        limit = max(0.05, (deadline - time.perf_counter()) / (len(modules) - s))
        res = exact.cpsat(sub, limit, heuristics.best_constructive(sub), seed=seed)
        if res.schedule is None:
            return None, "failed", time.perf_counter() - t0, f"module {s} got no schedule"
        statuses.add(res.status)
        for local in range(skip, sub.n):
            mapping[index[local]] = res.schedule.mapping[local]
            start[index[local]] = offset + res.schedule.start[local]
        offset += res.schedule.makespan
    if inst.mapping_violations(mapping):
        return None, "memory", time.perf_counter() - t0, "the joined modules overflow a device's memory (3.7)"
    sched = simulate(inst, mapping, order_by_start(inst, start))
    status = "optimal-modules" if statuses == {"optimal"} else "time_limit"
    note = f"{len(modules)} multi-channel modules solved in sequence"
    if warm is not None and warm.makespan < sched.makespan:
        note += f" (joined: {sched.makespan:.6g} s; the warm start is shorter: returned it)"
        sched = warm
    return sched, status, time.perf_counter() - t0, note
