"""Busy neighbours (``--beside``): they run while the block runs, on their own cores, and nothing of them is
left after it however it ends; the profile's runs honour ``--min-time`` up to their cap."""

from __future__ import annotations

import multiprocessing
import queue
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


def test_timing_runs_past_runs_until_min_time_and_no_further_than_its_cap():
    from onnxpart.bench.timing import time_calls

    session = _Session()
    start = time.perf_counter()
    timing = time_calls(lambda: session.run(None, {}), warmup=1, runs=2, min_seconds=0.15)
    assert timing.runs > 2 and time.perf_counter() - start >= 0.15 and session.calls == timing.runs + 1
    assert time_calls(lambda: _Session().run(None, {}), 0, 2, min_seconds=60, most=4).runs == 4
    assert time_calls(lambda: _Session().run(None, {}), 0, 6, min_seconds=60, most=4).runs == 6  # runs first


def test_the_profile_stops_at_its_cap_of_runs(monkeypatch):
    """The profiler keeps every kernel record: however long --min-time, the profile takes MAX_RUNS runs."""
    from onnxpart import runtime
    from onnxpart.cost_models import measured
    from onnxpart.onnx_io import load_graph
    from tests.conftest import light

    counted = []
    real = runtime.kernel_medians
    monkeypatch.setattr(measured, "MAX_RUNS", 4)
    monkeypatch.setattr(runtime, "kernel_medians", lambda events, runs: counted.append(runs) or real(events, runs))
    graph, loaded = load_graph(light("squeezenet"))
    measured.measured_costs(graph, loaded, measured.Profiling(runs=2, warmup=0, min_seconds=60))
    assert counted == [4]


class _LateQueue:
    """A control queue whose one message arrives just after the first wait for it timed out."""

    def __init__(self):
        self.items, self.waits = [], 0

    def get(self, timeout):
        self.waits += 1
        assert self.waits < 5, "the message was dropped"
        if not self.items:
            self.items.append(("ready",))  # it arrives now, between the timeout and the liveness check
            raise queue.Empty
        return self.items.pop(0)

    def get_nowait(self):
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)


def test_waiting_on_the_control_queue_never_drops_the_message_waited_for():
    """The liveness check between two waits reads the control queue for errors; where that queue is the one
    waited on, a ``ready`` read there would be lost and the wait would never end."""
    from onnxpart.children import receive

    control = _LateQueue()
    assert receive(control, control, [], "busy neighbour") == ("ready",)
