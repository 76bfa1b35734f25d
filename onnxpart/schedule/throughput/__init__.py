"""The throughput objective (Sections 3.1–3.2 of Ghannane 2023): every op's batch of ``L`` inputs split
into slices over the devices' supported batch sizes (data and model parallelism), maximizing throughput
``L / C``, ``C`` the batch's makespan, with a certified bound on ``C``.

:func:`solve` runs the chosen methods of :data:`METHODS` — the batched baselines (bMET, bGreedy, bHEFT,
SA, EA: :mod:`.heuristics`), CP-SAT with the batch variables (``exact``, ``milp`` and ``cpsat`` alike:
:mod:`.exact`) and SPLIT (:mod:`.split`: modules solved whole-batch in sequence, joined and re-simulated;
no bound — modules overlap in time under data parallelism) — checks every answer with the independent
validator (:func:`.simulator.validate`), and gathers the proven lower bounds of ``C`` (per-input critical
path, load LP over splits, CP-SAT's: :mod:`.bounds`). The splits and their semantics are in
:mod:`.model`; the answer becomes files through :mod:`.pieces`, :mod:`.emit` and :mod:`.verify`.
"""

from __future__ import annotations

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.budget import Budget
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.methods import (EXACT, HEURISTIC, SEARCH, Context, Method, Run, chosen, registry,
                                              run_methods)
from onnxpart.schedule.common.solution import Solution
# check, emit, pieces: the answer as files, and re-checked (the command reads them from here)
from onnxpart.schedule.throughput import bounds, check, emit, exact, heuristics, pieces, split
from onnxpart.schedule.throughput.model import op_splits
from onnxpart.schedule.throughput.simulator import validate


__all__ = ["METHODS", "solve", "check", "emit", "pieces"]


def _constructive(name: str, context: Context, seconds: float) -> None:
    res = CONSTRUCTIVE[name](context.instance, context.options.batch, seconds)
    status = "time_limit" if res.timed_out else "ok" if res.schedule else "failed"
    context.run.keep(name, res.schedule, status, res.seconds)


def _search(name: str, context: Context, seconds: float) -> None:
    """SA or EA from the best start (:func:`_start`)."""
    run = heuristics.simulated_annealing if name == "sa" else heuristics.one_plus_one_ea
    res = run(context.instance, context.options.batch, context.start().splits, iterations=context.options.iterations,
              seed=context.options.seed, time_limit=seconds)
    context.run.keep(name, res.schedule, "ok", res.seconds, note=f"{res.evaluations} evaluations")


def _solver(name: str, context: Context, seconds: float) -> None:
    """The CP-SAT batch model from the best schedule so far (``exact``, ``milp`` and ``cpsat``)."""
    inst, options, run = context.instance, context.options, context.run
    res = exact.cpsat(inst, options.batch, seconds, run.best(context.start()), seed=options.seed,
                      workers=options.workers)
    run.keep(name, res.schedule, res.status, res.seconds, res.bound, res.note)
    run.add_bounds([LowerBound(name, res.bound, res.status, res.solver, res.seconds, res.note)])


def _split(name: str, context: Context, seconds: float) -> None:
    """SPLIT: the modules whole-batch in sequence, warm-started from the best schedule so far."""
    options, run = context.options, context.run
    sched, status, secs, note = split.split_throughput(context.instance, options.batch, seconds, options.seed,
                                                       options.workers, run.best(context.start()))
    run.keep(name, sched, status, secs, note=note)


CONSTRUCTIVE = {"met": heuristics.met, "greedy": heuristics.greedy, "heft": heuristics.heft}

#: Every throughput method (:data:`onnxpart.schedule.common.methods.CATALOGUE`), run by its function here.
METHODS: dict[str, Method] = registry(dict(met=_constructive, greedy=_constructive, heft=_constructive, sa=_search,
                                           ea=_search, exact=_solver, milp=_solver, cpsat=_solver, split=_split),
                                      {HEURISTIC: 1, SEARCH: 1, EXACT: 1})  # the baselines share their own phase


def solve(instance: Instance, options, board: Board | None = None) -> Solution:
    """Run ``options.methods`` (:class:`onnxpart.schedule.Options`) on a batch of ``options.batch`` inputs
    and return the best validated batched schedule with every method's result and every proven lower
    bound of its batch makespan ``C`` (certified throughput ``L / bound``). ``options.time_limit`` is the
    whole run's wall clock; ``board`` hears every improved schedule and every finished bound (of ``C``)."""
    run = Run(Budget(options.time_limit), board if board is not None else Board(),
              lambda sched: validate(instance, sched), "batched schedule")
    op_splits(instance, options.batch)  # one-line UserError for a batch no device combination supports
    relaxed = bounds.load_lp(instance, options.batch, min(10.0, options.time_limit / 4)) if options.lp_bound else None
    run.add_bounds([bounds.critical_path_bound(instance, options.batch)] + ([relaxed.bound] if relaxed else []))
    context = Context(instance, options, run, lambda inst: _start(run, inst, options.batch, relaxed))
    # the list baselines share half the run at most (24 devices give each op a thousand splits: on
    # resnet50 bHEFT took 19 s of a 10 s run)
    baselines = run.budget.until(run.budget.deadline - options.time_limit / 2)
    run_methods(context, METHODS, chosen(METHODS, options.methods, HEURISTIC), baselines)
    searches = chosen(METHODS, options.methods, SEARCH) if context.start() is not None else []
    run_methods(context, METHODS, searches + chosen(METHODS, options.methods, EXACT), run.budget)
    return run.solution(instance, METHODS, "no method found a feasible batched schedule")


def _start(run: Run, inst: Instance, batch: int, relaxed):
    """SA and EA's start, and the exact methods' hint beside the schedules found: the best of the
    baselines run (bMET if none found one), plain data parallelism (one split for all ops) and the load
    LP's rounded optimum (on the benchmark's sd 2-channel stack its CPU computes 766 ms, bHEFT's 1102)."""
    fallback = None if run.found else heuristics.met(inst, batch, run.budget.share(1, 4)).schedule
    return run.best(fallback, heuristics.uniform(inst, batch).schedule, relaxed.rounded if relaxed else None)
