"""MILP-SPLIT (Section 3.3.1): solve modules separately for every (entry device, exit device) pair and
join them by dynamic programming.

Modules. The thesis finds modules between articulation points and bridges of the undirected graph,
turning articulation points into zero-cost bridges whose two ends share a device. Here a *cut op* is an
articulation point ``a`` (networkx) — or the unique source or sink — such that every other op is an
ancestor or a descendant of ``a`` and no edge joins an ancestor to a descendant: all data crossing the
cut goes through ``a``. (A bridge between modules of a single-input single-output DAG has cut ops at
both ends, so bridges add nothing beyond them.) With cut ops ``c_1 < … < c_r`` the ops split into the
prefix ``S_0`` (ancestors of ``c_1``), ``S_k = {c_k} ∪ (between c_k and c_{k+1})`` and ``S_r = {c_r} ∪
descendants``; in any schedule ``S_k`` runs inside ``[start(c_k), start(c_{k+1})]``.

Segment costs. ``OPT(S_k, u, v)`` is the least time from ``c_k`` starting on ``u`` until ``c_{k+1}`` can
start on ``v``: the sub-instance with ``c_k`` pinned to ``u`` and a zero-time, zero-memory copy of
``c_{k+1}`` pinned to ``v`` as its exit. The makespan is ``OPT(S_0, ·, u_1) + Σ_k OPT(S_k, u_k, u_{k+1})
+ OPT(S_r, u_r, ·)``, minimized over the cut devices by the recursion
``dp(M_i, v) = min_u dp(M_{i−1}, u) + OPT(M_i, u, v)`` — exact when every module is solved to
optimality, and the same recursion over the modules' *proven bounds* is a proven lower bound.

Memory (3.7) is a sum over the whole graph: the modules are solved with each device's full capacity
(a relaxation, so the bound stands); if the joined mapping overflows a device, SPLIT returns no
schedule and says so. A graph without cut ops falls back to one whole-graph solve (``fallback`` and
``reason`` in the result). Multi-channel modules (k-edge-connected components, Section 3.3.2) are not
implemented.

The module solves run as jobs on the shared runner, in parallel (:mod:`.split_lane`: each job's time and
deterministic budget, the live DP bound on the board, early stop); :func:`_dp` and the join stay here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from onnxpart.board import Board
from onnxpart.errors import InfeasibleError
from onnxpart.schedule import exact, heuristics
from onnxpart.schedule import split_lane as lane
from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import Schedule, simulate


@dataclass
class SplitResult:
    schedule: Schedule | None
    bound: float | None  # proven lower bound (DP over the modules' proven bounds)
    status: str  # "optimal" (every module proven), "time_limit", "interrupted", "memory", "infeasible", "error"
    cuts: list[int]
    modules: list[list[int]]
    seconds: float
    fallback: bool = False
    reason: str = ""
    solves: int = 0
    module_status: dict[str, int] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return self.schedule.makespan if self.schedule is not None else math.inf


def cut_ops(inst: Instance) -> list[int]:
    """The cut ops (module docstring) in topological order."""
    reach = inst.ancestors_closure()
    und = nx.Graph()
    und.add_nodes_from(range(inst.n))
    und.add_edges_from((i, j) for i, j, _ in inst.edges)
    candidates = set(nx.articulation_points(und))
    sources = [i for i in range(inst.n) if not inst.preds[i]]
    sinks = [i for i in range(inst.n) if not inst.succs[i]]
    candidates |= set(sources) if len(sources) == 1 else set()
    candidates |= set(sinks) if len(sinks) == 1 else set()
    src = np.array([i for i, _, _ in inst.edges], dtype=np.int64)
    dst = np.array([j for _, j, _ in inst.edges], dtype=np.int64)
    out = []
    for a in candidates:
        related = reach[:, a] | reach[a]
        if related.sum() != inst.n - 1:
            continue
        if len(src) and np.any(reach[src, a] & reach[a, dst]):
            continue  # an edge skips over a
        out.append(a)
    pos = {v: p for p, v in enumerate(inst.topo)}
    return sorted(out, key=pos.get)


def _segments(inst: Instance, cuts: list[int]) -> list[tuple[list[int], int | None, int | None]]:
    """``(ops, entry cut, exit cut)`` per segment; the exit cut is not among the ops."""
    reach = inst.ancestors_closure()
    segs = []
    before = [i for i in inst.topo if reach[i, cuts[0]]]
    if before:
        segs.append((before, None, cuts[0]))
    for k, c in enumerate(cuts):
        nxt = cuts[k + 1] if k + 1 < len(cuts) else None
        inside = [i for i in inst.topo if reach[c, i] and (nxt is None or reach[i, nxt])]
        segs.append(([c] + inside, c, nxt))
    return segs


def _segment_instance(inst: Instance, ops: list[int], entry: tuple[int, int] | None,
                      exit_: tuple[int, int] | None) -> tuple[Instance, list[int]] | None:
    fixed = dict([entry] if entry else []) | dict([exit_] if exit_ else [])
    members = ops + ([exit_[0]] if exit_ else [])
    for g, u in fixed.items():
        if not math.isfinite(inst.time[g, u]):
            return None
    try:
        sub, index = inst.subinstance(members, fixed)
    except InfeasibleError:
        return None
    if exit_:  # the exit is a zero-time, zero-memory stand-in for the next module's entry
        sub.time[-1, exit_[1]] = 0.0
        sub.mem = sub.mem.copy()
        sub.mem[-1] = 0.0
    return sub, index


def _dp(segs_costs: list[dict[tuple, float]]) -> tuple[float, list[tuple]]:
    """``dp(M_i, v) = min_u dp(M_{i−1}, u) + cost(M_i, u, v)`` over segments whose cost tables map
    (entry device | None, exit device | None) to a value; returns the minimum and the chosen pairs."""
    dp: dict = {u: (0.0, []) for u, _ in segs_costs[0]}  # None, or the first cut's devices
    for costs in segs_costs:
        nxt: dict = {}
        for (u, v), c in costs.items():
            if u in dp and math.isfinite(c):
                val = dp[u][0] + c
                if v not in nxt or val < nxt[v][0]:
                    nxt[v] = (val, dp[u][1] + [(u, v)])
        dp = nxt
    return dp[None] if None in dp else (math.inf, [])


def milp_split(inst: Instance, time_limit: float = 10.0, seed: int = 0, workers: int = 1,
               board: Board | None = None) -> SplitResult:
    """MILP-SPLIT within ``time_limit`` seconds: every (module, entry, exit) pair solved by one-worker
    CP-SAT (HEFT warm start) as a job on ``workers`` processes, posting the live DP bound to ``board``
    (:mod:`.split_lane`: budgets, determinism); then the DP join. Without modules, one whole-graph
    CP-SAT solve with ``workers`` threads."""
    t0 = time.perf_counter()
    cuts = cut_ops(inst)
    segs = _segments(inst, cuts) if cuts else []
    if not any(inst.preds[c] and inst.succs[c] for c in cuts):  # only the source/sink: one module
        warm = heuristics.heft(inst)
        whole = exact.cpsat(inst, time_limit, warm.schedule if warm else None, seed=seed, workers=workers)
        return SplitResult(whole.schedule, whole.bound, whole.status, cuts, [list(range(inst.n))],
                           time.perf_counter() - t0, fallback=True, solves=1,
                           reason="no articulation point separates the graph into modules: solved it whole")
    modules = [ops for ops, _, _ in segs]
    if board is not None and board.closed():  # nothing left to find or prove: build and run nothing
        return SplitResult(None, None, "interrupted", cuts, modules, time.perf_counter() - t0,
                           reason="not run: the incumbent already met a proven bound")
    end = time.time() + time_limit - (time.perf_counter() - t0)
    tables, jobs, index = _module_jobs(inst, segs, end, seed, workers)
    lane.solve_modules(jobs, tables, workers, board, lambda lb: _dp(lb)[0], end)
    lower, _ = _dp(tables.lb)
    upper, choice = _dp(tables.ub)
    base = dict(cuts=cuts, modules=modules, solves=len(index), module_status=tables.status)
    if not math.isfinite(upper):
        failed = tables.status.get("error", 0)
        status, reason = (("interrupted", "stopped early (the incumbent met a proven bound, or Ctrl-C)")
                          if tables.interrupted else
                          ("error", f"{failed} module solves failed (see the log)") if failed else
                          ("time_limit", f"{tables.unsolved} module pairs found no schedule in time")
                          if tables.unsolved else ("infeasible", "no module pairing is feasible"))
        return SplitResult(None, lower, status, seconds=time.perf_counter() - t0, reason=reason, **base)
    schedule = _join(inst, segs, choice, {key: (tables.found[key], index[key]) for key in tables.found})
    if schedule is None:
        return SplitResult(None, lower, "memory", seconds=time.perf_counter() - t0,
                           reason="the joined modules overflow a device's memory (3.7 is global)", **base)
    status = ("interrupted" if tables.interrupted else
              "optimal" if set(tables.status) == {"optimal"} else "time_limit")
    reason = (f"{tables.wall_stops} module solves stopped by the wall clock, not their deterministic budget: "
              "another run may differ" if tables.wall_stops else "")
    return SplitResult(schedule, lower, status, seconds=time.perf_counter() - t0, reason=reason, **base)


def _module_jobs(inst: Instance, segs, end: float, seed: int, workers: int):
    """-> (tables: no schedule yet (upper inf), lower 0 — or inf where the pinned sub-instance is
    infeasible, which gets no job —, one job per (segment, entry device) holding its feasible exits,
    op index per key). Deadlines and budgets count from when the sub-instances are built, to ``end``."""
    ub, lb = [dict() for _ in segs], [dict() for _ in segs]
    groups: list[list[tuple[lane.Key, Instance]]] = []
    index: dict[lane.Key, list[int]] = {}
    for s, (ops, entry, exit_) in enumerate(segs):
        for u in ([None] if entry is None else inst.allowed(entry)):
            group = []
            for v in ([None] if exit_ is None else inst.allowed(exit_)):
                sub = _segment_instance(inst, ops, (entry, u) if entry is not None else None,
                                        (exit_, v) if exit_ is not None else None)
                ub[s][(u, v)], lb[s][(u, v)] = math.inf, math.inf if sub is None else 0.0
                if sub is not None:
                    group.append(((s, u, v), sub[0]))
                    index[(s, u, v)] = sub[1]
            groups += [group] if group else []
    weights = [float(sum(sub.n for _, sub in g)) for g in groups]
    order = sorted(range(len(groups)), key=lambda g: (-weights[g], groups[g][0][0]))  # largest first
    now = time.time()
    limit = max(0.05, end - now)
    ends = lane.deadlines([weights[g] for g in order], max(1, workers), now, limit)
    per = lane.DET_PER_SECOND * limit / max(1.0, sum(weights))  # deterministic seconds per op
    jobs = [lane.ModuleJob(tuple((key, sub, per * sub.n) for key, sub in groups[g]), deadline, seed)
            for g, deadline in zip(order, ends)]
    return lane.ModuleTables(ub, lb), jobs, index


def _join(inst: Instance, segs, choice: list[tuple], found: dict) -> Schedule | None:
    """The whole mapping from the chosen module schedules, re-simulated with their orders in sequence."""
    mapping = np.full(inst.n, -1, dtype=np.int64)
    order: list[int] = []
    for s, (u, v) in enumerate(choice):
        sched, index = found[(s, u, v)]
        ops = segs[s][0]
        for local in order_by_start_local(sched):
            if local < len(ops):  # the last local op of a module with an exit is the stand-in
                order.append(index[local])
                mapping[index[local]] = sched.mapping[local]
    if inst.mapping_violations(mapping):
        return None
    return simulate(inst, mapping, order)


def order_by_start_local(sched: Schedule) -> list[int]:
    """A module schedule's ops by start time (its own placement order breaks ties)."""
    pos = {v: p for p, v in enumerate(sched.order)}
    return sorted(range(len(sched.start)), key=lambda i: (sched.start[i], pos[i]))
