"""The method registry and the run that every schedule objective drives the same way.

Both objectives offer the methods of :data:`CATALOGUE` (name, kind, a line of help); each objective's
package (:mod:`onnxpart.schedule.latency`, :mod:`onnxpart.schedule.throughput`) makes its
:class:`onnxpart.strategy.Registry` from it with :func:`registry` — the function that runs each and its
weight in the time budget — so adding a method is one function per objective and one catalogue line;
``--method``, ``--compare`` and the certificate's ``methods`` follow from the registries, and
:func:`onnxpart.strategy.run_methods` runs them (each its :meth:`~onnxpart.strategy.Budget.share` of what
is left, every schedule found offered to the board).

A :class:`Run` is one solve's bookkeeping: the budget, every method's
:class:`~onnxpart.strategy.MethodResult`, the schedules found — each checked by the objective's
independent validator before it is kept (an invalid schedule is a bug, never handed out) — and the proven
lower bounds, all of which the :class:`~onnxpart.board.Board` hears (the progress bar).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.errors import InfeasibleError
from onnxpart.schedule.common.solution import HeuristicResult, Solution, shortest
from onnxpart.strategy import Budget, Method, MethodResult, Registry

#: The methods both objectives offer, in the order they run and tie-break (the earlier of two equal
#: schedules is returned), with their kind (:data:`onnxpart.strategy.KINDS`) and a line of help. The
#: constructive baselines come first, then the searches from their best schedule, then the exact methods
#: warm-started from the best schedule so far.
CATALOGUE: dict[str, tuple[str, str]] = {
    "met": ("heuristic", "MET: each op on its fastest device (batch: its best split)"),
    "greedy": ("heuristic", "Greedy: each op, in BFS order, where it finishes first"),
    "heft": ("heuristic", "HEFT: by upward rank, the earliest finish with insertion"),
    "cpop": ("heuristic", "CPoP: the critical path on its fastest device, the rest by earliest finish"),
    "lagrange": ("heuristic", "the load LP dual's memory-aware mapping, by upward rank with insertion"),
    "sa": ("heuristic", "simulated annealing over mappings (batch: splits)"),
    "ea": ("heuristic", "the biased (1+1) evolutionary algorithm"),
    "exact": ("exact", "the same as cpsat"),
    "milp": ("exact", "the thesis MILP on HiGHS (batch: cpsat)"),
    "cpsat": ("exact", "CP-SAT"),
    "split": ("exact", "MILP-SPLIT: modules solved apart and joined"),
}
#: The constructive baselines: they take milliseconds, and start the searches.
CONSTRUCTIVE = ("met", "greedy", "heft", "cpop", "lagrange")
#: A method that is another's solve under a second name: asked together (``--compare``), it runs once, its
#: row naming both, and its twin's share of the time goes to that one solve.
SAME_AS = {"exact": "cpsat"}

#: What runs one method: ``run(name, context, seconds) -> MethodResult`` (:meth:`Run.keep`'s).
MethodRun = Callable[[str, "Context", float], MethodResult]


#: Why a method is not run on this context in these seconds (None: it is run): ``reason(name, context,
#: seconds)``, each objective's rule on the graph's size (:func:`onnxpart.schedule.latency.scale.skip_reason`).
SkipRule = Callable[[str, "Context", float], "str | None"]


def within_size(run: MethodRun, reason: SkipRule, solvers: dict[str, str]) -> MethodRun:
    """``run``, unless ``reason`` gives a reason not to run it (a graph too big for the method in its
    time): then its result is listed ``skipped`` with why, and, for a method of ``solvers`` (name → the
    solver behind its bound), its bound too, and it does not run."""

    def sized(name: str, context: "Context", seconds: float) -> MethodResult:
        why = reason(name, context, seconds)
        if why is None:
            return run(name, context, seconds)
        if name in solvers:
            context.run.add_bounds([LowerBound(name, None, "skipped", solvers[name], 0.0, why)])
        return context.run.keep(name, None, "skipped", 0.0, note=why)

    return sized


def registry(runs: dict[str, MethodRun], weights: dict[str, float]) -> Registry:
    """An objective's registry: every method of :data:`CATALOGUE`, in its order, run by ``runs[name]`` with
    ``weights[name]`` (default 1) as its time weight."""
    return Registry(*(method(name, runs[name], weights.get(name, 1.0)) for name in CATALOGUE))


def selected(methods: Registry, names: Sequence[str]) -> list[Method]:
    """The methods of ``names`` to run, in registry order, a method whose twin (:data:`SAME_AS`) is asked
    too left out: the twin's one solve answers for both."""
    return methods.select([name for name in names if SAME_AS.get(name) not in names])


def method(name: str, run: MethodRun, weight: float = 1.0) -> Method:
    """The catalogue's method ``name`` run by ``run``, as :func:`onnxpart.strategy.run_methods` calls a method
    (the problem is the :class:`Context`); an exact method's end is reported on the board (the bar shows
    which solver ran last). Its row names the twins asked with it (:func:`selected`)."""
    kind, text = CATALOGUE[name]

    def call(context: "Context", options: Any, board: Board, seconds: float) -> MethodResult:
        result = run(name, context, seconds)
        twins = [twin for twin, same in SAME_AS.items() if same == name and twin in options.methods]
        if twins:
            also = f"also {', '.join(twins)}: the same solve, run once"
            result.note = f"{also}; {result.note}" if result.note else also
        if kind == "exact":
            board.report(name)
        return result

    return Method(name, kind, call, weight, text)


@dataclass
class Run:
    """One solve's results, schedules and bounds (module docstring); ``validate(schedule)`` lists what is
    wrong with a schedule (``what`` names it in the error)."""

    budget: Budget
    board: Board
    validate: Callable[[Any], list[str]]
    what: str
    results: list[MethodResult] = field(default_factory=list)
    found: list[tuple[float, str, Any]] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    def keep(self, method: str, sched, status: str, seconds: float, bound=None, note: str = "") -> MethodResult:
        """Record a method's result, and its schedule once the validator finds nothing wrong with it (a
        schedule already kept, the same object, is not checked again: 0.3 s at 20,000 ops); -> the result
        (its ``value`` is offered to the board by :func:`onnxpart.strategy.run_methods`)."""
        if sched is not None:
            if not any(sched is kept for _, _, kept in self.found):  # a warm start given back: checked once
                problems = self.validate(sched)
                if problems:
                    raise AssertionError(f"{method} produced an invalid {self.what}: {problems[0]}")
            self.found.append((sched.makespan, method, sched))
        result = MethodResult(method=method, status=status, value=sched.makespan if sched is not None else None,
                              bound=bound, seconds=seconds, note=note)
        self.results.append(result)
        return result

    def add_bounds(self, bounds: Sequence[LowerBound]) -> None:
        """Proven lower bounds, onto the board too."""
        for bound in bounds:
            self.lower_bounds.append(bound)
            self.board.add(bound)

    def live(self, method: str) -> Callable[[float], None]:
        """A solver's ``on_bound``: its proven bound onto the board as it rises (the bar moves)."""
        def post(value: float) -> None:
            if self.board.post(method, value):
                self.board.report(method)

        return post

    def best(self, *more) -> Any:
        """The shortest schedule found so far or among ``more`` (:func:`.solution.shortest`)."""
        return shortest(*(f[2] for f in self.found), *more)

    def solution(self, instance, order: Sequence[str], failure: str,
                 first: Callable[[], HeuristicResult | None] | None = None) -> Solution:
        """The shortest schedule (ties: the earlier method of ``order``). When no method found one and none
        proved that none exists (an exact method asked alone, stopped or skipped for want of time), the first
        answer ``first()`` stands in: a constructive heuristic (MET) whose work does not depend on the clock,
        so a run whose time was spent before it started still answers (issue 30). :class:`InfeasibleError`
        with ``failure`` when there is still none."""
        if not self.found and first is not None and not any(r.status == "infeasible" for r in self.results):
            answer = first()
            if answer is not None and answer.schedule is not None:
                self.keep(answer.method, answer.schedule, "first_answer", answer.seconds,
                          note="no method asked found a schedule in its time: the first answer stands in")
        if not self.found:
            raise InfeasibleError(failure)
        best = min(self.found, key=lambda f: (f[0], list(order).index(f[1])))
        return Solution(instance, best[2], best[1], self.results, self.lower_bounds)


@dataclass
class Context:
    """What a method's ``run`` reads: the instance, the options, the :class:`Run`, and the searches' start
    (``starter(instance)``, computed once, when first asked for)."""

    instance: Any
    options: Any
    run: Run
    starter: Callable[[Any], Any]
    _start: list = field(default_factory=list)

    def start(self) -> Any:
        if not self._start:
            self._start.append(self.starter(self.instance))
        return self._start[0]
