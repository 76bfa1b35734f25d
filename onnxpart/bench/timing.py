"""Timing one call the way an inference benchmark does: warm-up calls first (allocations, caches, lazy
kernel setup), then ``runs`` timed calls on :func:`time.perf_counter`; the median is the answer and the
spread beside it (quartiles, min, max), because one slow run (a page fault, a scheduler tick) must not
move the number. ``min_seconds`` keeps timing past ``runs`` until that much time has passed (Google
Benchmark's ``min_time``): a shared VM's speed moves by 20–50 % from one half-second to the next, so a fast
file's few runs would otherwise all fall in one slow (or fast) spell. Units compared with one another (a
pipeline's stages, a file and its rematerialized version) are timed in rounds, each round calling every unit
once, so that a slow minute of a shared machine slows them all alike instead of the one timed then."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Seconds of ``runs`` timed calls: median, first and third quartile, min, max."""

    median: float
    q1: float
    q3: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Timing":
        values = np.asarray(samples, dtype=float)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return cls(float(median), float(q1), float(q3), float(values.min()), float(values.max()), len(values))

    def to_dict(self, suffix: str = "_s") -> dict:
        """The numbers by name, each with ``suffix`` (seconds'; "" for a timing of ratios)."""
        return {f"median{suffix}": self.median, f"q1{suffix}": self.q1, f"q3{suffix}": self.q3,
                f"min{suffix}": self.low, f"max{suffix}": self.high, "runs": self.runs}


def time_calls(call: Callable[[], object], warmup: int, runs: int, min_seconds: float = 0.0,
               most: int | None = None) -> Timing:
    """``warmup`` untimed calls, then the :class:`Timing` of ``runs`` timed ones (more until
    ``min_seconds`` have passed, up to ``most`` in all)."""
    return time_rounds([call], warmup, runs, min_seconds, most)[0]


def time_rounds(calls: Sequence[Callable[[], object]], warmup: int, runs: int, min_seconds: float = 0.0,
                most: int | None = None) -> list[Timing]:
    """``warmup`` untimed rounds, then ``runs`` timed rounds — more, until ``min_seconds`` have passed since
    the first, up to ``most`` rounds in all (None: no cap) — each calling every one of ``calls`` once in
    turn: the :class:`Timing` of each call."""
    if not calls:
        return []
    for _ in range(warmup):
        for call in calls:
            call()
    samples: list[list[float]] = [[] for _ in calls]
    until = time.perf_counter() + min_seconds
    while len(samples[0]) < runs or (time.perf_counter() < until and (most is None or len(samples[0]) < most)):
        for call, times in zip(calls, samples):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return [Timing.of(times) for times in samples]


def stream_period(done: Sequence[float]) -> float:
    """Seconds per input of a stream whose results came out at the times ``done`` (at least two): the mean
    interval, first to last completion. A pipeline's results often come out in bunches (one fast gap, one
    slow), where the median gap is either mode and not the rate: completions at 0, 1, 2, 12, 13, 14, 24 ms
    have a median gap of 1 ms and a period of 4 ms."""
    return (done[-1] - done[0]) / (len(done) - 1)


@dataclass(frozen=True)
class Turns:
    """A pipeline measured in turns (:func:`in_turns`): each stream's period, each single input's seconds, and
    each round's speed-up (its single inputs' median over its stream's period)."""

    periods: list[float]
    singles: list[float]
    speed_ups: list[float]


def in_turns(stream: Callable[[int], Sequence[float]], one: Callable[[], float], count: int, runs: int,
             min_seconds: float = 0.0) -> Turns:
    """Rounds of a pipeline's two ways to run, in turn — ``stream(count)`` (the completion times of ``count``
    inputs put in at once), then ``count`` calls of ``one()`` (the seconds of one input through the empty
    pipeline) — until at least ``runs`` single inputs have run and ``min_seconds`` have passed. A round's
    speed-up compares the two a few milliseconds apart, so a shared machine's drift (its speed moves by up to
    40 % between 10-second windows here) slows both alike; the stream's period alone against a prediction made
    minutes before carries the drift whole."""
    periods: list[float] = []
    singles: list[float] = []
    speed_ups: list[float] = []
    until = time.perf_counter() + min_seconds
    while len(singles) < runs or time.perf_counter() < until:
        periods.append(stream_period(stream(count)))
        mine = [one() for _ in range(count)]
        singles += mine
        speed_ups.append(float(np.median(mine)) / periods[-1] if periods[-1] > 0 else 0.0)
    return Turns(periods, singles, speed_ups)


@dataclass(frozen=True)
class Streamed:
    """What a pipeline's measurement reports: the period of its streams, the latency of one input at a time,
    the speed-up measured in turns (:func:`in_turns`), and each worker's busy time per streamed input."""

    period: Timing
    latency: Timing
    speed_up: Timing
    busy: list[Timing]

    @classmethod
    def of(cls, turns: Turns, busy: Sequence[Sequence[float]]) -> "Streamed":
        """From the rounds and, per streamed input, every worker's busy seconds."""
        return cls(Timing.of(turns.periods), Timing.of(turns.singles), Timing.of(turns.speed_ups),
                   [Timing.of(times) for times in zip(*busy)])
