"""What tile's two problems (:mod:`onnxpart.tile.onnx`, :mod:`onnxpart.tile.program`) share to run their
methods: the registry entry, one time budget on one clock, the loop that runs the asked methods and offers
their answers to the board, the workers default, and the certificate every method's result goes into.

Kept small on purpose: it is the stand-in, inside tile, for the strategy base every strategy will share
(issue 27), which replaces it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxpart.board import Board
from onnxpart.certificate import Certificate, LowerBound, instance_hash
from onnxpart.errors import UserError

#: The least time a solver is given, even when the budget is spent (one asked for no time would not start).
MIN_SECONDS = 0.1


@dataclass(frozen=True)
class Method:
    """One registered method: the name ``--method`` takes, its kind (``heuristic``, ``exact``), the function
    that runs it (``run(problem, run: Run) -> Outcome``), its weight in the time budget (its share of the
    time limit among the methods that run) and one line of help."""

    name: str
    kind: str
    run: Callable[[Any, "Run"], "Outcome"]
    weight: float
    help: str


def registry(*methods: Method) -> dict[str, Method]:
    """The methods by name, in the order listed (the default order of ``--method``)."""
    return {m.name: m for m in methods}


@dataclass
class Outcome:
    """What a method gives back: its answer (labels, layouts; None when it has none), its status, the
    proven lower bound it found (None for a heuristic) and a note (why there is no answer)."""

    answer: Any
    status: str
    bound: LowerBound | None = None
    note: str = ""


class Budget:
    """One time limit on one monotonic clock (``time.perf_counter``), started when made: ``deadline`` ends
    it, :meth:`share` is a part's time by its declared weight among ``weights``, :meth:`left` what remains."""

    def __init__(self, seconds: float, weights: Mapping[str, float] | None = None) -> None:
        self.seconds, self.weights = float(seconds), dict(weights or {})
        self.start = time.perf_counter()

    @property
    def deadline(self) -> float:
        return self.start + self.seconds

    def share(self, name: str) -> float:
        """``name``'s seconds: the limit times its weight over the sum of the weights."""
        total = sum(self.weights.values())
        return self.seconds * self.weights[name] / total if total else 0.0

    def left(self, floor: float = MIN_SECONDS) -> float:
        """The seconds to the deadline, at least ``floor``."""
        return max(self.deadline - time.perf_counter(), floor)


@dataclass
class Run:
    """One solve as its methods see it: the options, the budget, and the answers of the methods run so far
    (exact starts from greedy's)."""

    options: Any
    budget: Budget
    answers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ran:
    """One method's run: its outcome, the value of its answer (None: no answer, or not a solution) and
    the seconds it took."""

    method: str
    outcome: Outcome
    value: float | None
    seconds: float


def asked(names: Sequence[str], methods: Mapping[str, Method], problem: str) -> tuple[str, ...]:
    """``names`` without repeats, in order; UserError naming any that ``methods`` does not hold."""
    unknown = [m for m in names if m not in methods]
    if unknown:
        raise UserError(f"unknown tile method {', '.join(map(repr, unknown))} for {problem}: use "
                        f"{', '.join(methods)}")
    return tuple(dict.fromkeys(names))


def run_methods(methods: Mapping[str, Method], names: Sequence[str], problem: Any, run: Run, board: Board,
                value: Callable[[Any], float | None]) -> list[Ran]:
    """Run the methods ``names`` in order on ``problem``: each proven bound goes to the board (``add``), each
    answer ``value`` prices (None: not a solution) is offered to it (``offer``), and becomes the method's
    entry in ``run.answers``."""
    done = []
    for name in names:
        start = time.perf_counter()
        outcome = methods[name].run(problem, run)
        if outcome.bound is not None:
            board.add(outcome.bound)
        priced = None if outcome.answer is None else value(outcome.answer)
        if priced is not None:
            board.offer(priced, name)
        run.answers[name] = outcome.answer
        done.append(Ran(name, outcome, priced, time.perf_counter() - start))
    return done


def resolve_workers(count: int) -> int:
    """``count`` workers (solver threads), or with 0 one per core this process may use."""
    if count:
        return count
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def certificate(solution: Any, sha: str | None, digest: list, objective: str, options: dict[str, Any]) -> Certificate:
    """The certificate (problem ``tile``) of a solution with ``cost``, ``method``, ``results`` and
    ``lower_bounds``: the instance hash of ``sha`` and ``digest``, and every method's result."""
    return Certificate(problem="tile", instance_sha256=instance_hash(sha, digest), objective=objective,
                       upper_bound=float(solution.cost), lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, "options": options,
                                "results": [{"method": r.method, "cost": r.cost, "status": r.status,
                                             "seconds": r.seconds, "note": r.note} for r in solution.results]})
