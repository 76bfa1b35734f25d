"""Rematerialization: fit a memory budget with the least recomputation (``onnxpart remat``).

Public entry: :func:`solve` (graph + options -> :class:`Solution`) and :func:`certificate`. Methods:
``moccasin`` (CP-SAT retention intervals, :mod:`.moccasin`, warm-started by the greedy heuristic),
``checkmate`` (the Checkmate MILP on HiGHS), ``checkmate-lp`` (its LP relaxation with two-phase rounding,
:mod:`.checkmate`) and ``greedy`` (the eviction heuristic of :mod:`.heuristics`; no lower bound). Every sequence a
method returns is re-simulated by :mod:`.sequence`; one whose simulated peak is over the budget is never
the answer.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

from onnxpart.board import Board
from onnxpart.certificate import Certificate, LowerBound, instance_hash
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.graph import OpGraph
from onnxpart.remat.model import Instance, MethodResult, build_instance, resolve_budget
from onnxpart.remat.moccasin import MoccasinOptions, Progress, Reached, smallest_peak, solve_moccasin
from onnxpart.remat.orders import OrderResult, minmem_order
from onnxpart.remat.sequence import SequenceProfile, baseline, simulate
from onnxpart.units import format_bytes

log = logging.getLogger(__name__)

METHODS = ("moccasin", "checkmate", "checkmate-lp", "greedy")
ORDERS = ("fixed", "free", "minmem")


@dataclass(frozen=True)
class RematOptions:
    budget: tuple[str, float]  # ("fraction", 0.8), ("bytes", 25165824.0) or ("min", 0): the smallest that works
    methods: tuple[str, ...] = ("moccasin",)
    order: str = "fixed"  # fixed: the file's order (§2.3); minmem: the memory-minimizing order; free: §2.1
    max_copies: int = 2  # C_v
    time_limit: float = 60.0  # per method
    order_time_limit: float = 10.0  # for --order minmem
    workers: int = 2
    seed: int = 0
    include_params: bool = False
    deterministic: bool = False
    precedence: str = "literals"


@dataclass
class Outcome:
    """One method's result and the simulation of its sequence."""

    result: MethodResult
    profile: SequenceProfile | None

    @property
    def feasible(self) -> bool:
        return self.profile is not None and self.result.status not in ("over_budget",)


@dataclass
class Solution:
    instance: Instance  # in the input order the methods used
    budget: int  # bytes
    baseline: SequenceProfile  # the file's order, no recomputation: what --budget P% is relative to
    start: SequenceProfile  # the input order used, no recomputation
    options: RematOptions
    outcomes: list[Outcome] = field(default_factory=list)
    order: OrderResult | None = None
    floor: tuple[int, str] = (0, "")  # restriction-free minimum budget and why
    budget_search: dict[str, Any] | None = None  # --budget min: what phase 1 found and proved

    @property
    def best(self) -> Outcome | None:
        """The feasible outcome with the least duration (ties: the method listed first)."""
        feasible = [o for o in self.outcomes if o.feasible]
        return min(feasible, key=lambda o: o.profile.duration) if feasible else None


def solve(graph: OpGraph, options: RematOptions, board: Board | None = None) -> Solution:
    """Build the instance, check the budget against the restriction-free floor, run every method.

    ``board`` (:mod:`onnxpart.board`) receives the solvers' progress records (phase 1 in bytes, phase 2
    and Checkmate in durations). Raises :class:`InfeasibleError` when no method meets the budget (the
    message says what is proven); the partial :class:`Solution` is attached as ``exc.solution``.
    """
    progress = board.on_progress if board is not None else None
    for method in options.methods:
        if method not in METHODS:
            raise UserError(f"unknown method {method!r}: use {', '.join(METHODS)}")
    if options.order not in ORDERS:
        raise UserError(f"unknown order {options.order!r}: use {', '.join(ORDERS)}")
    if options.max_copies < 1:
        raise UserError("--max-recompute must be at least 1 (1 = no recomputation)")
    if not graph.ops:
        raise UserError("the graph has no ops")
    instance = build_instance(graph, options.include_params)
    base = baseline(instance)
    floor = instance.min_budget()
    solution = Solution(instance, 0, base, base, options, floor=floor)
    if options.order == "minmem":
        solution.order = minmem_order(instance, options.order_time_limit, options.workers, options.seed)
        instance = instance.with_order(solution.order.order)
        solution.instance = instance
        solution.start = simulate(instance, instance.op_order())
    reached = None
    if options.budget[0] == "min":  # on the order the methods use, so phase 2 can start from what it found
        solution.budget_search, reached = smallest_budget(instance, floor[0], options)
        budget = solution.budget_search["budget_bytes"]
        options = replace(options, time_limit=max(options.time_limit / 2, 0.5))
    else:
        budget = resolve_budget(*options.budget, base.peak)
    solution.budget = budget
    if budget < floor[0]:
        raise InfeasibleError(f"budget {budget:,} B is below {floor[0]:,} B ({format_bytes(floor[0])}), which "
                              f"every sequence needs: {floor[1]} (proven, no restriction); rerun with "
                              f"--budget {floor[0]} or more, or --budget min to find the smallest that works")
    for method in options.methods:
        result = _run(method, instance, budget, options, progress, reached if method == "moccasin" else None)
        profile = None
        if result.sequence is not None:
            profile = simulate(instance, result.sequence)
            if profile.peak > budget:
                if method != "checkmate-lp":
                    raise AssertionError(f"{method} returned a sequence with simulated peak {profile.peak} "
                                         f"over the budget {budget}")
                result.status = "over_budget"
        solution.outcomes.append(Outcome(result, profile))
    if solution.best is None:
        error = InfeasibleError(infeasible_message(solution))
        error.solution = solution  # type: ignore[attr-defined]
        raise error
    return solution


def smallest_budget(instance: Instance, floor: int, options: RematOptions) -> tuple[dict[str, Any], Reached | None]:
    """``--budget min``: the smallest peak any sequence reaches under the restriction (Moccasin phase 1,
    Eq. 12–13, with half the time limit), what is proven about it, and the solution that reaches it (phase
    2's start: None when the input order already fits the floor). ``status`` is ``optimal`` when the
    budget is proven the smallest under the restriction (the restriction-free floor, or CP-SAT's bound),
    ``time_limit`` when phase 1 stopped on its time limit above its proven bound."""
    opts = MoccasinOptions(max_copies=options.max_copies, order="free" if options.order == "free" else "fixed",
                           time_limit=max(options.time_limit / 2, 0.5), workers=options.workers,
                           seed=options.seed, deterministic=options.deterministic, precedence=options.precedence,
                           lp_bound=False)
    if simulate(instance, instance.op_order()).peak <= floor:
        return {"budget_bytes": floor, "proven_min_bytes": floor, "status": "optimal"}, None
    reached = smallest_peak(instance, floor, opts)
    budget = max(floor, int(math.ceil(reached.peak - 1e-9)))
    proven = max(floor, int(math.ceil(reached.proven - 1e-9)) if reached.proven is not None else floor)
    status = "optimal" if reached.optimal or proven >= budget else "time_limit"
    return {"budget_bytes": budget, "proven_min_bytes": min(proven, budget), "status": status}, reached


def _run(method: str, instance: Instance, budget: int, options: RematOptions, progress: Progress | None,
         start: Reached | None = None) -> MethodResult:
    """One method on the instance; moccasin starts phase 2 from ``start`` when ``--budget min`` found one."""
    begin = simulate(instance, instance.op_order())
    if begin.peak <= budget:  # the input order already fits: nothing to recompute, trivially optimal
        return MethodResult(method, "optimal", instance.op_order(), instance.base_duration, "optimal", 0.0, 0.0,
                            "none (the input order fits without recomputation)", "none")
    if method == "moccasin":
        opts = MoccasinOptions(max_copies=options.max_copies, order="free" if options.order == "free" else "fixed",
                               time_limit=options.time_limit, workers=options.workers, seed=options.seed,
                               deterministic=options.deterministic, precedence=options.precedence, start=start)
        return solve_moccasin(instance, budget, opts, progress)
    if method == "greedy":
        from onnxpart.remat.heuristics import solve_greedy

        return solve_greedy(instance, budget, options.max_copies, min(30.0, 0.25 * options.time_limit))
    from onnxpart.remat.checkmate import solve_checkmate, solve_checkmate_lp

    if method == "checkmate":
        return solve_checkmate(instance, budget, options.time_limit, seed=options.seed, progress=progress)
    return solve_checkmate_lp(instance, budget, options.time_limit, seed=options.seed)


def infeasible_message(solution: Solution) -> str:
    """Why no method met the budget, with the smallest budget proven reachable / the proven limit."""
    budget = solution.budget
    if solution.budget_search is not None:  # the budget came from moccasin's phase 1, which reached it
        parts = [f"--budget min: moccasin's phase 1 reached {budget:,} B, but {', '.join(solution.options.methods)} "
                 f"found no sequence within it in the time left: add moccasin to --method (it starts from that "
                 f"sequence) or raise --time-limit"]
    else:
        parts = [f"no sequence fits the budget {budget:,} B (baseline peak {solution.baseline.peak:,.0f} B); "
                 "--budget min finds the smallest budget that works"]
    for outcome in solution.outcomes:
        notes = outcome.result.notes or {}
        if outcome.result.status == "infeasible" and notes.get("proven_min_budget"):
            needed = math.ceil(notes["proven_min_budget"])
            parts.append(f"{outcome.result.method}: proven impossible under {outcome.result.restriction} — "
                         f"needs --budget {needed} ({format_bytes(needed)}) or more")
        elif notes.get("reachable_budget"):
            reached = math.ceil(notes["reachable_budget"])
            parts.append(f"{outcome.result.method}: --budget {reached} ({format_bytes(reached)}) works (the "
                         f"smallest peak it reached; proven ≥ {notes.get('proven_min_budget') or solution.floor[0]:,.0f} "
                         f"B, so raising --time-limit or --max-recompute may lower it)")
        elif outcome.profile is not None and outcome.result.status == "over_budget":
            parts.append(f"{outcome.result.method}: rounded sequence peaks at {outcome.profile.peak:,.0f} B")
        else:
            parts.append(f"{outcome.result.method}: {outcome.result.status}")
    return "; ".join(parts)


def certificate(solution: Solution, source_sha256: str | None = None) -> Certificate:
    """One certificate for the chosen sequence: duration as the upper bound, every method's proven bound."""
    inst, best = solution.instance, solution.best
    assert best is not None and best.profile is not None
    bounds = [LowerBound("no-recompute", inst.base_duration, "bound", "formula", 0.0,
                         "every op is computed at least once")]
    for outcome in solution.outcomes:
        r = outcome.result
        if r.solver == "greedy":
            continue  # a heuristic proves no bound
        bounds.append(LowerBound(f"{r.method}", r.lower_bound, r.lower_bound_status if r.lower_bound is not None
                                 else "error", r.solver, round(r.seconds, 3), f"holds under: {r.restriction}"))
        bounds += r.extra_bounds
    tdi = lambda d: (d - inst.base_duration) / inst.base_duration if inst.base_duration else 0.0  # noqa: E731
    lower = max((b.value for b in bounds if b.value is not None), default=inst.base_duration)
    digest = instance_hash(source_sha256 or inst.name, inst.durations, inst.value_sizes, inst.order,
                           solution.budget, inst.constant_bytes)
    return Certificate(
        problem="remat",
        instance_sha256=digest,
        objective="total duration of the sequence (sum of op work over compute events)",
        upper_bound=best.profile.duration,
        lower_bounds=bounds,
        details={
            "budget_bytes": solution.budget,
            "baseline_peak_bytes": solution.baseline.peak,
            "input_order_peak_bytes": solution.start.peak,
            "peak_bytes": best.profile.peak,
            "base_duration": inst.base_duration,
            "tdi": tdi(best.profile.duration),
            "tdi_lower_bound": tdi(lower),
            "recomputations": best.profile.recomputations,
            "method": best.result.method,
            "status": best.result.status,
            "order": solution.options.order,
            "restriction": best.result.restriction,
            "gap_note": "each lower bound holds under its own restriction (see its note); the best one "
                        "bounds every sequence that satisfies all of them",
            "include_params": solution.options.include_params,
            # the stages' order when it is not the file's (minmem, free): what --check-certificate hashes
            **({"instance_order": list(inst.order)} if solution.options.order != "fixed" else {}),
        },
    )


def summary(solution: Solution) -> dict[str, Any]:
    """Plain data for ``--json`` and the compare table."""
    inst = solution.instance
    rows = []
    for o in solution.outcomes:
        r, p = o.result, o.profile
        lb_tdi = ((r.best_bound - inst.base_duration) / inst.base_duration
                  if r.best_bound is not None and inst.base_duration else None)
        rows.append({
            "method": r.method, "status": r.status, "feasible": o.feasible,
            "peak_bytes": p.peak if p else None, "duration": p.duration if p else None,
            "tdi": p.tdi if p else None, "tdi_lower_bound": lb_tdi, "lower_bound": r.lower_bound,
            "lower_bound_status": r.lower_bound_status,
            "extra_bounds": [{"method": b.method, "value": b.value, "status": b.status, "seconds": b.seconds}
                             for b in r.extra_bounds], "recomputations": p.recomputations if p else None,
            "seconds": r.seconds, "time_to_best": r.time_to_best, "restriction": r.restriction,
            "notes": r.notes or {},
        })
    best = solution.best
    return {
        "budget_bytes": solution.budget,
        "baseline_peak_bytes": solution.baseline.peak,
        "input_order_peak_bytes": solution.start.peak,
        "min_budget_bytes": solution.floor[0],
        "budget_search": solution.budget_search,
        "order": solution.options.order,
        "minmem": None if solution.order is None else {
            "peak_bytes": solution.order.peak, "lower_bound": solution.order.lower_bound,
            "status": solution.order.status, "method": solution.order.method},
        "base_duration": inst.base_duration,
        "best": None if best is None else best.result.method,
        "methods": rows,
    }
