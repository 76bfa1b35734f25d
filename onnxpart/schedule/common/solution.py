"""What a schedule run gives, for either objective: each method's result and the run's Solution.

* :class:`HeuristicResult` and :class:`ExactResult` — what a heuristic or an exact solve returns (a
  schedule of either objective: :class:`onnxpart.schedule.latency.simulator.Schedule` or
  :class:`onnxpart.schedule.throughput.simulator.BatchSchedule`).
* :class:`Solution` — the best validated schedule, every method's result (:class:`onnxpart.strategy.MethodResult`,
  its ``value`` the makespan), every proven lower bound (of the latency, or of the batch makespan ``C`` for
  throughput), with the best bound and the gap by the certificate's one rule (:class:`~onnxpart.certificate.Bounded`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from onnxpart.certificate import Bounded, LowerBound
from onnxpart.strategy import MethodResult


def shortest(*schedules):
    """The schedule of least makespan among ``schedules`` (the first of equal ones; None entries
    skipped), None if there is none."""
    pool = [s for s in schedules if s is not None]
    return min(pool, key=lambda s: s.makespan) if pool else None


@dataclass
class HeuristicResult:
    """A heuristic's schedule (None: it found none), seconds, fitness evaluations (SA, EA), and whether its
    time limit ended it before it had one."""

    method: str
    schedule: Any
    seconds: float
    evaluations: int = 0
    timed_out: bool = False

    @property
    def makespan(self) -> float:
        return self.schedule.makespan if self.schedule is not None else math.inf

    @property
    def mapping(self):
        return self.schedule.mapping


@dataclass
class ExactResult:
    method: str  # "cpsat" | "milp"
    status: str  # "optimal" | "time_limit" | "infeasible" | "error"
    schedule: Any  # best incumbent (the warm start if the solver found nothing better)
    bound: float | None  # proven lower bound on the makespan, seconds (None: nothing proven)
    seconds: float
    solver: str
    note: str = ""

    @property
    def makespan(self) -> float:
        return self.schedule.makespan if self.schedule is not None else math.inf


@dataclass
class Solution(Bounded):
    instance: Any  # the :class:`onnxpart.schedule.common.instance.Instance` solved
    schedule: Any
    method: str  # the method whose schedule is returned
    results: list[MethodResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    @property
    def mapping(self):
        return self.schedule.mapping

    @property
    def makespan(self) -> float:
        return self.schedule.makespan

    @property
    def value(self) -> float:
        """The objective (:class:`~onnxpart.certificate.Bounded`): the makespan."""
        return self.schedule.makespan

    @property
    def throughput(self) -> float:
        """Inputs per second: ``L / C`` for a batched schedule, ``1 / latency`` otherwise."""
        return self.schedule.throughput
