"""Sharding layouts for an ONNX model on a device mesh: the layout problem of ``onnxpart tile model.onnx``,
after "Matrix Tiling as Constrained Hypergraph Labeling" (Sections 4–6) with per-pair collective costs.

Public entry: :func:`solve` (a :class:`~onnxpart.tile.onnx.model.LayoutInstance`, built by
:func:`~onnxpart.tile.onnx.build.build_layout_instance`, and :class:`LayoutOptions`) -> :class:`LayoutSolution`.
The methods (:data:`REGISTRY`; they run in the order asked):

* ``local`` — Section 6's baseline (:func:`onnxpart.tile.onnx.heuristics.local`): the first valid plan, whatever
  the limit;
* ``greedy`` — op and tensor moves from the local and the replicated plan
  (:func:`onnxpart.tile.onnx.heuristics.greedy`), within a deterministic budget of move trials;
* ``exact`` — bucket elimination, else CP-SAT (:func:`onnxpart.tile.onnx.exact.exact`), warm-started from
  greedy's plan: proven optimal, or a proven bound at the time limit.

The solve runs on one clock (:class:`onnxpart.strategy.Budget`) of ``seconds`` (the command's
``run_clock.solve_seconds``; default ``time_limit``): local, the first answer, runs to its end whatever the
clock; greedy stops at the end of its share (the registry's weights) and exact takes what is left, each
skipping what it has no time for (exact's row and bound then say why). Greedy's trials are its part of
``time_limit`` by the methods' weights, so one limit gives one plan whatever the machine's load. The
certificate always holds the closed-form bound (:func:`onnxpart.tile.onnx.exact.closed_form_bound`). Files:
:mod:`onnxpart.tile.onnx.emit`; the ``--check-certificate`` recomputation: :mod:`onnxpart.tile.onnx.check`;
``--verify``: :mod:`onnxpart.tile.onnx.verify`. This module imports no solver: the command line reads
:data:`REGISTRY` when it starts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import Bounded, LowerBound
from onnxpart.errors import InfeasibleError
from onnxpart.strategy import FLOOR, Budget, Method, MethodResult, Registry, run_methods

if TYPE_CHECKING:
    from onnxpart.tile.onnx.catalog import Layout
    from onnxpart.tile.onnx.model import LayoutInstance, Plan


@dataclass(frozen=True)
class LayoutOptions:
    methods: tuple[str, ...] = ("local", "greedy", "exact")
    time_limit: float = 10.0  # total seconds, every method together (greedy's trials are its part of it)
    workers: int = 0  # CP-SAT threads; 0 = one per core
    seed: int = 0

    def __post_init__(self) -> None:
        REGISTRY.parse(",".join(self.methods) or ",")


@dataclass(kw_only=True)
class LayoutResult(MethodResult):
    """One method's plan (``layouts``; None: none that fits) and the bound it proved (``proven``)."""

    layouts: dict[str, Layout] | None = None
    proven: LowerBound | None = None


@dataclass
class LayoutSolution(Bounded):
    instance: LayoutInstance
    plan: Plan
    cost: float
    method: str
    results: list[LayoutResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)
    replicated: bool = False  # no sharding beats one device: the plan runs the whole model on every device

    @property
    def value(self) -> float:
        return self.cost

    @property
    def one_device(self) -> float:
        """The step time on one device (:attr:`LayoutInstance.one_device`)."""
        return self.instance.one_device

    @property
    def speed_up(self) -> float:
        """One device's step time over the plan's (1 when the plan takes no time)."""
        return self.one_device / self.cost if self.cost > 0 else 1.0


@dataclass
class _Run:
    """What the methods share in one solve: the instance, the solve's clock, greedy's trials and the plans of
    the methods run so far (greedy starts from local's, exact from greedy's)."""

    inst: LayoutInstance
    budget: Budget
    trials: float
    answers: dict[str, Any] = field(default_factory=dict)

    def result(self, method: str, start: float, layouts, status: str, proven: LowerBound | None = None,
               board: Board | None = None, note: str = "") -> LayoutResult:
        """``method``'s result, started at ``start``: its plan priced when it fits (else ``no_solution``), its
        bound on the board, ``note`` saying why when it was skipped."""
        self.answers[method] = layouts
        if proven is not None and board is not None:
            board.add(proven)
        fits = layouts is not None and self.inst.fits(layouts)
        return LayoutResult(method=method, status=status if fits else "no_solution",
                            value=self.inst.cost(layouts) if fits else None,
                            bound=None if proven is None else proven.value,
                            seconds=time.monotonic() - start, layouts=layouts if fits else None, proven=proven,
                            note=note)


def _local(run: _Run, options: LayoutOptions, board: Board, seconds: float) -> LayoutResult:
    """The first valid plan, whatever the limit (:func:`onnxpart.tile.onnx.heuristics.local` has no deadline)."""
    from onnxpart.tile.onnx.heuristics import local

    start = time.monotonic()
    return run.result("local", start, local(run.inst), "heuristic")


def _settled(method: str, board: Board) -> LayoutResult | None:
    """``method``'s result when it is not run: the plan found so far meets a proven bound (the closed form,
    e.g. on graphs whose ops have no sharded algorithm), so it is optimal and nothing is left to improve or
    prove; None when the search goes on."""
    if not board.closed():
        return None
    return LayoutResult(method=method, status="skipped",
                        note=f"skipped: {board.found_by}'s plan meets a proven bound (optimal)")


def _greedy(run: _Run, options: LayoutOptions, board: Board, seconds: float) -> LayoutResult:
    """Greedy from local's plan, within its trials; its share of the solve (``seconds``) is its deadline, so a
    run whose loading took most of the limit leaves exact its part."""
    from onnxpart.tile.onnx.heuristics import greedy

    if settled := _settled("greedy", board):
        return settled
    start = time.monotonic()
    plan = greedy(run.inst, deadline=run.budget.until(seconds), trials=run.trials, start=run.answers.get("local"))
    return run.result("greedy", start, plan, "heuristic")


#: The part of the trials a greedy run for exact's hint gets when greedy itself has not run.
EXACT_HINT = 0.25


def _exact(run: _Run, options: LayoutOptions, board: Board, seconds: float) -> LayoutResult:
    """Exact from greedy's plan (when greedy did not run: a greedy run on a part of the trials) in what is left
    of the solve."""
    from onnxpart.tile.onnx.exact import exact
    from onnxpart.tile.onnx.heuristics import greedy

    if settled := _settled("exact", board):
        return settled
    start = time.monotonic()
    hint = run.answers.get("greedy")
    if not hint:
        hint = greedy(run.inst, deadline=run.budget.deadline, trials=EXACT_HINT * run.trials,
                      start=run.answers.get("local"))
    layouts, bound = exact(run.inst, max(FLOOR, run.budget.left()), hint, options.workers, options.seed)
    return run.result("exact", start, layouts, bound.status, bound, board,
                      bound.note if bound.status == "skipped" else "")


#: The methods, in their default order (``--method`` picks among them; they run in the order asked).
REGISTRY = Registry(
    Method("local", "heuristic", _local, 0, "each op's locally cheapest algorithm, in topological order"),
    Method("greedy", "heuristic", _greedy, 1, "op and tensor moves while the step time drops"),
    Method("exact", "exact", _exact, 1, "bucket elimination, else CP-SAT: the optimum or a proven bound"),
)


def solve(inst: LayoutInstance, options: LayoutOptions = LayoutOptions(), board: Board | None = None,
          seconds: float | None = None) -> LayoutSolution:
    """Run the requested methods within ``seconds`` (default ``options.time_limit``); the answer is the cheapest
    plan (:func:`_best`), or the replicated plan when no method's plan beats one device. ``board``
    (:mod:`onnxpart.board`) hears every method's plan (``offer``) and every proven bound (``add``): the closed
    form at once, then exact's — what the progress bar shows."""
    from onnxpart.tile.onnx.exact import closed_form_bound
    from onnxpart.tile.onnx.heuristics import TRIALS_PER_SECOND

    board = board if board is not None else Board()
    methods = [REGISTRY[name] for name in dict.fromkeys(options.methods)]
    weight = REGISTRY["greedy"].weight / sum(m.weight for m in methods) if "greedy" in options.methods else 1.0
    run = _Run(inst, Budget(options.time_limit if seconds is None else seconds),
               TRIALS_PER_SECOND * options.time_limit * weight)
    bounds = [closed_form_bound(inst)]
    board.add(bounds[0])
    results = run_methods(methods, run, options, board, run.budget)
    bounds += [r.proven for r in results if r.proven is not None]
    solved = [r for r in results if r.value is not None]
    if not solved:
        raise InfeasibleError("no method found layouts within --device-memory")
    best = _best(solved)
    one = inst.replicated_plan()
    one_cost = inst.cost(one) if one is not None else math.inf
    if one_cost <= best.value * (1 + TIE):
        method = best.method if one_cost >= best.value * (1 - TIE) else "replicated"
        board.offer(one_cost, method)
        return LayoutSolution(inst, inst.plan(one), one_cost, method, results, bounds, replicated=True)
    return LayoutSolution(inst, inst.plan(best.layouts), best.value, best.method, results, bounds)


#: Relative difference below which two step times are one (float sums in another order).
TIE = 1e-12


def _best(solved: list[LayoutResult]) -> LayoutResult:
    """The cheapest result; among equal ones the method that proved its plan optimal, else the one listed
    first (a plan exact proved is labelled ``exact`` even when greedy found it first)."""
    least = min(r.value for r in solved)
    tied = [r for r in solved if r.value <= least * (1 + TIE)]
    return next((r for r in tied if r.status == "optimal"), tied[0])
