"""HEFT's insertion search (:class:`onnxpart.schedule.common.list_scheduling.Timeline`) against a plain
scan of the busy list: the same earliest start for every query, on timelines long enough that the search
passes its Python gaps and ends in its numpy comparison, with zero-length jobs and jobs that fit a gap
exactly (the float comparison ``start ≥ end + duration`` must be the same one)."""

from __future__ import annotations

import numpy as np

from onnxpart.schedule.common.list_scheduling import Timeline


def scan(busy: list[tuple[float, float]], ready: float, duration: float) -> float:
    """The earliest start ≥ ``ready`` overlapping none of ``busy`` (sorted): try ``ready``, then each end."""
    for t in [ready] + [e for _, e in busy if e > ready]:
        if all(t + duration <= s or t >= e for s, e in busy):
            return t
    raise AssertionError("the last end always fits")


def test_earliest_matches_a_scan_of_the_busy_list():
    """Fails if the search skips a gap that fits (e.g. the numpy part off by one) or returns one that
    overlaps a job, or if ``add`` breaks the order of zero-length jobs at a shared start."""
    rng = np.random.default_rng(3)
    for _ in range(3):
        timeline, busy = Timeline(), []
        for _ in range(200):
            ready = float(rng.integers(0, 400)) / 4  # quarters: ties and exact fits
            duration = float(rng.choice([0.0, 0.25, 0.5, 1.0, 3.0, 12.0]))
            start = timeline.earliest(ready, duration)
            assert start == scan(busy, ready, duration), (ready, duration)
            timeline.add(start, start + duration)
            busy = sorted(busy + [(start, start + duration)])
