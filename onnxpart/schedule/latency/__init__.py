"""The latency objective (Ghannane 2023): map every op onto one device of a heterogeneous system and
order it, minimizing the makespan of one input, with a certified lower bound.

:func:`solve` runs the chosen methods of :data:`METHODS` — the thesis's baselines (MET, Greedy, HEFT,
SA, biased (1+1) EA; :mod:`.heuristics`), the exact models (thesis MILP on HiGHS, CP-SAT; :mod:`.exact`)
and MILP-SPLIT (:mod:`.split`; :mod:`.chain_split` over multi-channel modules) — warm-starting each
exact solve from the best schedule so far, checks every answer with the independent validator
(:func:`.simulator.validate`), and gathers the proven lower bounds (:mod:`.bounds`, :mod:`.load_cuts`).
Pure: no files, no terminal. The answer becomes files through :mod:`.pieces` and :mod:`.emit`;
:mod:`.check` re-checks them.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxpart.board import Board
from onnxpart.certificate import LowerBound, best_bound
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.methods import CONSTRUCTIVE, Context, Run, registry, selected, within_size
from onnxpart.schedule.common.solution import Solution, shortest
# check, emit, pieces: the answer as files, and re-checked (the command reads them from here). The solver-backed
# methods' modules (exact, split, broadcast, chain_split) load CP-SAT, whose import takes 0.3-1.5 s: the methods
# import them when they run, so a run that solves nothing by CP-SAT never loads it.
from onnxpart.schedule.latency import bounds, check, emit, heuristics, load_cuts, pieces, scale
from onnxpart.schedule.latency.simulator import validate
from onnxpart.strategy import Budget, MethodResult, Registry, run_methods


__all__ = ["METHODS", "DEFAULT_METHODS", "solve", "check", "emit", "pieces"]

#: What runs without ``--method``: the constructive baselines (milliseconds), then SPLIT with the whole
#: run. Its DP over (module, entry device, exit device) solves is exact once the modules are proven, and
#: where no module exists it solves the graph whole by CP-SAT, so CP-SAT, SA and EA beside it only took its
#: time: on the onnx light models at ``--time-limit 30`` (BENCHMARKS.md, "schedule-targets") LB/UB rose from
#: 0.643 to 1.000 on inception_v1 and from 0.691 to 0.780 on inception_v2, and stayed 1.000 elsewhere.
DEFAULT_METHODS = ("met", "greedy", "heft", "cpop", "lagrange", "split")

#: The solver behind each method that proves a bound: a skipped one lists that bound as skipped too.
SOLVERS = {"exact": "cp-sat", "cpsat": "cp-sat", "milp": "highs", "split": "cp-sat+highs"}


def _too_big(name: str, context: Context, seconds: float) -> str | None:
    """Why ``name`` is not run: the graph too big for it in the run's time limit (:func:`.scale.skip_reason`)."""
    return scale.skip_reason(name, context.instance.n, context.options.time_limit)


def _within_size(run: Callable[[str, Context, float], MethodResult]) -> Callable[[str, Context, float], MethodResult]:
    """``run``, unless the graph is too big for the method in the run's time limit (:func:`_too_big`):
    then its result is listed ``skipped`` with why (and its solver's bound too), and it does not run."""
    return within_size(run, _too_big, SOLVERS)


def _constructive(name: str, context: Context, seconds: float) -> MethodResult:
    res = BASELINES[name](context.instance)
    return context.run.keep(name, res.schedule if res else None, "ok" if res else "failed",
                            res.seconds if res else 0.0)


@_within_size
def _search(name: str, context: Context, seconds: float) -> MethodResult:
    """SA or EA from the first feasible constructive mapping (MET, else Greedy, else HEFT)."""
    start = context.start()
    if start is None:
        return context.run.keep(name, None, "failed", 0.0, note="no feasible start mapping")
    run = heuristics.simulated_annealing if name == "sa" else heuristics.one_plus_one_ea
    res = run(context.instance, start.mapping, iterations=context.options.iterations, seed=context.options.seed,
              time_limit=seconds)
    return context.run.keep(name, res.schedule, "ok", res.seconds, note=f"{res.evaluations} evaluations")


@_within_size
def _solver(name: str, context: Context, seconds: float) -> MethodResult:
    """CP-SAT (``exact``, ``cpsat``) or the thesis MILP on HiGHS (``milp``), from the best schedule so far."""
    from onnxpart.schedule.latency import exact

    inst, options, run = context.instance, context.options, context.run
    if name == "milp":
        res = exact.milp(inst, seconds, run.best(), seed=options.seed, on_bound=run.live(name))
    else:
        res = exact.cpsat(inst, seconds, run.best(), seed=options.seed, workers=options.workers,
                          on_bound=run.live(name))
    run.add_bounds([LowerBound(name, res.bound, res.status, res.solver, res.seconds, res.note)])
    return run.keep(name, res.schedule, res.status, res.seconds, res.bound, res.note)


@_within_size
def _split(name: str, context: Context, seconds: float) -> MethodResult:
    """MILP-SPLIT over one-op cuts, or, where there are none, over multi-channel modules (Section 3.3.2);
    where deleting the broadcast ops (masks, rotary tables: :mod:`.broadcast`) frees smaller modules,
    SPLIT on that relaxation runs first, within :func:`.broadcast.share` of the time (its bound and lifted
    schedule). SPLIT over one-op cuts then keeps the deterministic budgets of the whole time, on the wall
    clock the relaxation left (its small modules are proven early: 2 s of 12 on BERT)."""
    from onnxpart.schedule.latency import broadcast, chain_split, split

    inst, options, run = context.instance, context.options, context.run
    relaxed, lifted, clock = broadcast.relaxation(inst), None, Budget(seconds)
    share = broadcast.share(inst) if relaxed is not None else 0.0
    if relaxed is not None:
        lifted, bound = broadcast.broadcast_split(inst, relaxed, seconds * share, options.seed, options.workers)
        run.add_bounds([bound])
    chain = chain_split.chain_of_modules(inst)
    if chain is not None:  # its budgets follow its seconds: the relaxation's share is taken from them
        seconds -= seconds * share
        joined, found = chain_split.split_on_channels(inst, chain, seconds, options.seed, options.workers,
                                                      run.best(lifted))
        sched, status, secs, note = joined
        run.add_bounds(found)  # the barrier DP's and the modules' recursive bound: the best is split's
        return run.keep(name, shortest(sched, lifted), status, secs, best_bound(found), note)
    res = split.milp_split(inst, clock.left(), seed=options.seed, workers=options.workers, board=run.board,
                           budget_seconds=seconds)
    note = (f"{len(res.modules)} modules, {res.solved_pairs} of {res.pairs} (entry, exit) pairs solved "
            f"(the rest by symmetry or repetition), {res.solves} module solves")
    run.add_bounds([LowerBound("split-dp", res.bound, res.status, "cp-sat+highs", res.seconds, res.reason or note)])
    return run.keep(name, shortest(res.schedule, lifted), res.status, res.seconds, res.bound, res.reason)


BASELINES = {"met": heuristics.met, "greedy": heuristics.greedy, "heft": heuristics.heft, "cpop": heuristics.cpop,
             "lagrange": heuristics.lagrange}

#: Every latency method (:data:`onnxpart.schedule.common.methods.CATALOGUE`), run by its function here;
#: the constructive baselines take milliseconds: no share of the time.
_sized_constructive = _within_size(_constructive)  # MET, the first answer, runs at any size
METHODS: Registry = registry(dict(met=_constructive, greedy=_sized_constructive, heft=_sized_constructive,
                                  cpop=_sized_constructive, lagrange=_sized_constructive, sa=_search, ea=_search,
                                  exact=_solver, milp=_solver, cpsat=_solver, split=_split),
                             dict.fromkeys(CONSTRUCTIVE, 0.0))


def solve(instance: Instance, options, board: Board | None = None) -> Solution:
    """Run ``options.methods`` (:class:`onnxpart.schedule.Options`) on ``instance`` and return the best
    validated schedule with every method's result and every proven lower bound. ``options.time_limit`` is
    the whole run's wall clock; ``board`` hears every improved schedule and every finished bound."""
    run = Run(Budget(options.time_limit), board if board is not None else Board(),
              lambda sched: validate(instance, sched), "schedule")
    # the LPs within a quarter of the run (at most 10 s): a short run is left time to find a schedule
    run.add_bounds(bounds.simple_bounds(instance, lp=options.lp_bound, time_limit=min(10.0, options.time_limit / 4)))
    run.add_bounds([load_cuts.load_cuts_bound(instance)])  # the load LP's value where the LP is skipped
    context = Context(instance, options, run, _first_feasible)
    run_methods(selected(METHODS, options.methods), context, options, run.board, run.budget)
    infeasible = any(r.status == "infeasible" for r in run.results)
    return run.solution(instance, METHODS.names, "no mapping satisfies memory (3.7) and the links" if infeasible else
                        "no method found a feasible mapping: add exact methods or a longer time limit", context.start)


def _first_feasible(instance: Instance):
    """The searches' start: the first feasible of MET, Greedy and HEFT (None if none is)."""
    return heuristics.met(instance) or heuristics.greedy(instance) or heuristics.heft(instance)
