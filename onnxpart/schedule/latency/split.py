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
critical-path, device-path and path-LP bounds (:mod:`.bounds`), never an incumbent.

Symmetry (Section 5.2). ``OPT(S_k, u, v) = OPT(S_k, σu, σv)`` for every device automorphism ``σ`` of
the instance, and a schedule or bound for one pair relabelled by ``σ`` is one for the other; so only one
pair per orbit is solved and the tables record its results for the whole orbit (:mod:`.symmetry`,
:class:`.split_lane.ModuleTables`): with exact solves the DP sees what solving every pair gives.
*Repeated modules* — the layers of a transformer stack — pin to sub-instances equal in every time,
edge, delay and memory (:func:`_content`); one is solved, and its schedules (the same local op indices)
and bounds are its twins' too, so each solve gets the budget of all of them.

Time. A quarter of the time and of the deterministic budget (:data:`FIRST_PASS`) goes to one pass over
every (module, entry, exit) solve; the rest to :func:`_refine`, which re-solves, with doubling budgets,
the modules not yet proven on the device chains attaining the lower and the upper DP — the only ones
whose values move either DP. Both run as jobs on the shared runner, in parallel (:mod:`.split_lane`: a
pair's floor and CP-SAT solve, wall deadlines, the live DP bound on the board, early stop). Every budget
(CP-SAT deterministic time, the refinement's total) is fixed from ``T`` and the op counts, never the wall
clock, so the rounds and the answer do not depend on ``workers``; :func:`join_dp` and the join stay here.

Memory (3.7) is a sum over the whole graph: the modules are solved with each device's full capacity
(a relaxation, so the bound stands); if the joined mapping overflows a device, SPLIT returns no
schedule and says so. A graph without cut ops falls back to one whole-graph solve (``fallback`` and
``reason`` in the result); :func:`onnxpart.schedule.latency.solve` first tries multi-channel modules
(Section 3.3.2: :mod:`.chain_split` and :mod:`.multichannel`) there.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from time import monotonic as now

import numpy as np

from onnxpart.board import Board
from onnxpart.errors import InfeasibleError
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, has_modules, segments
from onnxpart.schedule.latency import exact, heuristics, symmetry
from onnxpart.schedule.latency import split_lane as lane
from onnxpart.schedule.common.ticks import deterministic_seconds
from onnxpart.schedule.latency.simulator import Schedule, simulate
from onnxpart.strategy import FLOOR, Budget

#: The first pass's share of the run — its wall clock and CP-SAT deterministic time — over every (module,
#: entry, exit) pair; the refinement of the DP's chains gets the rest. Most pairs never lie on a chain:
#: on inception_v2 (371 ops, ten modules of 27–37 ops, nine pairs each) at 60 s, 0.5 (the share before)
#: gave LB/UB 0.895 and 0.25 gave 0.935 (the 1-channel RWNN stack: 0.949 and 0.960).
FIRST_PASS = 0.25
#: The first pass's window on the wall clock, a safety net: its deterministic budgets (``FIRST_PASS`` of
#: the run's, :data:`~onnxpart.schedule.common.ticks.DET_PER_SECOND`) end it first. Twice their share,
#: the one-op modules outside its rounds: on one 17-op module CP-SAT's deterministic clock ran at 0.04 a
#: second, not 0.2, and a window of exactly ``FIRST_PASS`` cut 2–5 such solves by the wall clock in ``make
#: run``'s demo. The refinement's rounds get less of the wall: at 60 s LB/UB rose on
#: inception_v2 (0.905 → 0.983) and fell on BERT's legacy export (1.000 → 0.929), BENCHMARKS round 7.
FIRST_PASS_WALL = 2 * FIRST_PASS


@dataclass
class SplitResult:
    schedule: Schedule | None
    bound: float | None  # proven lower bound (DP over the modules' proven bounds)
    status: str  # "optimal" (every module proven, or the schedule meets the bound), "time_limit",
    # "interrupted", "memory", "infeasible", "error"
    cuts: list[int]
    modules: list[list[int]]
    seconds: float
    fallback: bool = False
    reason: str = ""
    solves: int = 0
    module_status: dict[str, int] = field(default_factory=dict)  # (module, entry, exit) pairs per latest status
    pairs: int = 0  # feasible (module, entry, exit) pairs
    solved_pairs: int = 0  # of which solved: one per orbit of the device automorphisms (:mod:`.symmetry`)

    @property
    def makespan(self) -> float:
        return self.schedule.makespan if self.schedule is not None else math.inf


def segment_instance(inst: Instance, ops: list[int], entry: dict[int, int],
                     exit_: tuple[int, int] | None) -> tuple[Instance, list[int]] | None:
    """The sub-instance of ``ops`` with the ``entry`` ops pinned (op → device) and, for ``exit_ = (op,
    device)``, a zero-time, zero-memory stand-in of that op pinned last; None where a pin is infeasible."""
    fixed = dict(entry) | dict([exit_] if exit_ else [])
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


def join_dp(segs_costs: list[dict[tuple, float]]) -> tuple[float, list[tuple]]:
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
               board: Board | None = None, symmetric: bool = True, budget_seconds: float | None = None) -> SplitResult:
    """MILP-SPLIT within ``time_limit`` seconds: every (module, entry, exit) pair's floor and one-worker
    CP-SAT solve as jobs on ``workers`` processes — with ``symmetric``, one pair per orbit of the device
    automorphisms (:mod:`.symmetry`) — posting the live DP bound to ``board`` (:mod:`.split_lane`), then
    :func:`_refine`, then the DP join. Without modules, one whole-graph CP-SAT solve with ``workers``
    threads. The CP-SAT deterministic budgets are those of ``budget_seconds`` (default ``time_limit``)."""
    clock = Budget(time_limit)
    t0 = clock.start
    cuts = cut_ops(inst)
    segs = segments(inst, cuts) if cuts else []
    if not has_modules(inst, cuts):  # only the source/sink: one module
        warm = heuristics.heft(inst)
        whole = exact.cpsat(inst, time_limit, warm.schedule if warm else None, seed=seed, workers=workers)
        return SplitResult(whole.schedule, whole.bound, whole.status, cuts, [list(range(inst.n))],
                           now() - t0, fallback=True, solves=1,
                           reason="no articulation point separates the graph into modules: solved it whole")
    modules = [ops for ops, _, _ in segs]
    if board is not None and board.closed():  # nothing left to find or prove: build and run nothing
        return SplitResult(None, None, "interrupted", cuts, modules, now() - t0,
                           reason="not run: the incumbent already met a proven bound")
    tables, subs, index = _module_pairs(inst, segs, symmetric)
    det = (deterministic_seconds(budget_seconds or time_limit) * FIRST_PASS
           / max(1.0, float(sum(sub.n for sub in subs.values()))))
    budgets = {key: det * sub.n for key, sub in subs.items()}  # deterministic seconds, first pass
    first = [lane.Pair(key, sub, budgets[key]) for key, sub in subs.items()]
    share = Budget(FIRST_PASS_WALL * clock.left())
    lane.solve_modules(_jobs(first, share, workers, seed), tables, workers, board, lambda lb: join_dp(lb)[0],
                       share.deadline)
    _refine(tables, subs, budgets, clock, workers, seed, board)
    return _result(inst, segs, tables, index, dict(cuts=cuts, modules=modules, solves=tables.solves,
                                                   module_status=tables.status, pairs=len(index),
                                                   solved_pairs=len(subs)), t0)


def _result(inst: Instance, segs, tables: lane.ModuleTables, index: dict, base: dict, t0: float) -> SplitResult:
    """The DP join of what the tables hold, with the status and note that explain it."""
    lower, _ = join_dp(tables.lb)
    upper, choice = join_dp(tables.ub)
    if not math.isfinite(upper):
        failed = tables.status.get("error", 0)
        status, reason = (("interrupted", "stopped early (the incumbent met a proven bound)")
                          if tables.interrupted else
                          ("error", f"{failed} module solves failed (see the log)") if failed else
                          ("time_limit", f"{tables.unsolved} module pairs found no schedule in time")
                          if tables.unsolved else ("infeasible", "no module pairing is feasible"))
        return SplitResult(None, lower, status, seconds=now() - t0, reason=reason, **base)
    schedule = _join(inst, segs, choice, {key: (tables.found[key], index[key]) for key in tables.found})
    if schedule is None:
        return SplitResult(None, lower, "memory", seconds=now() - t0,
                           reason="the joined modules overflow a device's memory (3.7 is global)", **base)
    proven = set(tables.status) == {"optimal"} or schedule.makespan <= lower + 1e-9  # it meets the bound
    status = "interrupted" if tables.interrupted else "optimal" if proven else "time_limit"
    return SplitResult(schedule, lower, status, seconds=now() - t0, reason=_clock_note(tables), **base)


def _clock_note(tables: lane.ModuleTables) -> str:
    """What the wall clock, not a deterministic budget, cut short (then another run may differ), or ""."""
    cuts = [f"{tables.wall_stops} module solves stopped by the wall clock, not their deterministic budget"
            if tables.wall_stops else "",
            f"the refinement out of time with {tables.refine_left:.0%} of its deterministic budget left"
            if tables.refine_left else ""]
    return "; ".join(c for c in cuts if c) + ": another run may differ" if any(cuts) else ""


def _module_pairs(inst: Instance, segs, symmetric: bool = True) -> tuple[lane.ModuleTables, dict, dict]:
    """-> (tables: no schedule yet (upper inf), lower 0 — or inf where the pinned sub-instance is
    infeasible, which gets no solve —, the sub-instances of the feasible pairs to solve, and every
    feasible pair's op indices, by key). With ``symmetric``, only each orbit's representative under the
    device automorphisms (:mod:`.symmetry`) gets a sub-instance; the tables know its orbit mates. A pair
    whose sub-instance equals an earlier pair's (a repeated module) is that pair's image too."""
    gens = symmetry.generators(inst) if symmetric else []
    tables = lane.ModuleTables([dict() for _ in segs], [dict() for _ in segs])
    subs: dict[lane.Key, Instance] = {}
    index: dict[lane.Key, list[int]] = {}
    seen: dict[bytes, lane.Key] = {}  # a pinned sub-instance's content → the first pair that has it
    for s, (ops, entry, exit_) in enumerate(segs):
        pairs = [(u, v) for u in ([None] if entry is None else inst.allowed(entry))
                 for v in ([None] if exit_ is None else inst.allowed(exit_))]
        for (u, v), (rep, perm) in symmetry.pair_orbits(pairs, gens, inst.k).items():  # representatives first
            key = (s, u, v)
            if (u, v) == rep:
                sub = segment_instance(inst, ops, {entry: u} if entry is not None else {},
                                        (exit_, v) if exit_ is not None else None)
                if sub is not None:
                    index[key] = sub[1]
                    same = seen.setdefault(_content(sub[0]), key)
                    if same == key:
                        subs[key] = sub[0]
                    else:  # a repeated module (a layer like an earlier one): the same sub-instance
                        tables.rep[key] = same
                        tables.images.setdefault(same, []).append((key, np.arange(inst.k)))
            else:
                solved = tables.rep.get((s, *rep), (s, *rep))
                tables.rep[key] = solved
                tables.images.setdefault(solved, []).append((key, perm))
                if (s, *rep) in index:
                    index[key] = index[(s, *rep)]
            tables.ub[s][(u, v)] = math.inf
            tables.lb[s][(u, v)] = 0.0 if (s, *rep) in index else math.inf
    return tables, subs, index


def _content(sub: Instance) -> bytes:
    """A digest of what a pinned sub-instance's optimum and schedules depend on — times, edges with
    bytes, delays, memory — in its local op order: equal digests, the same instance."""
    digest = hashlib.sha256(np.asarray(sub.time, dtype=float).tobytes())
    digest.update(repr(sub.edges).encode())
    for array in (sub.delays, sub.mem):
        digest.update(np.ascontiguousarray(array, dtype=float).tobytes())
    return digest.digest()


def _jobs(pairs: list[lane.Pair], budget: Budget, workers: int, seed: int) -> list[lane.ModuleJob]:
    """One job per (segment, entry device) holding its pairs, largest first, with the lane's round
    deadlines over ``budget`` — among the jobs the workers run: an inline job (:func:`.split_lane.inline`,
    milliseconds in the lane's process beside them) may run until the end."""
    groups: dict[tuple, list[lane.Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.key[:2], []).append(pair)
    weights = {g: float(sum(p.sub.n for p in ps)) for g, ps in groups.items()}
    order = sorted(groups, key=lambda g: (-weights[g], str(g)))
    worked = [g for g in order if not lane.inline(groups[g])]  # the inline jobs take none of the rounds' time
    span = budget.share()
    ends = dict(zip(worked, lane.deadlines([weights[g] for g in worked], max(1, workers), budget.start, span)))
    return [lane.ModuleJob(tuple(groups[g]), ends.get(g, budget.start + span), seed) for g in order]


def _refine(tables: lane.ModuleTables, subs: dict, budgets: dict, clock: Budget, workers: int, seed: int,
            board: Board | None) -> None:
    """Re-solve, in rounds with CP-SAT deterministic budgets doubling each round,
    the pairs not yet proven on the device chains attaining the lower and the upper DP, warm-started
    from their best schedules, until both chains are proven or the refinement's deterministic budget
    (the run's less the first pass's ``budgets``: :data:`FIRST_PASS`) is spent — a budget, not the wall
    clock, so the rounds do not depend on ``workers``; a round may run until ``clock``'s deadline (a
    safety net: its budgets end it first). Where the clock ends with pairs open and budget left, the
    fraction left is ``tables.refine_left`` (:func:`_clock_note`: another run may differ)."""
    total = sum(budgets.values()) * (1 - FIRST_PASS) / FIRST_PASS
    left, scale = total, 1
    while left > 1e-9 and not tables.interrupted:
        if board is not None and board.closed():  # the incumbent met a proven bound: nothing to refine
            return
        open_ = _open_pairs(tables)
        if not open_:
            return
        if clock.left() <= FLOOR:  # pairs to refine and budget left, but no time: another run may differ
            tables.refine_left = left / total
            return
        scale *= 2
        cost = sum(scale * budgets[key] for key in open_)
        share = min(1.0, left / cost)  # the last round gets what is left, in proportion
        pairs = [lane.Pair(key, subs[key], share * scale * budgets[key], False, tables.found.get(key))
                 for key in open_]
        left -= cost * share
        lane.solve_modules(_jobs(pairs, Budget(clock.left()), workers, seed), tables, workers, board,
                           lambda lb: join_dp(lb)[0], clock.deadline)


def _open_pairs(tables: lane.ModuleTables) -> list[lane.Key]:
    """The representatives of the pairs on the device chains attaining the lower and the upper DP that
    their solves left unproven (status ``time_limit``, bound below their best schedule)."""
    chains = [join_dp(table)[1] for table in (tables.lb, tables.ub)]
    return sorted({tables.rep.get((s, u, v), (s, u, v)) for chain in chains for s, (u, v) in enumerate(chain)
                   if tables.latest.get((s, u, v)) == "time_limit"
                   and tables.lb[s][(u, v)] < tables.ub[s][(u, v)] - 1e-9}, key=str)


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
