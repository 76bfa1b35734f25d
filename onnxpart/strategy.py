"""What every strategy shares: the contract of ``docs/strategies.md`` as code.

* :class:`MethodResult` — one method's outcome on one instance (the ``--compare`` row), which a strategy
  may subclass with fields of its own;
* every ``Solution`` takes :class:`onnxpart.certificate.Bounded`: its proven ``lower_bounds``, the best of
  them, the gap and ``proven_optimal`` by the one rule of the certificate;
* :class:`Method` and :class:`Registry` — a strategy's methods in one ordered table (name, kind, the
  function that runs it, its time weight, its help): ``--method`` parsing, its help text, ``--compare``'s
  list and the methods of a kind all come from it, so adding a heuristic is one function and one line;
* :class:`Budget` — one run's total time on one monotonic clock, and the one rule that cuts it into
  shares from declared weights;
* :func:`run_methods` — the selected methods in order, each with its share of what is left, every
  solution offered to the board.

Nothing here imports a solver: a strategy's package can declare its registry at import time (the
command line builds its ``--method`` help from it) and load its solvers only when a method runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from onnxpart.errors import UserError

#: what a method proves: ``heuristic`` (a solution, no bound), ``exact`` (a solution and a proven
#: bound; the optimum given the time), ``bound`` (a proven bound; a solution, if any, need not fit)
KINDS = ("heuristic", "exact", "bound")
#: the least share of time a method gets, so that one started late can still report (seconds)
FLOOR = 0.05


@dataclass(kw_only=True)
class MethodResult:
    """What one method found: ``value`` the objective of its solution (None: none found), ``bound`` its
    proven lower bound (None: none), ``status`` how it ended (``board.Status`` values, or the
    strategy's own: ``heuristic``, ``over_budget`` …), ``seconds`` its wall time."""

    method: str
    status: str
    value: float | None = None
    bound: float | None = None
    seconds: float = 0.0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The shared fields, as plain data (a ``--compare`` row, a certificate's details)."""
        return {f.name: getattr(self, f.name) for f in fields(MethodResult)}


# ------------------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Method:
    """One registered method. ``run`` is what runs it, with the strategy's arguments (:func:`run_methods`
    calls ``run(problem, options, board, seconds)``); ``weight`` is its time relative to the others'
    (:meth:`Budget.share`; 0: no share, for a method that takes no time to speak of); ``help`` one phrase
    for ``--help``."""

    name: str
    kind: str
    run: Callable[..., Any]
    weight: float = 1.0
    help: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if not self.weight >= 0:
            raise ValueError(f"method {self.name!r}: weight must be 0 or more")


class Registry:
    """A strategy's methods, in the order they run and are listed."""

    def __init__(self, *methods: Method):
        self._methods = {m.name: m for m in methods}
        if len(self._methods) != len(methods):
            raise ValueError("two methods share a name")

    def __iter__(self) -> Iterator[Method]:
        return iter(self._methods.values())

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def __getitem__(self, name: str) -> Method:
        return self._methods[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._methods)

    def of_kind(self, *kinds: str) -> tuple[str, ...]:
        return tuple(m.name for m in self if m.kind in kinds)

    def select(self, names: Sequence[str]) -> list[Method]:
        """The methods named, in registry order (each once): the order they run in."""
        return [m for m in self if m.name in names]

    def parse(self, text: str, option: str = "--method", *, extra: Sequence[str] = (),
              what: str = "method") -> tuple[str, ...]:
        """``--method a,b`` read by :func:`choose` (``extra``: words the option accepts besides the names)."""
        return choose(text, option, (*self.names, *extra), what)

    def help(self, lead: str = "") -> str:
        """``lead`` and one ``name (kind): help`` entry per method, for an option's help text."""
        entries = "; ".join(f"{m.name} ({m.kind}): {m.help}" if m.help else f"{m.name} ({m.kind})" for m in self)
        return f"{lead} {entries}." if lead else f"{entries}."


def comma_list(text: str, option: str, what: str, use: str) -> list[str]:
    """The entries of a comma-separated option, stripped. None at all (``--method ,``) or an empty one
    between commas (``heft,,sa``) is refused; ``what`` names an entry, ``use`` says what to give."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise UserError(f"no {what} given to {option}: {use}")
    if not all(items):
        raise UserError(f"{option} {text!r} has an empty {what} between commas: {use}")
    return items


def choose(text: str, option: str, known: Sequence[str], what: str = "method") -> tuple[str, ...]:
    """A comma-separated choice among ``known`` (``--method heft,sa``): each entry known, in the order
    given, once."""
    use = f"use {', '.join(known)}"
    items = comma_list(text, option, what, use)
    unknown = [item for item in items if item not in known]
    if unknown:
        raise UserError(f"unknown {option} {', '.join(unknown)}: {use}")
    return tuple(dict.fromkeys(items))


# ------------------------------------------------------------------------------------ the time budget
class Budget:
    """One run's ``total`` seconds on one monotonic clock (``time.monotonic``: the same in every process
    of this machine, so a deadline can be handed to a worker). Every share of it is computed here.

    What is left is read on the clock, so a step that ends early leaves its time to the next. With
    ``ledger=True`` it is what has not been handed out yet (:meth:`take`): a run whose solvers stop on
    deterministic limits (``--deterministic``) then gets the same shares however long each step took."""

    def __init__(self, total: float, *, ledger: bool = False, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.ledger = ledger
        self.clock = clock
        self.start = clock()
        self.deadline = self.start + total
        self.handed = 0.0

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        if self.ledger:
            return max(0.0, self.total - self.handed)
        return max(0.0, self.deadline - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def take(self, seconds: float) -> float:
        """Hand ``seconds`` out to a step (the ledger counts them); -> ``seconds``."""
        self.handed += seconds
        return seconds

    def share(self, weight: float = 1.0, later: float = 0.0) -> float:
        """Seconds for a step of ``weight`` when steps weighing ``later`` in all still follow: its part of
        what is left (all of it when nothing weighs), never under :data:`FLOOR`; handed out (:meth:`take`)."""
        part = weight / (weight + later) if weight + later > 0 else 1.0
        return self.take(max(FLOOR, self.left() * part))

    def part(self, fraction: float) -> float:
        """Seconds for a step declared as ``fraction`` of the whole run."""
        return fraction * self.total

    def until(self, seconds: float) -> float:
        """The clock reading ``seconds`` from now, but never past the run's deadline."""
        return min(self.deadline, self.clock() + seconds)


def cores(workers: int) -> int:
    """``workers`` as a count: 0 means one per core this process may use (every strategy's ``workers``)."""
    if workers:
        return workers
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_methods(methods: Sequence[Method], problem: Any, options: Any, board: Any,
                budget: Budget) -> list[MethodResult]:
    """Run ``methods`` in order, each as ``run(problem, options, board, seconds)`` with its
    :meth:`Budget.share` of what is left (the weights of the methods after it counted), and offer each
    solution found to ``board``; -> their results, in order."""
    results = []
    for i, method in enumerate(methods):
        seconds = budget.share(method.weight, sum(m.weight for m in methods[i + 1:]))
        result = method.run(problem, options, board, seconds)
        if result.value is not None:
            board.offer(result.value, method.name)
        results.append(result)
    return results
