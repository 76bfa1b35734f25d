"""Sharding layouts for an ONNX model on a device mesh: the layout problem of ``onnxpart tile model.onnx``,
after "Matrix Tiling as Constrained Hypergraph Labeling" (Sections 4–6) with per-pair collective costs.

Public entry: :func:`solve` (a :class:`~onnxpart.tile.onnx.model.LayoutInstance`, built by
:func:`~onnxpart.tile.onnx.build.build_layout_instance`, and :class:`LayoutOptions`) -> :class:`LayoutSolution`.
The methods (:data:`METHODS`; they run in the order asked):

* ``local`` — Section 6's baseline (:func:`onnxpart.tile.onnx.heuristics.local`);
* ``greedy`` — op and tensor moves from the local and the replicated plan
  (:func:`onnxpart.tile.onnx.heuristics.greedy`), within a deterministic budget of move trials;
* ``exact`` — bucket elimination, else CP-SAT (:func:`onnxpart.tile.onnx.exact.exact`), warm-started from
  greedy's plan: proven optimal, or a proven bound at the time limit.

``time_limit`` is the whole solve's, on one clock (:class:`onnxpart.tile.methods.Budget`): greedy's trials are
its share by the methods' weights, exact takes what is left. The certificate always holds the closed-form
bound (:func:`onnxpart.tile.onnx.exact.closed_form_bound`). Files: :mod:`onnxpart.tile.onnx.emit`; the
``--check-certificate`` recomputation: :mod:`onnxpart.tile.onnx.check`; ``--verify``:
:mod:`onnxpart.tile.onnx.verify`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from onnxpart.board import Board
from onnxpart.certificate import LowerBound, best_bound
from onnxpart.errors import InfeasibleError
from onnxpart.tile.methods import Budget, Method, Outcome, Run, asked, registry, run_methods
from onnxpart.tile.onnx.catalog import Layout
from onnxpart.tile.onnx.exact import closed_form_bound
from onnxpart.tile.onnx.exact import exact as exact_layouts  # the name exact is the module's
from onnxpart.tile.onnx.heuristics import TRIALS_PER_SECOND, greedy, local
from onnxpart.tile.onnx.model import LayoutInstance, Plan


@dataclass(frozen=True)
class LayoutOptions:
    methods: tuple[str, ...] = ("local", "greedy", "exact")
    time_limit: float = 10.0  # total seconds, every method together
    workers: int = 0  # CP-SAT threads; 0 = one per core
    seed: int = 0


@dataclass
class LayoutResult:
    method: str
    layouts: dict[str, Layout] | None
    cost: float | None
    seconds: float
    status: str  # heuristic | optimal | time_limit | no_solution
    note: str = ""


@dataclass
class LayoutSolution:
    instance: LayoutInstance
    plan: Plan
    cost: float
    method: str
    results: list[LayoutResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)
    replicated: bool = False  # no sharding beats one device: the plan runs the whole model on every device

    @property
    def best_lower_bound(self) -> float | None:
        return best_bound(self.lower_bounds)

    @property
    def one_device(self) -> float:
        """The step time on one device (:attr:`LayoutInstance.one_device`)."""
        return self.instance.one_device


def _local(inst: LayoutInstance, run: Run) -> Outcome:
    """The first valid plan, whatever the limit: the ops it does not reach by the deadline stay replicated."""
    return Outcome(local(inst, run.budget.deadline), "heuristic")


def _greedy(inst: LayoutInstance, run: Run) -> Outcome:
    trials = TRIALS_PER_SECOND * run.budget.share("greedy")
    return Outcome(greedy(inst, deadline=run.budget.deadline, trials=trials, start=run.answers.get("local")),
                   "heuristic")


#: How the time left when exact starts is shared when greedy has not run: greedy's plan for the hint, the rest.
EXACT_HINT = {"hint": 1, "exact": 3}


def _exact(inst: LayoutInstance, run: Run) -> Outcome:
    """Exact from greedy's plan (when greedy did not run: a greedy run within a share of the time left)."""
    hint = run.answers.get("greedy")
    if not hint:
        left = Budget(run.budget.left(), EXACT_HINT)
        hint = greedy(inst, deadline=left.deadline, trials=TRIALS_PER_SECOND * left.share("hint"),
                      start=run.answers.get("local"))
    layouts, bound = exact_layouts(inst, run.budget.left(), hint, run.options.workers, run.options.seed)
    return Outcome(layouts, bound.status, bound)


#: The methods, in their default order (``--method`` picks among them; they run in the order asked).
METHODS = registry(
    Method("local", "heuristic", _local, 0, "each op's locally cheapest algorithm, in topological order"),
    Method("greedy", "heuristic", _greedy, 1, "op and tensor moves while the step time drops"),
    Method("exact", "exact", _exact, 1, "bucket elimination, else CP-SAT: the optimum or a proven bound"),
)


def solve(inst: LayoutInstance, options: LayoutOptions = LayoutOptions(), board: Board | None = None) -> LayoutSolution:
    """Run the requested methods; the answer is the cheapest plan (:func:`_best`), or the replicated plan when
    no method's plan beats one device. ``board`` (:mod:`onnxpart.board`) hears every method's plan (``offer``)
    and every proven bound (``add``): the closed form at once, then exact's — what the progress bar shows."""
    board = board if board is not None else Board()
    names = asked(options.methods, METHODS, "an ONNX model")
    run = Run(options, Budget(options.time_limit, {name: METHODS[name].weight for name in names}))
    bounds = [closed_form_bound(inst)]
    board.add(bounds[0])
    ran = run_methods(METHODS, names, inst, run, board, lambda x: inst.cost(x) if inst.fits(x) else None)
    bounds += [d.outcome.bound for d in ran if d.outcome.bound is not None]
    results = [LayoutResult(d.method, d.outcome.answer, d.value, d.seconds, d.outcome.status) if d.value is not None
               else LayoutResult(d.method, None, None, d.seconds, "no_solution") for d in ran]
    solved = [r for r in results if r.cost is not None]
    if not solved:
        raise InfeasibleError("no method found layouts within --device-memory")
    best = _best(solved)
    one = inst.replicated_plan()
    one_cost = inst.cost(one) if one is not None else math.inf
    if one_cost <= best.cost * (1 + TIE):
        method = best.method if one_cost >= best.cost * (1 - TIE) else "replicated"
        board.offer(one_cost, method)
        return LayoutSolution(inst, inst.plan(one), one_cost, method, results, bounds, replicated=True)
    return LayoutSolution(inst, inst.plan(best.layouts), best.cost, best.method, results, bounds)


#: Relative difference below which two step times are one (float sums in another order).
TIE = 1e-12


def _best(solved: list[LayoutResult]) -> LayoutResult:
    """The cheapest result; among equal ones the method that proved its plan optimal, else the one listed
    first (a plan exact proved is labelled ``exact`` even when greedy found it first)."""
    least = min(r.cost for r in solved)
    tied = [r for r in solved if r.cost <= least * (1 + TIE)]
    return next((r for r in tied if r.status == "optimal"), tied[0])
