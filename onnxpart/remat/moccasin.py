"""Moccasin: rematerialization as retention intervals in CP-SAT (Bartan et al., "Moccasin: Efficient
Tensor Rematerialization for Neural Networks", ICML 2023, §2.1–2.4), run in its two phases (§2.4): phase 1
minimizes the peak ``max(M_var, M)`` (Eq. 12–13) from the greedy warm start (or the trivial no-recompute
solution), phase 2 the recomputed duration (Eq. 1) within the budget, warm-started from phase 1. The
formulation is :mod:`onnxpart.remat.moccasin_model`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from onnxpart.board import Progress as ProgressRecord
from onnxpart.remat.background import MAX_NODES, BackgroundLpBound
from onnxpart.remat.bounds import event_cover_entry
from onnxpart.remat.heuristics import greedy_sequence
from onnxpart.remat.model import Instance, MethodResult, Scale, scale
from onnxpart.remat.moccasin_model import (MoccasinOptions, Reached, Vars, build, greedy_times, grid, hint,
                                           read_solution, restriction, sequence_of, times_of)
from onnxpart.remat.sequence import baseline
from onnxpart.solvers import SolveResult, solve_cpsat

log = logging.getLogger(__name__)

#: CP-SAT's presolve loops spend seconds of wall time on the large time domains of the stage grid
#: (G2, n = 250: 18 s before the search starts); one loop without probing keeps what matters.
_PRESOLVE = {"max_presolve_iterations": 1, "cp_model_probing_level": 0}

#: the greedy warm start searches this part of moccasin's time limit, at most this many seconds
WARM_START = (0.5, 30.0)

#: progress(record): record.phase is "phase1" (upper/lower in bytes) or "phase2" (duration).
Progress = Callable[[ProgressRecord], None]


@dataclass
class _Run:
    """One call of :func:`solve_moccasin`: what its warm start and both phases share."""

    instance: Instance
    budget: float
    options: MoccasinOptions
    progress: Progress | None
    sc: Scale
    capacity: int  # the budget in memory units (less the constant bytes)
    horizon: int
    params: dict  # CP-SAT's parameters (:func:`_parameters`)
    wall: float  # seconds for both phases together
    start: float  # time.perf_counter() at the start
    notes: dict
    lp: BackgroundLpBound | None = None  # the Checkmate LP relaxation, a second proven bound for the fixed order

    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        """Seconds left for the next phase (at least half a second)."""
        return max(self.wall - (time.perf_counter() - self.start), 0.5)

    def to_bytes(self, units: float) -> float:
        """Memory units -> bytes (the constant bytes included)."""
        return units * self.sc.memory_unit + self.instance.constant_bytes

    def to_duration(self, q: float) -> float:
        """Phase 2's objective (quanta of recomputed duration) -> the sequence's duration."""
        return self.instance.base_duration + q * self.sc.quantum


def solve_moccasin(instance: Instance, budget: float, options: MoccasinOptions,
                   progress: Progress | None = None) -> MethodResult:
    """Both phases (§2.4). Returns the best sequence found, or none with the phase-1 evidence in
    ``notes`` (``reachable_budget``: the smallest peak found; ``proven_min_budget``: CP-SAT's bound on it).
    Where the greedy warm start does not fit the budget, ``options.start`` (a solution that does) stands in
    for phase 1."""
    run, base_units = _new_run(instance, budget, options, progress)
    times, active, hint_units, fits = _warm_start(run, base_units)
    if fits is None and options.start is not None:
        fits = (options.start.times, set(options.start.active))
    if fits is not None:
        times, active = fits
    elif hint_units > run.capacity:  # phase 1 (Eq. 12–13): reach the budget from the warm start
        result, solver, variables = _phase1(run, times, active, hint_units)
        if result.objective is None or result.objective > run.capacity + 1e-9:
            return _unreached(run, result, hint_units)
        times, active = read_solution(solver, variables)
    log.info("moccasin phase 1 done in %.1f s", run.elapsed())
    return _phase2(run, times, active, fits)


def smallest_peak(instance: Instance, floor: float, options: MoccasinOptions) -> Reached:
    """Phase 1 alone (Eq. 12–13), from the greedy warm start down towards ``floor`` bytes: the smallest
    peak it reaches within the time limit, with the solution that reaches it (``--budget min``)."""
    run, base_units = _new_run(instance, floor, options, None)
    times, active, units, _ = _warm_start(run, base_units)
    proven = None
    if units > run.capacity:
        result, solver, variables = _phase1(run, times, active, units)
        if result.has_solution and result.objective < units:
            times, active = read_solution(solver, variables)
            units = int(round(result.objective))
        proven = run.notes["phase1"]["bound"]
    peak = run.to_bytes(units)
    return Reached(peak, proven, units <= run.capacity or (proven is not None and proven >= peak - 1e-9),
                   times, frozenset(active))


def _new_run(instance: Instance, budget: float, options: MoccasinOptions,
             progress: Progress | None) -> tuple[_Run, int]:
    """The state one call shares (with the LP bound started where it helps), and the no-recompute peak
    in memory units."""
    sc = scale(instance)
    capacity = sc.budget_units(budget, instance.constant_bytes)
    base = baseline(instance)
    base_units = int(round((base.peak - instance.constant_bytes) / sc.memory_unit))
    _, horizon, _ = grid(instance, options)
    params, wall = _parameters(options)
    notes: dict = {"memory_unit": sc.memory_unit, "duration_quantum": sc.quantum, "capacity_units": capacity}
    run = _Run(instance, budget, options, progress, sc, capacity, horizon, params, wall, time.perf_counter(),
               notes)
    if options.lp_bound and options.order == "fixed" and base_units > capacity and instance.n_nodes <= MAX_NODES:
        run.lp = BackgroundLpBound(instance, budget, 0.95 * wall, options.seed, delay=min(3.0, 0.1 * wall))
    return run, base_units


def _parameters(options: MoccasinOptions) -> tuple[dict, float]:
    """CP-SAT's parameters for both phases, and the wall-clock seconds they share (three times the
    deterministic time limit in a deterministic run)."""
    wall = options.time_limit
    params: dict = dict(_PRESOLVE)
    if options.workers >= 2:
        # Half of the workers run CP-SAT's full search (it proves the optimum on G1 and on G2 at 90%), the
        # others large-neighbourhood search from the incumbent: CP-SAT's default gives both of two workers
        # to full search, and only LNS improves the greedy warm start on G2 at 80% (+6.42% → +5.71%).
        params["num_full_subsolvers"] = options.workers // 2
    if options.deterministic:
        params.update(interleave_search=True, max_deterministic_time=float(options.time_limit))
        wall = 3 * options.time_limit
    return params, wall


def _warm_start(run: _Run, base_units: int) -> tuple[dict, set, int, tuple[dict, set] | None]:
    """The hint of the first phase that runs: the greedy eviction heuristic (:mod:`.heuristics`) on the
    same stages and C_v when the no-recompute sequence is over the budget. Returns the hint's start times,
    present copies and peak in units (the smaller of the greedy and the no-recompute peaks), and the
    greedy sequence's times and copies if it fits the budget (phase 1 is then skipped), else None."""
    instance, options = run.instance, run.options
    no_recompute = [(v, 0) for v in instance.order]
    times, active = times_of(instance, options, no_recompute), set(no_recompute)
    hint_units = base_units
    greedy = None
    if base_units > run.capacity:
        part, most = WARM_START
        seconds = min(most, part * options.time_limit)
        found = greedy_sequence(instance, run.budget, options.max_copies, seconds, seconds)
        if found is not None:
            events, profile = found
            units = int(round((profile.peak - instance.constant_bytes) / run.sc.memory_unit))
            run.notes["greedy"] = {"peak": profile.peak, "tdi": profile.tdi, "seconds": run.elapsed()}
            if units < hint_units:
                times, active = greedy_times(instance, options, events)
                hint_units = units
            if units <= run.capacity:
                greedy = (times, active)
                log.info("moccasin: greedy warm start fits (TDI %+.2f%%); phase 1 skipped", 100 * profile.tdi)
    return times, active, hint_units, greedy


def _phase1(run: _Run, times: dict, active: set, hint_units: int
            ) -> tuple[SolveResult, cp_model.CpSolver, Vars]:
    """Phase 1 (Eq. 12–13): reach the budget from the warm start (``M_var`` in ``[capacity,
    hint_units]``); its status, seconds, peak and bound go to ``run.notes["phase1"]``."""
    model, variables = build(run.instance, run.sc, run.options, None, run.capacity, hint_units)
    hint(model, run.instance, variables, times, active, run.horizon)
    model.add_hint(variables.peak, hint_units)
    progress, to_bytes = run.progress, run.to_bytes
    report = (lambda t, obj, bound: progress(ProgressRecord(t, to_bytes(obj), to_bytes(bound), "phase1"))
              if progress else None)
    result, solver = solve_cpsat(model, run.remaining(), workers=run.options.workers, seed=run.options.seed,
                                 hint_callback=report, parameters=run.params)
    run.notes["phase1"] = {"status": result.status, "seconds": result.seconds,
                           "peak": None if result.objective is None else to_bytes(result.objective),
                           "bound": to_bytes(result.bound) if result.bound > -1e300 else None}
    return result, solver, variables


def _unreached(run: _Run, result: SolveResult, hint_units: int) -> MethodResult:
    """Phase 1 did not reach the budget: no sequence; ``infeasible`` if CP-SAT proved the budget too small,
    with the smallest peak found and the proven bound in the notes."""
    capacity = run.capacity
    proven = result.bound > capacity + 1e-9
    reached = hint_units if result.objective is None else min(hint_units, result.objective)
    run.notes["reachable_budget"] = run.to_bytes(reached)
    run.notes["proven_min_budget"] = run.to_bytes(result.bound) if result.bound > capacity else None
    if run.lp is not None:
        run.lp.cancel()
    return MethodResult(method="moccasin", status="infeasible" if proven else "no_solution", sequence=None,
                        bound=None, bound_status="none", seconds=run.elapsed(), time_to_best=None,
                        restriction=restriction(run.options), solver="cp-sat", notes=run.notes)


def _phase2(run: _Run, times: dict, active: set, fits: tuple[dict, set] | None) -> MethodResult:
    """Phase 2 (Eq. 1–10): least recomputed duration within the budget, warm-started from ``times`` and
    ``active`` (phase 1's solution, or ``fits``: a solution known to fit — the greedy sequence or
    ``--budget min``'s — which is the fallback if CP-SAT finds nothing), with CP-SAT's bound, the
    event-cover bound (fixed order) and the LP's."""
    instance, options, notes = run.instance, run.options, run.notes
    best_at = [run.elapsed()]
    offset = best_at[0]

    def report2(t: float, obj: float, bound: float) -> None:
        best_at[0] = offset + t
        if run.progress:
            run.progress(ProgressRecord(offset + t, run.to_duration(obj), run.to_duration(bound), "phase2"))

    model, variables = build(instance, run.sc, options, run.capacity, 0, 0)
    hint(model, instance, variables, times, active, run.horizon)
    result, solver = solve_cpsat(model, run.remaining(), workers=options.workers, seed=options.seed,
                                 hint_callback=report2, parameters=run.params)
    if result.has_solution:
        times, active = read_solution(solver, variables)
    elif fits is not None:  # CP-SAT found nothing in time: the warm start that fits, with CP-SAT's bound
        times, active = fits
        notes["fallback"] = "warm start"
    bound = run.to_duration(max(result.bound, 0.0)) if result.bound > -1e300 else instance.base_duration
    notes["phase2"] = {"status": result.status, "seconds": result.seconds}
    status = "optimal" if result.status == "optimal" else "time_limit"
    extra = [event_cover_entry(instance, run.budget, options.max_copies)] if options.order == "fixed" else []
    if run.lp is not None and status == "optimal":
        run.lp.cancel()  # CP-SAT proved the optimum: the LP cannot add anything
    elif run.lp is not None:
        extra.append(run.lp.result(run.wall - run.elapsed()))
    return MethodResult(method="moccasin", status=status, sequence=sequence_of(instance, times, active), bound=bound,
                        bound_status=result.status if result.status in ("optimal", "time_limit") else "none",
                        seconds=run.elapsed(), time_to_best=best_at[0], restriction=restriction(options),
                        solver="cp-sat", notes=notes, extra_bounds=extra)
