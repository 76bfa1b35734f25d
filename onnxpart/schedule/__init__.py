"""Heterogeneous mapping and scheduling (Ghannane 2023): map every op onto one device of a system of
heterogeneous devices and order it, minimizing latency, with a certified lower bound.

``solve(instance, options)`` runs the chosen methods — the thesis's baselines (MET, Greedy, HEFT, SA,
biased (1+1) EA; :mod:`.heuristics`), the exact models (thesis MILP on HiGHS, CP-SAT; :mod:`.exact`) and
MILP-SPLIT (:mod:`.split`; :mod:`.chain_split` over multi-channel modules) — warm-starting each exact
solve from the best schedule so far, checks every answer with the independent validator
(:func:`.simulator.validate`), and gathers the proven lower bounds (:mod:`.bounds`). Cost semantics
(transfers, memory) are stated in :mod:`.model`. Pure: no files, no terminal.

``Options(objective="throughput", batch=L)`` solves the batched problem of Sections 3.1–3.2 instead
(:mod:`.batch`: every op's ``L`` inputs split into slices over the devices' supported batch sizes;
throughput = ``L / C`` with ``C`` the batch's makespan). There ``exact``/``milp``/``cpsat`` all run the
CP-SAT batch model, SPLIT (:mod:`.batch_split`) solves the modules whole-batch in sequence and joins
them (no bound), and the lower bounds (per-input critical path, load LP over splits, CP-SAT's) bound ``C``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.schedule import bounds as _bounds
from onnxpart.schedule import barrier, batch_split, chain_split, exact, heuristics, multichannel, split
from onnxpart.schedule.model import Device, Instance, Link, System, from_graph, load_system
from onnxpart.schedule.simulator import Schedule, simulate, validate

__all__ = ["Device", "Instance", "Link", "System", "from_graph", "load_system", "Schedule", "simulate",
           "validate", "Options", "Solution", "MethodResult", "solve", "METHODS"]

HEURISTICS = ("met", "greedy", "heft", "sa", "ea")
EXACT = ("exact", "milp", "cpsat", "split")
METHODS = HEURISTICS + EXACT


@dataclass(frozen=True)
class Options:
    methods: tuple[str, ...] = ("met", "greedy", "heft", "sa", "ea", "cpsat")
    objective: str = "latency"
    time_limit: float = 10.0  # total seconds: the searches (SA/EA) and the exact methods share them
    seed: int = 0
    iterations: int = 2000  # SA / EA fitness evaluations
    workers: int = 1  # CP-SAT threads of a whole-graph solve; SPLIT's processes (one module solve each)
    lp_bound: bool = True  # the load LP among the simple bounds
    batch: int = 1  # throughput: inputs per batch (L), split into slices over the devices

    def __post_init__(self) -> None:
        unknown = set(self.methods) - set(METHODS)
        if unknown or not self.methods:
            raise UserError(f"unknown schedule method(s) {', '.join(sorted(unknown)) or '(none given)'}: "
                            f"use {', '.join(METHODS)}")
        if self.objective not in ("latency", "throughput"):
            raise UserError(f"unknown objective {self.objective!r}: use latency or throughput")
        if self.batch < 1:
            raise UserError("batch must be a positive integer")
        if not self.time_limit > 0:
            raise UserError("time limit must be positive")


@dataclass
class MethodResult:
    method: str
    makespan: float | None  # None: no schedule
    status: str  # "ok" (heuristic), "optimal", "time_limit", "failed", "infeasible", "memory"
    seconds: float
    bound: float | None = None
    note: str = ""


@dataclass
class Solution:
    instance: Instance
    schedule: Schedule
    method: str  # the method whose schedule is returned
    results: list[MethodResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    @property
    def mapping(self):
        return self.schedule.mapping

    @property
    def makespan(self) -> float:
        return self.schedule.makespan

    @property
    def throughput(self) -> float:
        """Inputs per second: ``L / C`` for a batched schedule, ``1 / latency`` otherwise."""
        return self.schedule.throughput

    @property
    def best_lower_bound(self) -> float | None:
        best = _bounds.combine(self.lower_bounds)
        return best.value if best is not None else None

    @property
    def gap(self) -> float | None:
        lb = self.best_lower_bound
        if lb is None:
            return None
        return 0.0 if self.makespan <= 0 else max(0.0, 1.0 - lb / self.makespan)


def _keeper(validate_fn, what: str, found: list, results: list[MethodResult], board: Board):
    """``keep(method, sched, status, seconds, bound=None, note="")``: record a method's result, and its
    schedule once ``validate_fn`` finds nothing wrong with it (a problem is a bug, not a user error: an
    invalid schedule is never handed out) — into ``found`` and offered to ``board``."""

    def keep(method: str, sched, status: str, seconds: float, bound=None, note: str = "") -> None:
        if sched is not None:
            problems = validate_fn(sched)
            if problems:
                raise AssertionError(f"{method} produced an invalid {what}: {problems[0]}")
            found.append((sched.makespan, method, sched))
            board.offer(sched.makespan, method)
        results.append(MethodResult(method, sched.makespan if sched is not None else None, status, seconds,
                                    bound, note))

    return keep


def solve(instance: Instance, options: Options = Options(), board: Board | None = None) -> Solution:
    """Run ``options.methods`` on ``instance`` and return the best validated schedule with every
    method's result and every proven lower bound (of the batch makespan ``C`` for throughput, whose
    certified throughput is ``L / bound``). ``options.time_limit`` is the whole run's wall clock;
    ``board`` (:class:`onnxpart.board.Board`) hears every improved schedule (``offer``) and every
    finished bound (``add``), which is what the command's progress bar shows (for throughput, of ``C``)."""
    board = board if board is not None else Board()
    if options.objective == "throughput":
        return _solve_throughput(instance, options, board)
    deadline = time.perf_counter() + options.time_limit
    results: list[MethodResult] = []
    found: list[tuple[float, str, Schedule]] = []
    # the LPs within a quarter of the run (at most 10 s): a short run is left time to find a schedule
    lbs = _bounds.simple_bounds(instance, lp=options.lp_bound, time_limit=min(10.0, options.time_limit / 4))
    for bound in lbs:
        board.add(bound)

    keep = _keeper(lambda sched: validate(instance, sched), "schedule", found, results, board)

    exact_methods = [m for m in options.methods if m in EXACT]
    _run_heuristics(instance, options, keep, deadline, len(exact_methods))
    for n, method in enumerate(exact_methods):
        share = max(0.05, (deadline - time.perf_counter()) / (len(exact_methods) - n))
        hint = min(found, key=lambda f: f[0])[2] if found else None
        chain = _chain_modules(instance) if method == "split" else None
        if chain is not None:  # no single-op cuts, but multi-channel modules (Section 3.3.2)
            lbs += _multichannel_split(instance, options, chain, share, hint, keep)
        elif method == "split":
            res = split.milp_split(instance, share, seed=options.seed, workers=options.workers, board=board)
            keep(method, res.schedule, res.status, res.seconds, res.bound, res.reason)
            note = (f"{len(res.modules)} modules, {res.solved_pairs} of {res.pairs} (entry, exit) pairs solved "
                    f"(the rest by symmetry), {res.solves} module solves")
            lbs.append(LowerBound("split-dp", res.bound, res.status, "cp-sat+highs", res.seconds, res.reason or note))
        else:
            res = (exact.milp(instance, share, hint, seed=options.seed, on_bound=_live(board, method))
                   if method == "milp" else
                   exact.cpsat(instance, share, hint, seed=options.seed, workers=options.workers,
                               on_bound=_live(board, method)))
            keep(method, res.schedule, res.status, res.seconds, res.bound, res.note)
            lbs.append(LowerBound(method, res.bound, res.status, res.solver, res.seconds, res.note))
        for bound in lbs:
            board.add(bound)
        board.report(method)
    if not found:
        infeasible = any(r.status == "infeasible" for r in results)
        raise InfeasibleError("no mapping satisfies memory (3.7) and the links" if infeasible else
                              "no method found a feasible mapping: add exact methods or a longer time limit")
    best = min(found, key=lambda f: (f[0], METHODS.index(f[1])))
    return Solution(instance, best[2], best[1], results, lbs)


def _live(board: Board, method: str):
    """A solver's ``on_bound``: its proven bound onto the board as it rises (the bar moves)."""
    def post(value: float) -> None:
        if board.post(method, value):
            board.report(method)

    return post


def _run_heuristics(instance: Instance, options: Options, keep, deadline: float, exact_count: int) -> None:
    """The constructive baselines, then SA and EA (each with an equal share of the time left, the exact
    methods counted as shares too)."""
    constructive = {"met": heuristics.met, "greedy": heuristics.greedy, "heft": heuristics.heft}
    for method in HEURISTICS:
        if method not in options.methods or method not in constructive:
            continue
        res = constructive[method](instance)
        keep(method, res.schedule if res else None, "ok" if res else "failed", res.seconds if res else 0.0)
    searches = [m for m in ("sa", "ea") if m in options.methods]
    if not searches:
        return
    start = heuristics.met(instance) or heuristics.greedy(instance) or heuristics.heft(instance)
    for n, method in enumerate(searches):
        share = max(0.05, (deadline - time.perf_counter()) / (len(searches) - n + exact_count))
        if start is None:
            keep(method, None, "failed", 0.0, note="no feasible start mapping")
            continue
        run = heuristics.simulated_annealing if method == "sa" else heuristics.one_plus_one_ea
        res = run(instance, start.mapping, iterations=options.iterations, seed=options.seed,
                  time_limit=share)
        keep(method, res.schedule, "ok", res.seconds, note=f"{res.evaluations} evaluations")


def _multichannel_split(instance: Instance, options: Options, chain: tuple[int, list[list[int]]], share: float,
                        hint: Schedule | None, keep) -> list[LowerBound]:
    """SPLIT where no single op cuts the graph: the barrier DP bound (:mod:`.barrier`, where barriers of
    several ops exist; up to a third of ``share``), the join (:mod:`.chain_split`: the DP's segments with
    its chain's devices, then the chain modules free) and the modules' recursive bound
    (:mod:`.multichannel`). The join gets half of what is left, three quarters with a chain from the DP
    and nine tenths where the DP completed (its chain then rests on full floors, and its bound is the
    one that counts: on the benchmark's sd stacks the recursion proved 2.47 against 3.03 ms, 2.35
    against 3.12); the recursion gets the rest."""
    channels, modules = chain
    end = time.perf_counter() + share
    out = []
    t0 = time.perf_counter()
    cuts = barrier.barrier_cuts(instance, barrier.MAX_RECEIVERS)
    found = barrier.barrier_bound(instance, cuts, share / 3)
    if found.value is not None:
        out.append(LowerBound("barrier-dp", found.value, found.status, "highs", time.perf_counter() - t0, found.note))
    left, completed = end - time.perf_counter(), found.status == "bound"
    # a chain resting on full floors is the better guide: it gets most of the join's time
    guide = (chain_split.Guide(barrier.segments(instance, cuts), found.pins, 0.75 if completed else 0.25)
             if found.pins else None)
    join_share = 0.9 if guide and completed else 0.75 if guide else 0.5
    sched, status, secs, note = chain_split.chain_split(instance, modules, left * join_share, options.seed, hint, guide,
                                                        options.workers)
    keep("split", sched, status, secs, note=note)
    t0 = time.perf_counter()
    value, status, note = multichannel.multichannel_bound(instance, modules, max(0.05, end - time.perf_counter()),
                                                          options.seed)
    out.append(LowerBound(f"multichannel-{channels}", value, status, "cp-sat", time.perf_counter() - t0, note))
    return out


def _chain_modules(instance: Instance) -> tuple[int, list[list[int]]] | None:
    """``(channels, modules)``: when no single op cuts the graph into modules (:func:`.split.cut_ops`),
    the first chain of 2-, 3- or 4-channel modules (:func:`.multichannel.chain_modules`), if any."""
    cuts = split.cut_ops(instance)
    if any(instance.preds[c] and instance.succs[c] for c in cuts):
        return None
    for channels in (2, 3, 4):
        modules = multichannel.chain_modules(instance, channels)
        if modules is not None:
            return channels, modules
    return None


def _solve_throughput(instance: Instance, options: Options, board: Board) -> Solution:
    """The throughput objective (:mod:`.batch`): batched baselines, CP-SAT with the batch variables,
    and SPLIT (:mod:`.batch_split`: modules solved whole-batch in sequence, joined and re-simulated; no
    bound — modules overlap in time under data parallelism)."""
    from onnxpart.schedule import batch as B

    L = options.batch
    deadline = time.perf_counter() + options.time_limit
    B.op_splits(instance, L)  # one-line UserError for a batch no device combination supports
    results: list[MethodResult] = []
    found: list[tuple[float, str, B.BatchSchedule]] = []
    relaxed = B.load_lp(instance, L, min(10.0, options.time_limit / 4)) if options.lp_bound else None
    lbs = [B.critical_path_bound(instance, L)] + ([relaxed.bound] if relaxed else [])
    for bound in lbs:
        board.add(bound)

    keep = _keeper(lambda sched: B.validate_batch(instance, sched), "batched schedule", found, results, board)

    # the list baselines share half the run at most (24 devices give each op a thousand splits: on
    # resnet50 bHEFT took 19 s of a 10 s run)
    baselines = [(m, fn) for m, fn in (("met", B.bmet), ("greedy", B.bgreedy), ("heft", B.bheft))
                 if m in options.methods]
    for n, (method, fn) in enumerate(baselines):
        share = max(0.05, (deadline - options.time_limit / 2 - time.perf_counter()) / (len(baselines) - n))
        r = fn(instance, L, share)
        keep(method, r.schedule, "time_limit" if r.timed_out else "ok" if r.schedule else "failed", r.seconds)
    # SA/EA start from the best of the baselines run (bMET if none), plain data parallelism (one split
    # for all ops) and the load LP's rounded optimum (on the benchmark's sd 2-channel stack its CPU
    # computes 766 ms, bHEFT's 1102)
    fallback = None if found else B.bmet(instance, L, max(0.05, (deadline - time.perf_counter()) / 4)).schedule
    starts = [s for _, _, s in found] + [fallback, B.uniform(instance, L).schedule,
                                         relaxed.rounded if relaxed else None]
    starts = [s for s in starts if s is not None]
    start = min(starts, key=lambda s: s.makespan) if starts else None
    exact_methods = [m for m in options.methods if m in EXACT]
    searches = [m for m in ("sa", "ea") if m in options.methods and start is not None]
    for n, method in enumerate(searches):  # an equal share of the time left, the exact methods counted too
        share = max(0.05, (deadline - time.perf_counter()) / (len(searches) - n + len(exact_methods)))
        r = (B.bsa if method == "sa" else B.bea)(instance, L, start.splits, iterations=options.iterations,
                                                 seed=options.seed, time_limit=share)
        keep(method, r.schedule, "ok", r.seconds, note=f"{r.evaluations} evaluations")
    for k, method in enumerate(exact_methods):
        share = max(0.05, (deadline - time.perf_counter()) / (len(exact_methods) - k))
        pool = [f[2] for f in found] + ([start] if start is not None else [])
        hint = min(pool, key=lambda s: s.makespan) if pool else None
        if method == "split":
            sched, status, secs, note = batch_split.split_throughput(instance, L, share, options.seed,
                                                                     options.workers, hint)
            keep(method, sched, status, secs, note=note)
            continue
        res = B.cpsat(instance, L, share, hint, seed=options.seed, workers=options.workers)
        keep(method, res.schedule, res.status, res.seconds, res.bound, res.note)
        lbs.append(LowerBound(method, res.bound, res.status, "cp-sat", res.seconds, res.note))
        board.add(lbs[-1])
        board.report(method)
    if not found:
        raise InfeasibleError("no method found a feasible batched schedule")
    best = min(found, key=lambda f: (f[0], METHODS.index(f[1])))
    return Solution(instance, best[2], best[1], results, lbs)
