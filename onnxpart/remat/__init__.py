"""Rematerialization: fit a memory budget with the least recomputation (``onnxpart remat``).

Public entry: :func:`solve` (an :class:`~onnxpart.remat.model.Instance`, :class:`Options`, a board ->
:class:`Solution`) and :func:`certificate`. The methods, in :data:`REGISTRY`: ``moccasin`` (CP-SAT
retention intervals, :mod:`.moccasin`, warm-started by the greedy heuristic), ``checkmate`` (the Checkmate
MILP on HiGHS), ``checkmate-lp`` (its LP relaxation with two-phase rounding, :mod:`.checkmate`) and
``greedy`` (the eviction heuristic of :mod:`.heuristics`; no lower bound). Every sequence a method returns
is re-simulated by :mod:`.sequence`; one whose simulated peak is over the budget is never the answer.

``Options.time_limit`` is the whole run (:class:`onnxpart.strategy.Budget`): ``--order minmem``'s (and
``best``'s) exact search first (``order_time_limit``, at most :data:`ORDER_PART` of the run), then
``--budget min``'s phase 1 (weighed like one method), then the methods, each with an equal share of what
is left; ``--order best`` runs these last two steps once per order, each order with half of the time.

This module imports no solver: :data:`REGISTRY` is read when the command line starts, and each method
loads its solver when it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import Bounded, Certificate, LowerBound, instance_hash
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.strategy import Budget, Method, Registry, cores, run_methods
from onnxpart.units import format_bytes

if TYPE_CHECKING:
    from onnxpart.remat.model import Instance, MethodResult
    from onnxpart.remat.moccasin_model import Reached
    from onnxpart.remat.orders import OrderResult
    from onnxpart.remat.sequence import SequenceProfile

ORDERS = ("best", "fixed", "free", "minmem")
PRECEDENCES = ("literals", "reservoir")
ORDER_PART = 0.5  # the memory-minimizing order's exact search gets at most this part of the run
MODEL_NODES = 2000  # moccasin's and checkmate's models run up to this many nodes; above, the greedy answers
#: Checkmate's model has about 7·nodes² rows of about 280 bytes (a 1,000-op random DAG: 7.1 million rows,
#: 2 GB, built in 19 s on two loaded cores; 300 ops: 2.4 s): it runs up to this many nodes ...
CHECKMATE_NODES = 800
#: ... and where building it (these seconds per nodes²) fits in the method's share of the time.
CHECKMATE_BUILD = 2.5e-5
GREEDY_SEARCH = (0.25, 30.0)  # the greedy method searches this part of its share, at most this many seconds


@dataclass(frozen=True)
class Options:
    budget: tuple[str, float]  # ("fraction", 0.8), ("bytes", 25165824.0) or ("min", 0): the smallest that works
    methods: tuple[str, ...] = ("moccasin",)
    order: str = "best"  # best of fixed and minmem; fixed: the file's order (§2.3); minmem; free: §2.1
    max_copies: int = 2  # C_v
    time_limit: float = 60.0  # the whole run: the order, --budget min's phase 1 and every method
    order_time_limit: float = 10.0  # for --order minmem and best (at most ORDER_PART of time_limit)
    workers: int = 0  # 0 = one per core
    seed: int = 0
    include_params: bool = False  # the instance counts the parameters (recorded in the certificate)
    deterministic: bool = False
    precedence: str = "literals"

    def __post_init__(self) -> None:
        REGISTRY.parse(",".join(self.methods) or ",")
        if self.order not in ORDERS:
            raise UserError(f"unknown order {self.order!r}: use {', '.join(ORDERS)}")
        if self.precedence not in PRECEDENCES:
            raise UserError(f"unknown --precedence {self.precedence!r}: use {' or '.join(PRECEDENCES)}")
        if self.max_copies < 1:
            raise UserError("--max-recompute must be at least 1 (1 = no recomputation)")


@dataclass
class Solution(Bounded):
    instance: Instance  # in the input order the methods used
    budget: int  # bytes
    baseline: SequenceProfile  # the file's order, no recomputation: what --budget P% is relative to
    start: SequenceProfile  # the input order used, no recomputation
    options: Options
    results: list[MethodResult] = field(default_factory=list)
    order: OrderResult | None = None
    floor: tuple[int, str] = (0, "")  # restriction-free minimum budget and why
    budget_search: dict[str, Any] | None = None  # --budget min: what phase 1 found and proved
    lower_bounds: list[LowerBound] = field(default_factory=list)
    tried: list[dict[str, Any]] | None = None  # --order best: each order's outcome (:mod:`.best_order`)

    @property
    def best(self) -> MethodResult | None:
        """The feasible result with the least duration (ties: the method listed first)."""
        feasible = [r for r in self.results if r.feasible]
        return min(feasible, key=lambda r: r.profile.duration) if feasible else None

    @property
    def value(self) -> float:
        return self.best.profile.duration if self.best is not None else math.inf


@dataclass(frozen=True)
class Fit:
    """What every method runs on: the instance in the order used, the budget in bytes, and ``--budget
    min``'s phase-1 solution (moccasin's start; None otherwise)."""

    instance: Instance
    budget: int
    reached: Reached | None = None


def solve(problem: Instance, options: Options, board: Board | None = None, seconds: float | None = None) -> Solution:
    """Check the budget against the restriction-free floor and run the methods within ``seconds`` in all
    (default ``options.time_limit``; the command passes what its ``--time-limit`` left after loading;
    ``options.deterministic`` keeps ``options.time_limit``, so its shares do not depend on loading; module
    doc) — in the order ``options.order`` names, or with ``--order best`` in the better of two
    (:func:`.best_order.best_of_orders`). ``board`` receives the solvers' progress records (phase 1 in bytes, phase 2
    and Checkmate in durations), every method's bounds and every feasible sequence's duration. Raises
    :class:`InfeasibleError` when no method meets the budget (the message says what is proven); the
    partial :class:`Solution` is attached as ``exc.solution``."""
    if not problem.n_ops:
        raise UserError("the graph has no ops")
    board = board if board is not None else Board()
    total = options.time_limit if seconds is None or options.deterministic else seconds
    budget = Budget(total, ledger=options.deterministic)
    options = replace(options, workers=cores(options.workers))
    found = _minmem(problem, options, budget)
    if options.order == "best":
        from onnxpart.remat.best_order import best_of_orders

        return best_of_orders(problem, found, options, board, budget)
    return solve_in_order(problem, found, options, board, budget)


def solve_in_order(problem: Instance, found: OrderResult | None, options: Options, board: Board,
                    budget: Budget) -> Solution:
    """:func:`solve` in one order: the file's, or ``found``'s (``--order minmem``)."""
    from onnxpart.remat.sequence import baseline, simulate

    base = baseline(problem)
    instance = problem if found is None else problem.with_order(found.order)
    start = base if found is None else simulate(instance, instance.op_order())
    solution = Solution(instance, 0, base, start, options, order=found, floor=problem.min_budget())
    methods = REGISTRY.select(options.methods)
    fit = _budget(solution, options, budget, sum(m.weight for m in methods))
    solution.lower_bounds = [LowerBound("no-recompute", solution.instance.base_duration, "bound", "formula", 0.0,
                                        "every op is computed at least once")]
    board.add(solution.lower_bounds[0])
    if solution.start.peak <= fit.budget:  # the input order fits: nothing to recompute, trivially optimal
        solution.results = [_checked(fit, board, _fits(fit.instance, m.name)) for m in methods]
    else:
        solution.results = run_methods(methods, fit, options, board, budget)
        _first_answer(solution, fit, board)
    solution.lower_bounds += [b for r in solution.results for b in bounds_of(r)]
    if solution.best is None:
        from onnxpart.remat.infeasible import infeasible_message

        error = InfeasibleError(infeasible_message(solution))
        error.solution = solution  # type: ignore[attr-defined]
        raise error
    return solution


def _first_answer(solution: Solution, fit: Fit, board: Board) -> None:
    """When no method found a sequence and none proved the budget impossible, greedy's first answer
    (:func:`.heuristics.first_answer`, bounded work whatever the clock) joins the results: running out of
    time is no proof of infeasibility (issue 30). Where it does not fit either, its result still says the
    least peak it reached, which the error message names (issue 40)."""
    from onnxpart.remat.heuristics import first_answer

    if solution.best is not None or any(r.status == "infeasible" for r in solution.results):
        return
    found = _checked(fit, board, first_answer(fit.instance, fit.budget, solution.options.max_copies))
    solution.results.append(found)
    if found.feasible:
        board.offer(found.value, found.method)


def _minmem(problem: Instance, options: Options, budget: Budget) -> OrderResult | None:
    """``--order minmem`` and ``best``: the memory-minimizing order (its exact search within
    ``order_time_limit``, at most :data:`ORDER_PART` of the run); None for the other orders."""
    if options.order not in ("minmem", "best"):
        return None
    from onnxpart.remat.orders import minmem_order

    seconds = budget.take(min(options.order_time_limit, budget.part(ORDER_PART)))
    return minmem_order(problem, seconds, options.workers, options.seed)


def _budget(solution: Solution, options: Options, budget: Budget, later: float) -> Fit:
    """The budget in bytes — ``--budget min``: the smallest peak Moccasin's phase 1 reaches (weighed like
    one method against the ``later`` weights of the methods), or above its size the greedy's — checked
    against the restriction-free floor."""
    instance, floor = solution.instance, solution.floor
    reached = None
    if options.budget[0] == "min" and instance.n_nodes > MODEL_NODES:
        solution.budget_search = heuristic_budget(instance, floor[0], options, budget.share(1.0, later))
        solution.budget = solution.budget_search["budget_bytes"]
    elif options.budget[0] == "min":  # on the order the methods use, so phase 2 can start from what it found
        solution.budget_search, reached = smallest_budget(instance, floor[0], options, budget.share(1.0, later))
        solution.budget = solution.budget_search["budget_bytes"]
    else:
        from onnxpart.remat.model import resolve_budget

        solution.budget = resolve_budget(*options.budget, solution.baseline.peak)
    if solution.budget < floor[0]:
        raise InfeasibleError(f"budget {solution.budget:,} B is below {floor[0]:,} B ({format_bytes(floor[0])}), "
                              f"which every sequence needs: {floor[1]} (proven, no restriction); rerun with "
                              f"--budget {floor[0]} or more, or --budget min to find the smallest that works")
    return Fit(instance, solution.budget, reached)


def smallest_budget(instance: Instance, floor: int, options: Options,
                    seconds: float) -> tuple[dict[str, Any], Reached | None]:
    """``--budget min``: the smallest peak any sequence reaches under the restriction (Moccasin phase 1,
    Eq. 12–13, for ``seconds``), what is proven about it, and the solution that reaches it (phase 2's start:
    None when the input order already fits the floor). ``status`` is ``optimal`` when the budget is proven
    the smallest under the restriction (the restriction-free floor, or CP-SAT's bound), ``time_limit`` when
    phase 1 stopped on its time limit above its proven bound."""
    from onnxpart.remat.moccasin import smallest_peak
    from onnxpart.remat.sequence import simulate

    if simulate(instance, instance.op_order()).peak <= floor:
        return {"budget_bytes": floor, "proven_min_bytes": floor, "status": "optimal"}, None
    reached = smallest_peak(instance, floor, _moccasin_options(options, seconds, lp_bound=False))
    budget = max(floor, int(math.ceil(reached.peak - 1e-9)))
    proven = max(floor, int(math.ceil(reached.proven - 1e-9)) if reached.proven is not None else floor)
    status = "optimal" if reached.optimal or proven >= budget else "time_limit"
    return {"budget_bytes": budget, "proven_min_bytes": min(proven, budget), "status": status}, reached


def heuristic_budget(instance: Instance, floor: int, options: Options, seconds: float) -> dict[str, Any]:
    """``--budget min`` above :data:`MODEL_NODES` nodes, where Moccasin's phase 1 is skipped: the least
    budget the greedy's first answer reaches in ``seconds`` (:func:`.heuristics.smallest_reached`), proven
    only down to the restriction-free ``floor`` (status ``heuristic``), unless it is the floor itself."""
    import time

    from onnxpart.remat.heuristics import smallest_reached

    reached = smallest_reached(instance, floor, options.max_copies, time.perf_counter() + seconds)
    return {"budget_bytes": reached, "proven_min_bytes": floor, "status": "optimal" if reached <= floor else "heuristic"}


def _moccasin_options(options: Options, seconds: float, **more: Any):
    """Moccasin's own options for a run of ``seconds`` (``more``: its other fields)."""
    from onnxpart.remat.moccasin_model import MoccasinOptions

    return MoccasinOptions(max_copies=options.max_copies, order="free" if options.order == "free" else "fixed",
                           time_limit=seconds, workers=options.workers, seed=options.seed,
                           deterministic=options.deterministic, precedence=options.precedence, **more)


# ------------------------------------------------------------------------------------ the methods
def _moccasin(fit: Fit, options: Options, board: Board, seconds: float) -> MethodResult:
    from onnxpart.remat.moccasin import solve_moccasin

    why = _model_skipped("moccasin", fit.instance.n_nodes, seconds)
    if why is not None:
        return _checked(fit, board, _greedy_instead("moccasin", fit, options, seconds, why))
    moccasin = _moccasin_options(options, seconds, start=fit.reached)
    return _checked(fit, board, solve_moccasin(fit.instance, fit.budget, moccasin, board.on_progress))


def _checkmate(fit: Fit, options: Options, board: Board, seconds: float) -> MethodResult:
    from onnxpart.remat.checkmate import solve_checkmate

    why = _model_skipped("checkmate", fit.instance.n_nodes, seconds)
    if why is not None:
        return _checked(fit, board, _greedy_instead("checkmate", fit, options, seconds, why))
    return _checked(fit, board, solve_checkmate(fit.instance, fit.budget, seconds, seed=options.seed,
                                                progress=board.on_progress))


def _checkmate_lp(fit: Fit, options: Options, board: Board, seconds: float) -> MethodResult:
    from onnxpart.remat.checkmate import solve_checkmate_lp

    why = _model_skipped("checkmate-lp", fit.instance.n_nodes, seconds)
    if why is not None:
        return _checked(fit, board, _greedy_instead("checkmate-lp", fit, options, seconds, why))
    return _checked(fit, board, solve_checkmate_lp(fit.instance, fit.budget, seconds, seed=options.seed))


def _greedy(fit: Fit, options: Options, board: Board, seconds: float) -> MethodResult:
    return _checked(fit, board, _greedy_sequence(fit, options, seconds))


def _greedy_sequence(fit: Fit, options: Options, seconds: float) -> MethodResult:
    from onnxpart.remat.heuristics import solve_greedy

    part, most = GREEDY_SEARCH
    return solve_greedy(fit.instance, fit.budget, options.max_copies, min(most, part * seconds), seconds)


def _model_skipped(method: str, nodes: int, seconds: float) -> str | None:
    """Why ``method``'s model is not built on ``nodes`` nodes in ``seconds``, or None. Moccasin's grid of
    start times and Checkmate's retention matrix grow with the square of the nodes: above
    :data:`MODEL_NODES` neither fits in memory or time; Checkmate's not above :data:`CHECKMATE_NODES`, nor
    where building it would take longer than its share (:data:`CHECKMATE_BUILD`; a 2,000-node model is
    about 8 GB, whatever the time limit). A rule on sizes and the seconds given, never on how fast anything
    ran, so one limit skips the same methods on any machine."""
    if nodes > MODEL_NODES:
        return f"{method}'s model skipped: {nodes} nodes > {MODEL_NODES} (it grows as nodes²)"
    if method == "moccasin":
        return None
    if nodes > CHECKMATE_NODES:
        return f"{method}'s model skipped: {nodes} nodes > {CHECKMATE_NODES} (about 7·nodes² rows, 2 GB at 1,000)"
    build = CHECKMATE_BUILD * nodes ** 2
    if build > seconds:
        return (f"{method}'s model skipped: building it on {nodes} nodes takes about {build:.3g} s, more than "
                f"its {seconds:.3g} s (a longer --time-limit lets it run)")
    return None


def _greedy_instead(method: str, fit: Fit, options: Options, seconds: float, why: str) -> MethodResult:
    """The greedy heuristic answers in place of a method whose model was skipped (:func:`_model_skipped`);
    the result's notes say so and why."""
    result = _greedy_sequence(fit, options, seconds)
    return replace(result, method=method, notes={**(result.notes or {}), "skipped": why})


REGISTRY = Registry(
    Method("moccasin", "exact", _moccasin, help="CP-SAT retention intervals (Moccasin), from the greedy sequence"),
    Method("checkmate", "exact", _checkmate, help="the Checkmate MILP on HiGHS"),
    Method("checkmate-lp", "bound", _checkmate_lp,
           help="Checkmate's LP relaxation, rounded (the rounded sequence may exceed the budget)"),
    Method("greedy", "heuristic", _greedy, help="the eviction heuristic with a local search (no bound)"),
)


def _fits(instance: Instance, method: str) -> MethodResult:
    """A method's result when the input order already fits the budget: that order, proven optimal."""
    from onnxpart.remat.model import MethodResult

    return MethodResult(method=method, status="optimal", sequence=instance.op_order(), bound=instance.base_duration,
                        bound_status="optimal", time_to_best=0.0, solver="none",
                        restriction="none (the input order fits without recomputation)")


def _checked(fit: Fit, board: Board, result: MethodResult) -> MethodResult:
    """``result`` with its sequence re-simulated (``profile``) and, when it fits the budget, its duration as
    ``value``; its bounds go onto ``board``. Only checkmate-lp's rounding may exceed the budget
    (``over_budget``); any other method doing so is a bug."""
    from onnxpart.remat.sequence import simulate

    if result.sequence is not None:
        result.profile = simulate(fit.instance, result.sequence)
        if result.profile.peak > fit.budget:
            if result.method != "checkmate-lp":
                raise AssertionError(f"{result.method} returned a sequence with simulated peak "
                                     f"{result.profile.peak} over the budget {fit.budget}")
            result.status = "over_budget"
        else:
            result.value = result.profile.duration
    for bound in bounds_of(result):
        board.add(bound)
    return result


def bounds_of(result: MethodResult) -> list[LowerBound]:
    """The certificate entries of one method's result: its proven bound (status ``error`` when it proved
    none) and its further bounds; a heuristic proves nothing."""
    if result.solver == "greedy":
        return []
    status = result.bound_status if result.bound is not None else "error"
    return [LowerBound(result.method, result.bound, status, result.solver, round(result.seconds, 3),
                       f"holds under: {result.restriction}"), *result.extra_bounds]


# ------------------------------------------------------------------------------------ reports
def certificate(solution: Solution, source_sha256: str | None = None) -> Certificate:
    """One certificate for the chosen sequence: duration as the upper bound, every bound :func:`solve` proved."""
    inst, best = solution.instance, solution.best
    assert best is not None and best.profile is not None
    digest = instance_hash(source_sha256 or inst.name, inst.durations, inst.value_sizes, inst.order,
                           solution.budget, inst.constant_bytes)
    lower = solution.best_lower_bound if solution.best_lower_bound is not None else inst.base_duration
    return Certificate(
        problem="remat",
        instance_sha256=digest,
        objective="total duration of the sequence (sum of op work over compute events)",
        upper_bound=best.profile.duration,
        lower_bounds=list(solution.lower_bounds),
        details={
            "budget_bytes": solution.budget,
            "baseline_peak_bytes": solution.baseline.peak,
            "input_order_peak_bytes": solution.start.peak,
            "peak_bytes": best.profile.peak,
            "base_duration": inst.base_duration,
            "tdi": tdi_of(inst, best.profile.duration),
            "tdi_lower_bound": tdi_of(inst, lower),
            "recomputations": best.profile.recomputations,
            "method": best.method,
            "status": best.status,
            "order": solution.options.order,
            **({"orders_tried": solution.tried} if solution.tried is not None else {}),
            "restriction": best.restriction,
            "gap_note": "each lower bound holds under its own restriction (see its note); the best one "
                        "bounds every sequence that satisfies all of them",
            "include_params": solution.options.include_params,
            # the stages' order when it is not the file's (minmem, free): what --check-certificate hashes
            **({"instance_order": list(inst.order)} if solution.options.order != "fixed" else {}),
        },
    )


def tdi_of(inst: Instance, duration: float | None) -> float | None:
    """The total duration increase of ``duration`` over computing every op once."""
    if duration is None:
        return None
    return (duration - inst.base_duration) / inst.base_duration if inst.base_duration else 0.0


def summary(solution: Solution) -> dict[str, Any]:
    """Plain data for ``--json`` and the compare table."""
    inst, best = solution.instance, solution.best
    return {
        "budget_bytes": solution.budget,
        "baseline_peak_bytes": solution.baseline.peak,
        "input_order_peak_bytes": solution.start.peak,
        "min_budget_bytes": solution.floor[0],
        "budget_search": solution.budget_search,
        "order": solution.options.order,
        "orders_tried": solution.tried,
        "minmem": None if solution.order is None else {
            "peak_bytes": solution.order.peak, "lower_bound": solution.order.lower_bound,
            "status": solution.order.status, "method": solution.order.method},
        "base_duration": inst.base_duration,
        "best": None if best is None else best.method,
        "methods": [_row(inst, r) for r in solution.results],
    }


def _row(inst: Instance, r: MethodResult) -> dict[str, Any]:
    """One method's ``--compare`` row."""
    p = r.profile
    return {
        "method": r.method, "status": r.status, "feasible": r.feasible,
        "peak_bytes": p.peak if p else None, "duration": p.duration if p else None,
        "tdi": p.tdi if p else None, "tdi_lower_bound": tdi_of(inst, r.best_bound) if inst.base_duration else None,
        "lower_bound": r.bound, "lower_bound_status": r.bound_status,
        "extra_bounds": [{"method": b.method, "value": b.value, "status": b.status, "seconds": b.seconds}
                         for b in r.extra_bounds], "recomputations": p.recomputations if p else None,
        "seconds": r.seconds, "time_to_best": r.time_to_best, "restriction": r.restriction,
        "notes": r.notes or {},
    }
