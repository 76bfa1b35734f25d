"""The anytime board: what every strategy knows at any moment of a run — its incumbent (the best
solution's objective, an upper bound for minimization), every proven lower bound (finished, with
method/status/solver/seconds, and live ones posted by solvers still running), the best of them by the
one rule (:func:`onnxpart.certificate.best_bound`), and the gap — and the one progress record every command renders the same way.

Bounds are never incumbents: a :class:`~onnxpart.certificate.LowerBound` is a solver's proven bound or a
formula with a proof. A job ended before it returned keeps the last bound it posted, with status
``interrupted``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from onnxpart.certificate import LowerBound, best_bound

#: relative slack under which an incumbent counts as meeting a bound (solver tolerances are ~1e-9)
CLOSE = 1e-9


class Status(str, Enum):
    """How a method or bound ended (the ``status`` strings of certificates)."""

    OPTIMAL = "optimal"  # proven optimal (or the bound is the optimum)
    TIME_LIMIT = "time_limit"  # stopped by its time limit, with its best proven bound
    INTERRUPTED = "interrupted"  # ended early (the gap closed elsewhere), bound as posted
    BOUND = "bound"  # a closed formula
    INFEASIBLE = "infeasible"
    ERROR = "error"


@dataclass(frozen=True)
class Progress:
    """One progress record: seconds since the start, incumbent (UB), best proven bound (LB), phase."""

    seconds: float
    upper: float
    lower: float
    phase: str

    @property
    def gap(self) -> float:
        if not math.isfinite(self.upper) or self.upper <= 0:
            return 0.0 if self.upper == 0 else 1.0
        return max(0.0, 1.0 - self.lower / self.upper)


class Board:
    """Incumbent, bounds and progress of one run (minimization)."""

    def __init__(self, on_progress: Callable[[Progress], None] | None = None, floor: float = 0.0):
        self.start = time.perf_counter()
        self.on_progress = on_progress
        self.floor = floor  # a bound every solution has (e.g. 0); the lower bound never reads below it
        self.incumbent = math.inf
        self.found_by = ""
        self.bounds: list[LowerBound] = []
        self.live: dict[str, float] = {}

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start

    @property
    def lower(self) -> float:
        """The best proven bound so far, finished or posted."""
        return max([self.floor, best_bound(self.bounds) or self.floor, *self.live.values()])

    def meets(self, value: float) -> bool:
        """An objective ``value`` meets the best proven bound (within :data:`CLOSE`)."""
        return value <= self.lower * (1 + CLOSE)

    def closed(self) -> bool:
        """The incumbent meets a proven bound: nothing left to search or prove."""
        return self.meets(self.incumbent)

    def offer(self, value: float, how: str) -> bool:
        """A solution of objective ``value`` found by ``how``; True (and a progress report) if it is better."""
        if value < self.incumbent - 1e-12 * max(1.0, abs(value)):
            self.incumbent, self.found_by = value, how
            self.report(how)
            return True
        return False

    def add(self, bound: LowerBound) -> None:
        """A finished bound (its method once: a later entry for the same method is ignored)."""
        if all(b.method != bound.method for b in self.bounds):
            self.bounds.append(bound)

    def post(self, method: str, value: float) -> bool:
        """A running solver's proven bound; True if it raised the best bound."""
        rose = value > self.lower
        self.live[method] = max(self.live.get(method, -math.inf), value)
        return rose

    def posted_bounds(self, sources: dict[str, tuple[str, str]]) -> list[LowerBound]:
        """Bounds posted by jobs that never returned, as ``interrupted`` entries (proven when posted);
        ``sources`` gives each method's solver and note."""
        names = {b.method for b in self.bounds}
        return [LowerBound(method, value, Status.INTERRUPTED.value, sources[method][0], round(self.seconds, 3),
                           f"{sources[method][1]}; ended before it finished, with this bound proven")
                for method, value in sorted(self.live.items()) if method in sources and method not in names]

    def report(self, phase: str) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(self.seconds, self.incumbent, self.lower, phase))
