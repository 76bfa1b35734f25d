"""The bound lane gives the exact MIP a lower CPU priority once another job proves more than it
(:meth:`onnxpart.partition.bound_lane.BoundLane._yield_exact`), and not before a quarter of its time."""

from __future__ import annotations

import time

import pytest

from onnxpart.board import Board
from onnxpart.partition.bound_lane import YIELD_AFTER, BoundLane

FLOOR = 10.0  # the exact MIP's objective floor: the combinatorial bounds it starts from


class RecordingRunner:
    """Takes the lane's jobs without running them; records which jobs were given low priority."""

    def __init__(self):
        self.submitted, self.lowered = [], []

    def submit(self, fn, job):
        self.submitted.append(job)
        return len(self.submitted) - 1

    def lower_priority(self, job_id):
        self.lowered.append(job_id)
        return True


def lane_with_exact_and_weighted(seconds: float) -> tuple[BoundLane, RecordingRunner, Board]:
    deadline = time.monotonic() + seconds
    jobs = [dict(kind="exact", deadline=deadline, objective_floor=FLOOR), dict(kind="weighted", deadline=deadline)]
    runner, board = RecordingRunner(), Board(floor=FLOOR)
    return BoundLane(runner, jobs, board, inst=None, k=4), runner, board


def past_the_quarter(seconds: float) -> None:
    time.sleep(YIELD_AFTER * seconds + 0.05)


def test_an_exact_mip_proving_less_than_another_job_yields_once_past_a_quarter_of_its_time():
    lane, runner, board = lane_with_exact_and_weighted(0.8)
    board.post("weighted-bottleneck", 12.0)
    lane.take([])
    assert runner.lowered == []  # too early: the MIP has not had its quarter
    past_the_quarter(0.8)
    lane.take([])
    lane.take([])
    assert runner.lowered == [0]  # the exact job (submitted first), once


@pytest.mark.parametrize("exact_bound", [None, 12.0, 13.0])
def test_an_exact_mip_proving_as_much_as_the_others_keeps_its_priority(exact_bound):
    lane, runner, board = lane_with_exact_and_weighted(0.8)
    if exact_bound is None:  # nothing posted by anyone: the floor is all that is proven
        board.post("weighted-bottleneck", FLOOR)
    else:
        board.post("weighted-bottleneck", 12.0)
        board.post("exact", exact_bound)
    past_the_quarter(0.8)
    lane.take([])
    assert runner.lowered == []


def test_an_exact_mip_that_posted_nothing_yields_to_a_bound_above_its_floor():
    lane, runner, board = lane_with_exact_and_weighted(0.8)
    board.post("weighted-bottleneck", FLOOR * 1.01)
    past_the_quarter(0.8)
    lane.take([])
    assert runner.lowered == [0]
