"""One run's time: one deadline on one monotonic clock, and every share of it computed here.

A schedule run gets ``--time-limit`` seconds in all. :class:`Budget` holds the deadline on
:func:`now` (``time.perf_counter``: monotonic and, on Linux, the same system-wide clock in every process,
so a deadline can be handed to a worker process); a method's share is its weight over the weights of
the methods still to run, of the time left (:meth:`Budget.share`), never less than :data:`MIN_SHARE`
(a solver given no time at all would report nothing). The wall clock only caps the searches: their
answers come from deterministic budgets — iteration counts, CP-SAT's deterministic time
(:func:`deterministic_seconds`), LP optima — so the same seed gives the same files on any machine load.

(Round 1 of issue 27: the shared ``onnxpart.strategy`` budget replaces this module.)
"""

from __future__ import annotations

import time

#: The least time a method is given, seconds.
MIN_SHARE = 0.05
#: CP-SAT deterministic seconds per wall-clock second on module models, an estimate on the low side (0.08–0.4
#: measured on a loaded 2-core machine): the deterministic budget then usually ends a solve before its wall
#: deadline does. On the benchmark's 1-channel stack of ten modules at T = 60 s with one worker, 0.1 ended
#: SPLIT after 26 s (LB/UB 0.895), 0.2 after 39 s (0.959) with no solve cut by the wall clock, 0.3 at the wall
#: clock with 40 solves cut (0.972, but no longer reproducible).
DET_PER_SECOND = 0.2


def now() -> float:
    """The one clock of a run (seconds, monotonic)."""
    return time.perf_counter()


def deterministic_seconds(seconds: float) -> float:
    """CP-SAT deterministic time standing for ``seconds`` of the wall clock (:data:`DET_PER_SECOND`)."""
    return DET_PER_SECOND * seconds


class Budget:
    """``seconds`` from ``start`` (default: now): the deadline every share of the run is cut from."""

    def __init__(self, seconds: float, start: float | None = None):
        self.start = now() if start is None else start
        self.seconds = seconds
        self.deadline = self.start + seconds

    def left(self) -> float:
        """Seconds until the deadline (negative past it)."""
        return self.deadline - now()

    def share(self, weight: float = 1.0, pending: float = 1.0) -> float:
        """``weight`` out of the ``pending`` weights still to run (this one's included) of the time left,
        at least :data:`MIN_SHARE`."""
        return max(MIN_SHARE, (self.deadline - now()) * weight / pending)

    def until(self, deadline: float) -> "Budget":
        """The part of this budget that ends at ``deadline`` (a phase that must leave the rest)."""
        return Budget(deadline - self.start, self.start)

    def part(self, fraction: float) -> "Budget":
        """A budget of ``fraction`` of the time left, from now."""
        return Budget(max(0.0, self.left()) * fraction)
