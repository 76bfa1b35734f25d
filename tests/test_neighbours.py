"""Busy neighbours (``--beside``): they run while the block runs, on their own cores, and nothing of them is
left after it however it ends; the profile's runs honour ``--min-time`` up to their cap."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from onnxpart.errors import UserError
from onnxpart.neighbours import beside

TWO_CORES = len(os.sched_getaffinity(0)) >= 2


def _counting(counter):
    """A neighbour's prepare: its call counts in ``counter`` (shared memory), so the test sees it run."""
    def prepare():
        def call():
            with counter.get_lock():
                counter.value += 1
            time.sleep(0.001)
        return call
    return prepare


def _neighbours() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("onnxpart-neighbour")]


@pytest.mark.skipif(not TWO_CORES, reason="a neighbour needs a core of its own: this process may use one")
def test_a_neighbour_runs_on_its_own_core_during_the_block_and_ends_with_it():
    cores = sorted(os.sched_getaffinity(0))
    counter = multiprocessing.get_context("fork").Value("l", 0)
    with beside(1, 1, _counting(counter)):
        assert sorted(os.sched_getaffinity(0)) == cores[:1]  # the measurement on the first core
        start = counter.value
        time.sleep(0.2)
        assert counter.value > start  # the neighbour calls on while the block runs
        assert len(_neighbours()) == 1
    assert sorted(os.sched_getaffinity(0)) == cores
    assert _neighbours() == []
    stopped = counter.value
    time.sleep(0.1)
    assert counter.value == stopped


@pytest.mark.skipif(not TWO_CORES, reason="a neighbour needs a core of its own: this process may use one")
def test_an_error_in_the_block_ends_the_neighbours_too():
    counter = multiprocessing.get_context("fork").Value("l", 0)
    with pytest.raises(RuntimeError, match="inside"):
        with beside(1, 1, _counting(counter)):
            raise RuntimeError("inside")
    assert _neighbours() == []


@pytest.mark.skipif(not TWO_CORES, reason="a neighbour needs a core of its own: this process may use one")
def test_a_neighbour_that_cannot_start_is_one_error():
    def broken():
        raise ValueError("no such model")

    with pytest.raises(UserError, match="busy neighbour: ValueError: no such model"):
        with beside(1, 1, broken):
            pass
    assert _neighbours() == []


def test_beside_needs_threads_and_enough_cores():
    with pytest.raises(UserError, match="needs --threads"):
        with beside(1, 0, _counting(None)):
            pass
    cores = len(os.sched_getaffinity(0))
    with pytest.raises(UserError, match=f"needs {2 * cores} cores; this process may use {cores}"):
        with beside(1, cores, _counting(None)):
            pass
    with beside(0, 0, _counting(None)):  # no neighbours: the block runs as it is
        assert _neighbours() == []


class _Session:
    """A session whose run takes 10 ms and is counted."""

    def __init__(self):
        self.calls = 0

    def run(self, _names, _feeds):
        self.calls += 1
        time.sleep(0.01)


def test_the_profile_runs_past_runs_until_min_time_and_no_further_than_its_cap(monkeypatch):
    from onnxpart.cost_models import measured
    from onnxpart.cost_models.measured import Profiling, _runs

    session = _Session()
    walls = _runs(session, {}, Profiling(runs=2, warmup=1, min_seconds=0.15))
    assert len(walls) > 2 and sum(walls) >= 0.15 - 0.01 and session.calls == len(walls) + 1
    monkeypatch.setattr(measured, "MAX_RUNS", 4)
    assert len(_runs(_Session(), {}, Profiling(runs=2, warmup=0, min_seconds=60))) == 4
    assert len(_runs(_Session(), {}, Profiling(runs=6, warmup=0, min_seconds=60))) == 6  # runs first
