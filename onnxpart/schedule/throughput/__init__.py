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

from time import monotonic as now

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.methods import CONSTRUCTIVE, Context, Run, registry, selected, within_size
from onnxpart.schedule.common.solution import Solution
from onnxpart.schedule.latency.scale import skip_reason
# check, emit, pieces: the answer as files, and re-checked (the command reads them from here). exact and split
# load CP-SAT, whose import takes 0.3-1.5 s: their methods import them when they run, so a run that solves
# nothing by CP-SAT never loads it.
from onnxpart.schedule.throughput import bounds, check, emit, heuristics, pieces
from onnxpart.schedule.throughput.model import check_memory_floor, op_splits
from onnxpart.schedule.throughput.simulator import validate
from onnxpart.strategy import Budget, MethodResult, Registry, run_methods


__all__ = ["METHODS", "DEFAULT_METHODS", "solve", "check", "emit", "pieces"]

#: What runs without ``--method``: the batched baselines, SA and EA from the best of them, then the CP-SAT
#: batch model. SPLIT is left out: it proves no bound here, and beside these it only took time (on the
#: RWNN stacks at B = 128, 60 s: LB/UB 0.707 -> 0.704 on 1-ch, 0.885 -> 0.878 on sd 2-ch with it).
DEFAULT_METHODS = ("met", "greedy", "heft", "cpop", "sa", "ea", "cpsat")


#: The solver behind each method that proves a bound: a skipped one lists that bound as skipped too.
SOLVERS = {"exact": "cp-sat", "cpsat": "cp-sat", "milp": "cp-sat"}


def _too_big(name: str, context: Context, seconds: float) -> str | None:
    """Why ``name`` is not run (:func:`..latency.scale.skip_reason`; ``milp`` is the CP-SAT batch model here,
    and has its rule): the graph too big for it in the seconds it gets — a list baseline its own share
    (they have half the run between them, and 20,000 ops take bGreedy 2.3 s), the others, as for latency,
    the run's time limit (SA and EA stop at their share; the exact model's building too)."""
    limit = seconds if name in CONSTRUCTIVE else context.options.time_limit
    return skip_reason("cpsat" if name == "milp" else name, context.instance.n, limit)


def _sized(run):
    """``run`` within the size rule :func:`_too_big`; MET, the first answer, is never wrapped."""
    return within_size(run, _too_big, SOLVERS)


def _constructive(name: str, context: Context, seconds: float) -> MethodResult:
    inst, batch = context.instance, context.options.batch
    res = heuristics.met(inst, batch) if name == "met" else BASELINES[name](inst, batch, seconds)
    status = "time_limit" if res.timed_out else "ok" if res.schedule else "failed"
    return context.run.keep(name, res.schedule, status, res.seconds)


def _search(name: str, context: Context, seconds: float) -> MethodResult:
    """SA or EA from the best start (:func:`_start`). Where the graph is too big for it in its time
    (:func:`_too_big`) it takes no step and keeps its start, which any run of it returns at worst: on a
    20,000-op transformer stack that is plain data parallelism, 0.102 s against bMET's 0.168 (whose 6,060
    pieces take minutes to write)."""
    t0 = now()
    start = context.start()
    if start is None:
        return context.run.keep(name, None, "failed", now() - t0, note="no feasible start")
    why = _too_big(name, context, seconds)
    if why is not None:
        return context.run.keep(name, start, "skipped", now() - t0, note=f"{why}; its start kept")
    run = heuristics.simulated_annealing if name == "sa" else heuristics.one_plus_one_ea
    res = run(context.instance, context.options.batch, start.splits, iterations=context.options.iterations,
              seed=context.options.seed, time_limit=seconds)
    return context.run.keep(name, res.schedule, "ok", res.seconds, note=f"{res.evaluations} evaluations")


def _solver(name: str, context: Context, seconds: float) -> MethodResult:
    """The CP-SAT batch model from the best schedule so far (``exact``, ``milp`` and ``cpsat``)."""
    from onnxpart.schedule.throughput import exact

    inst, options, run = context.instance, context.options, context.run
    res = exact.cpsat(inst, options.batch, seconds, run.best(context.start()), seed=options.seed,
                      workers=options.workers)
    run.add_bounds([LowerBound(name, res.bound, res.status, res.solver, res.seconds, res.note)])
    return run.keep(name, res.schedule, res.status, res.seconds, res.bound, res.note)


def _split(name: str, context: Context, seconds: float) -> MethodResult:
    """SPLIT: the modules whole-batch in sequence, warm-started from the best schedule so far."""
    from onnxpart.schedule.throughput import split

    options, run = context.options, context.run
    sched, status, secs, note = split.split_throughput(context.instance, options.batch, seconds, options.seed,
                                                       options.workers, run.best(context.start()))
    return run.keep(name, sched, status, secs, note=note)


#: The list baselines, each within its share of the time; bMET, the first answer, has no limit.
BASELINES = {"greedy": heuristics.greedy, "heft": heuristics.heft, "cpop": heuristics.cpop,
             "lagrange": heuristics.lagrange}

#: Every throughput method (:data:`onnxpart.schedule.common.methods.CATALOGUE`), run by its function here,
#: all but bMET within the size rule (:func:`_too_big`; SA and EA apply it themselves); each weighs the same
#: (the baselines share a phase of their own: :func:`solve`).
METHODS: Registry = registry(dict(met=_constructive, greedy=_sized(_constructive), heft=_sized(_constructive),
                                  cpop=_sized(_constructive), lagrange=_sized(_constructive), sa=_search, ea=_search,
                                  exact=_sized(_solver), milp=_sized(_solver),
                                  cpsat=_sized(_solver), split=_sized(_split)), {})


def solve(instance: Instance, options, board: Board | None = None) -> Solution:
    """Run ``options.methods`` (:class:`onnxpart.schedule.Options`) on a batch of ``options.batch`` inputs
    and return the best validated batched schedule with every method's result and every proven lower
    bound of its batch makespan ``C`` (certified throughput ``L / bound``). ``options.time_limit`` is the
    whole run's wall clock; ``board`` hears every improved schedule and every finished bound (of ``C``)."""
    run = Run(Budget(options.time_limit), board if board is not None else Board(),
              lambda sched: validate(instance, sched), "batched schedule")
    op_splits(instance, options.batch)  # one-line UserError for a batch no device combination supports
    check_memory_floor(instance, options.batch)  # exit 4 at once where no split of the batch fits (3.7)
    relaxed = bounds.load_lp(instance, options.batch, min(10.0, options.time_limit / 4)) if options.lp_bound else None
    run.add_bounds([bounds.critical_path_bound(instance, options.batch)] + ([relaxed.bound] if relaxed else []))
    context = Context(instance, options, run, lambda inst: _start(run, inst, options.batch, relaxed))
    # the list baselines share half the run at most (24 devices give each op a thousand splits: on
    # resnet50 bHEFT took 19 s of a 10 s run)
    chosen = selected(METHODS, options.methods)
    baselines = Budget(max(0.0, run.budget.left() - options.time_limit / 2))
    run_methods([m for m in chosen if m.name in CONSTRUCTIVE], context, options, run.board, baselines)
    run_methods([m for m in chosen if m.name not in CONSTRUCTIVE], context, options, run.board, run.budget)
    return run.solution(instance, METHODS.names, "no method found a feasible batched schedule",
                        lambda: heuristics.met(instance, options.batch))


def _start(run: Run, inst: Instance, batch: int, relaxed):
    """SA and EA's start, and the exact methods' hint beside the schedules found: the best of the
    baselines run (bMET if none found one), plain data parallelism (one split for all ops) and the load
    LP's rounded optimum (on the benchmark's sd 2-channel stack its CPU computes 766 ms, bHEFT's 1102)."""
    fallback = None if run.found else heuristics.met(inst, batch).schedule
    return run.best(fallback, heuristics.uniform(inst, batch).schedule, relaxed.rounded if relaxed else None)
