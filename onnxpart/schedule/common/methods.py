"""The method registry and the run that every schedule objective drives the same way.

Both objectives offer the methods of :data:`CATALOGUE` (name, kind, a line of help); each objective's
package (:mod:`onnxpart.schedule.latency`, :mod:`onnxpart.schedule.throughput`) makes its table of
:class:`Method` from it with :func:`registry` — the function that runs each and the weight of each kind
in the time budget — so adding a method is one function per objective and one catalogue line;
``--method``, ``--compare`` and the certificate's ``methods`` follow from the tables.

A :class:`Run` is one solve's bookkeeping: the :class:`~.budget.Budget`, every method's
:class:`~.solution.MethodResult`, the schedules found — each checked by the objective's independent
validator before it is kept (an invalid schedule is a bug, never handed out) — and the proven lower
bounds, all of which the :class:`~onnxpart.board.Board` hears (the progress bar). :func:`run_methods`
runs methods in order, each with its share of the time left (:meth:`.Budget.share`: its weight over the
weights still to run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.errors import InfeasibleError
from onnxpart.schedule.common.budget import Budget
from onnxpart.schedule.common.solution import MethodResult, Solution, shortest

#: The kinds of method, in the order a run takes them: constructive heuristics, searches from a start
#: (SA, EA), exact methods (warm-started from the best schedule so far; in the order asked).
HEURISTIC, SEARCH, EXACT = "heuristic", "search", "exact"


@dataclass(frozen=True)
class Method:
    """One registered method. ``run(name, context, seconds)`` records its result through ``context.run``;
    ``weight`` is its claim on the time left against the methods still to run (0: no share, it runs to
    the end — a constructive heuristic in milliseconds)."""

    name: str
    kind: str  # HEURISTIC, SEARCH or EXACT
    run: Callable[[str, "Context", float], None]
    weight: float
    help: str


#: The methods both objectives offer, in tie-break order (the earlier of two equal schedules is returned),
#: with their kind and a line of help.
CATALOGUE: dict[str, tuple[str, str]] = {
    "met": (HEURISTIC, "MET: each op on its fastest device (batch: its best split)"),
    "greedy": (HEURISTIC, "Greedy: each op, in BFS order, where it finishes first"),
    "heft": (HEURISTIC, "HEFT: by upward rank, the earliest finish with insertion"),
    "sa": (SEARCH, "simulated annealing over mappings (batch: splits)"),
    "ea": (SEARCH, "the biased (1+1) evolutionary algorithm"),
    "exact": (EXACT, "the same as cpsat"),
    "milp": (EXACT, "the thesis MILP on HiGHS (batch: cpsat)"),
    "cpsat": (EXACT, "CP-SAT"),
    "split": (EXACT, "MILP-SPLIT: modules solved apart and joined"),
}


def registry(runs: dict[str, Callable[[str, "Context", float], None]],
             weights: dict[str, float]) -> dict[str, Method]:
    """An objective's table: every method of :data:`CATALOGUE`, in its order, run by ``runs[name]`` with the
    weight of its kind."""
    return {name: Method(name, kind, runs[name], weights[kind], text) for name, (kind, text) in CATALOGUE.items()}


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

    def keep(self, method: str, sched, status: str, seconds: float, bound=None, note: str = "") -> None:
        """Record a method's result, and its schedule once the validator finds nothing wrong with it."""
        if sched is not None:
            problems = self.validate(sched)
            if problems:
                raise AssertionError(f"{method} produced an invalid {self.what}: {problems[0]}")
            self.found.append((sched.makespan, method, sched))
            self.board.offer(sched.makespan, method)
        self.results.append(MethodResult(method, sched.makespan if sched is not None else None, status, seconds,
                                         bound, note))

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

    def solution(self, instance, order: Sequence[str], failure: str) -> Solution:
        """The shortest schedule (ties: the earlier method of ``order``); :class:`InfeasibleError` with
        ``failure`` when no method found one."""
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


def chosen(table: dict[str, Method], names: Sequence[str], kind: str) -> list[str]:
    """The methods of ``kind`` among ``names``: heuristics and searches in table order, exact methods in
    the order asked."""
    if kind == EXACT:
        return [m for m in names if table[m].kind == EXACT]
    return [m for m in table if m in names and table[m].kind == kind]


def run_methods(context: Context, table: dict[str, Method], names: Sequence[str], budget: Budget) -> None:
    """Run ``names`` in order: each gets ``weight / Σ weights of it and the ones after it`` of ``budget``'s
    time left (no share, ``inf``, for weight 0); an exact method's end is reported on the board."""
    names = list(names)
    for n, name in enumerate(names):
        method = table[name]
        pending = sum(table[m].weight for m in names[n:])
        method.run(name, context, budget.share(method.weight, pending) if method.weight else math.inf)
        if method.kind == EXACT:
            context.run.board.report(name)
