"""One run's time (:mod:`onnxpart.schedule.common.budget`): every share computed in one place from the
methods' weights, on one clock (here a fake one, so the shares are exact)."""

from __future__ import annotations

import pytest

from onnxpart.board import Board
from onnxpart.schedule.common import budget
from onnxpart.schedule.common.methods import EXACT, HEURISTIC, SEARCH, Context, Method, Run, run_methods


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(budget, "now", fake)
    return fake


def test_a_share_is_its_weight_over_the_weights_still_to_run_of_the_time_left(clock):
    b = budget.Budget(12.0)
    assert b.deadline == 112.0 and b.share(1, 4) == 3.0 and b.share(2, 4) == 6.0
    clock.t = 110.0
    assert b.left() == 2.0 and b.share(1, 2) == 1.0
    clock.t = 120.0  # past the deadline: the least share, never nothing
    assert b.left() == -8.0 and b.share(1, 2) == budget.MIN_SHARE


def test_a_phase_ends_before_the_deadline_and_a_part_is_a_fraction_of_what_is_left(clock):
    b = budget.Budget(10.0)
    first_half = b.until(b.deadline - 5.0)
    assert first_half.deadline == 105.0 and first_half.share(1, 1) == 5.0
    clock.t = 104.0
    assert b.part(0.5).deadline == 107.0


def test_deterministic_seconds_follow_the_wall_clock_rate(monkeypatch):
    monkeypatch.setattr(budget, "DET_PER_SECOND", 0.5)
    assert budget.deterministic_seconds(8.0) == 4.0


def test_run_methods_gives_each_weighted_method_its_share_and_the_rest_no_limit(clock):
    """Weight 0 runs to its end (inf); each weighted method gets its weight over the weights left, and
    what one leaves unused goes to the next."""
    given = {}

    def record(spent):
        def run(name, context, seconds):
            given[name] = seconds
            clock.t += spent
        return run

    methods = [Method("quick", HEURISTIC, record(0.0), 0, ""), Method("sa", SEARCH, record(1.0), 1, ""),
               Method("big", EXACT, record(1.0), 2, ""), Method("last", EXACT, record(0.0), 1, "")]
    table = {m.name: m for m in methods}
    phases = []
    run = Run(budget.Budget(8.0), Board(lambda progress: phases.append(progress.phase)), lambda s: [], "schedule")
    run_methods(Context(None, None, run, lambda inst: None), table, ["quick", "sa", "big", "last"], run.budget)
    assert given == {"quick": float("inf"), "sa": 2.0, "big": 7.0 * 2 / 3, "last": 6.0}
    assert phases == ["big", "last"]  # each exact method's end is reported
