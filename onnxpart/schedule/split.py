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

Module bounds. *Proof that the DP over lower bounds is one:* in any schedule of the whole graph the ops
of ``S_k`` start at or after ``start(c_k)`` (they are ``c_k`` or its descendants) and end before
``start(c_{k+1})`` (its ancestors, data included), so shifted by ``start(c_k)`` they form a schedule
of the ``(u_k, u_{k+1})`` sub-instance of length ``start(c_{k+1}) − start(c_k) ≥ OPT(S_k, u_k,
u_{k+1}) ≥ LB(S_k, u_k, u_{k+1})``; summing over ``k`` telescopes to the makespan, which is therefore
at least the DP's minimum over device chains. ``LB`` is the best of the module's CP-SAT bound and its
critical-path, path-LP and path-MIP bounds (:mod:`.bounds`), never an incumbent. Half the time goes to one pass
over every (module, entry, exit) solve; the rest re-solves, with doubling limits, the modules not yet
proven on the chains attaining the lower and the upper DP (:func:`_refine`).

Memory (3.7) is a sum over the whole graph: the modules are solved with each device's full capacity
(a relaxation, so the bound stands); if the joined mapping overflows a device, SPLIT returns no
schedule and says so. A graph without cut ops falls back to one whole-graph solve (``fallback`` and
``reason`` in the result); :func:`onnxpart.schedule.solve` first tries multi-channel modules
(Section 3.3.2: :mod:`.chain_split` and :mod:`.multichannel`) there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from onnxpart.errors import InfeasibleError
from onnxpart.schedule import bounds, exact, heuristics
from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import Schedule, simulate


@dataclass
class SplitResult:
    schedule: Schedule | None
    bound: float | None  # proven lower bound (DP over the modules' proven bounds)
    status: str  # "optimal" (every module proven), "time_limit", "memory", "infeasible"
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


@dataclass
class _Job:
    """One module solve ``OPT(S_seg, u, v)``: its sub-instance, best schedule and proven lower bound."""
    seg: int
    pair: tuple
    sub: Instance
    index: list[int]
    schedule: Schedule | None = None
    lower: float = 0.0
    status: str = "unsolved"
    floor_done: bool = False


def _floor(sub: Instance, limit: float) -> tuple[float, bool]:
    """The sub-instance's critical path, path LP and path MIP (:func:`.bounds.path_lp_bound`): proven
    bounds on its optimum, so on ``OPT(S_k, u, v)``, that stand when CP-SAT's is weak; and whether the
    MIP finished (then re-running it cannot raise the bound)."""
    mip = bounds.path_lp_bound(sub, limit, integer=True)
    value = max(bounds.critical_path_bound(sub).value, bounds.path_lp_bound(sub).value or 0.0, mip.value or 0.0)
    return value, mip.status == "optimal"


def _solve_job(job: _Job, limit: float, seed: int) -> None:
    """The path MIP floor (until it finishes) and CP-SAT on the module, warm-started from its best
    schedule so far (else the best of MET, Greedy and HEFT), half the limit each; the bound only ever
    rises (every solve's bound is a proof, so their maximum is one)."""
    if not job.floor_done:
        floor, job.floor_done = _floor(job.sub, limit / 2)
        job.lower = max(job.lower, floor)
    warm = job.schedule if job.schedule is not None else heuristics.best_constructive(job.sub)
    res = exact.cpsat(job.sub, limit / 2, warm, seed=seed)
    if res.schedule is not None and (job.schedule is None or res.schedule.makespan < job.schedule.makespan):
        job.schedule = res.schedule
    job.lower = max(job.lower, res.bound if res.bound is not None else 0.0)
    job.status = res.status


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


def milp_split(inst: Instance, time_limit: float = 10.0, seed: int = 0) -> SplitResult:
    """MILP-SPLIT with CP-SAT module solves: one pass over every (module, entry, exit) solve with half
    the time, then :func:`_refine` with the rest."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    cuts = cut_ops(inst)
    segs = _segments(inst, cuts) if cuts else []
    if not any(inst.preds[c] and inst.succs[c] for c in cuts):  # only the source/sink: one module
        warm = heuristics.heft(inst)
        whole = exact.cpsat(inst, time_limit, warm.schedule if warm else None, seed=seed)
        return SplitResult(whole.schedule, whole.bound, whole.status, cuts, [list(range(inst.n))],
                           time.perf_counter() - t0, fallback=True, solves=1,
                           reason="no articulation point separates the graph into modules: solved it whole")
    jobs = _jobs(inst, segs)
    per = max(0.05, 0.5 * (deadline - time.perf_counter()) / max(1, len(jobs)))
    for job in jobs.values():
        _solve_job(job, per, seed)
    solves = len(jobs) + _refine(jobs, len(segs), per, deadline, seed)
    lower, _ = _dp(_table(jobs, len(segs), "lower"))
    upper, choice = _dp(_table(jobs, len(segs), "upper"))
    status_count: dict[str, int] = {}
    for job in jobs.values():
        status_count[job.status] = status_count.get(job.status, 0) + 1
    base = dict(cuts=cuts, modules=[ops for ops, _, _ in segs], solves=solves, module_status=status_count)
    if not math.isfinite(upper):
        return SplitResult(None, lower, "infeasible", seconds=time.perf_counter() - t0,
                           reason="no module pairing is feasible", **base)
    schedule = _join(inst, segs, choice, jobs)
    if schedule is None:
        return SplitResult(None, lower, "memory", seconds=time.perf_counter() - t0,
                           reason="the joined modules overflow a device's memory (3.7 is global)", **base)
    status = "optimal" if set(status_count) == {"optimal"} else "time_limit"
    return SplitResult(schedule, lower, status, seconds=time.perf_counter() - t0, **base)


def _jobs(inst: Instance, segs) -> dict[tuple, _Job]:
    """Every feasible (segment, entry device, exit device) sub-instance."""
    jobs = {}
    for s, (ops, entry, exit_) in enumerate(segs):
        for u in ([None] if entry is None else inst.allowed(entry)):
            for v in ([None] if exit_ is None else inst.allowed(exit_)):
                built = _segment_instance(inst, ops, (entry, u) if entry is not None else None,
                                          (exit_, v) if exit_ is not None else None)
                if built is not None:
                    jobs[(s, u, v)] = _Job(s, (u, v), *built)
    return jobs


def _table(jobs: dict[tuple, _Job], segments: int, which: str) -> list[dict[tuple, float]]:
    """Per segment, (entry, exit) → the module's proven lower bound or best makespan (inf: none);
    infeasible pairs are absent, which :func:`_dp` treats as inf."""
    out: list[dict[tuple, float]] = [dict() for _ in range(segments)]
    for job in jobs.values():
        value = job.lower if which == "lower" else (job.schedule.makespan if job.schedule else math.inf)
        out[job.seg][job.pair] = value
    return out


def _refine(jobs: dict[tuple, _Job], segments: int, per: float, deadline: float, seed: int) -> int:
    """Re-solve, with a limit doubling each round, the modules not yet proven optimal on the device
    chains that attain the lower and the upper DP — the only ones whose values move either DP — until
    both chains are proven or the time is spent. Returns the number of re-solves."""
    solves, limit = 0, per
    while deadline - time.perf_counter() > 0.05:
        limit *= 2
        chains = [_dp(_table(jobs, segments, which))[1] for which in ("lower", "upper")]
        open_ = {(s, u, v) for chain in chains for s, (u, v) in enumerate(chain)
                 if jobs[(s, u, v)].status != "optimal"}
        if not open_:
            break
        for key in sorted(open_, key=str):
            left = deadline - time.perf_counter()
            if left <= 0.05:
                break
            _solve_job(jobs[key], min(limit, left), seed)
            solves += 1
    return solves


def _join(inst: Instance, segs, choice: list[tuple], jobs: dict[tuple, _Job]) -> Schedule | None:
    """The whole mapping from the chosen module schedules, re-simulated with their orders in sequence."""
    mapping = np.full(inst.n, -1, dtype=np.int64)
    order: list[int] = []
    for s, (u, v) in enumerate(choice):
        sched, index = jobs[(s, u, v)].schedule, jobs[(s, u, v)].index
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
