"""The shared runner (background jobs with live bounds) and the anytime board."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onnxpart.board import Board, Status
from onnxpart.certificate import LowerBound, best_bound
from onnxpart.parallel import Runner, post_bound


def square(x):
    return x * x


def posts_then_returns(values):
    for value in values:
        post_bound("job", value)
    return "done"


def fails():
    raise ValueError("bad input to the job")


def dies():
    os._exit(3)


def sleeps(seconds):
    time.sleep(seconds)
    return os.getpid()


def nice_of_threads_once_lowered(start: int):
    """Start a second thread (a solver's), say so, then wait until this process is reniced from ``start``;
    return the nice value of every thread."""
    import threading

    done = threading.Event()
    helper = threading.Thread(target=done.wait, daemon=True)
    helper.start()
    post_bound("started", 1.0)
    deadline = time.monotonic() + 10
    while os.getpriority(os.PRIO_PROCESS, 0) == start and time.monotonic() < deadline:
        time.sleep(0.02)
    nice = sorted(os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir("/proc/self/task"))
    done.set()
    return nice


def collect(runner, timeout=20.0):
    events, deadline = [], time.monotonic() + timeout
    while runner.busy and time.monotonic() < deadline:
        events += runner.poll(0.1)
    return events


def test_jobs_run_at_most_workers_at_a_time_and_return_in_events():
    with Runner(workers=2) as runner:
        jobs = [runner.submit(square, x) for x in range(5)]
        assert len(runner._running) <= 2
        events = collect(runner)
    assert sorted((e.job, e.value) for e in events if e.kind == "done") == [(j, j * j) for j in jobs]


def test_posted_bounds_arrive_before_the_result():
    with Runner(workers=1) as runner:
        runner.submit(posts_then_returns, [1.0, 2.5])
        events = collect(runner)
    kinds = [(e.kind, e.method, e.value) for e in events]
    assert kinds == [("bound", "job", 1.0), ("bound", "job", 2.5), ("done", None, "done")]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads are listed under /proc on Linux")
def test_lower_priority_renices_every_thread_of_a_running_job_and_only_a_running_one():
    from onnxpart.parallel import MAX_NICE, NICE_STEP

    start = os.getpriority(os.PRIO_PROCESS, 0)
    with Runner(workers=1) as runner:
        job = runner.submit(nice_of_threads_once_lowered, start)
        events = []
        while not any(e.kind == "bound" for e in events):
            events += runner.poll(0.1)
        assert runner.lower_priority(job)
        done = [e for e in collect(runner) if e.kind == "done"]
        assert not runner.lower_priority(job)  # finished: nothing to renice
    nice = done[0].value  # the job's threads: its own, the solver's and the result queue's feeder
    assert len(nice) >= 2 and set(nice) == {min(MAX_NICE, start + NICE_STEP)}
    assert os.getpriority(os.PRIO_PROCESS, 0) == start  # the parent keeps its priority


def test_a_failing_or_dying_job_is_an_error_event_not_a_crash():
    with Runner(workers=2) as runner:
        runner.submit(fails)
        runner.submit(dies)
        events = collect(runner)
    errors = sorted(e.value for e in events if e.kind == "error")
    assert len(errors) == 2 and "ValueError: bad input" in errors[0] and "code 3" in errors[1]


def test_shutdown_without_waiting_leaves_no_process_behind():
    runner = Runner(workers=2)
    runner.submit(sleeps, 60)
    runner.submit(sleeps, 60)
    runner.submit(sleeps, 60)  # queued: never started
    processes = list(runner._running.values())
    runner.shutdown(wait=False)
    assert all(not p.is_alive() for p in processes) and not runner.busy
    assert runner.shutdown(wait=False) == []  # idempotent


def test_an_exception_in_the_parent_stops_the_workers():
    with pytest.raises(KeyboardInterrupt):
        with Runner(workers=1) as runner:
            runner.submit(sleeps, 60)
            process = next(iter(runner._running.values()))
            raise KeyboardInterrupt
    assert not process.is_alive()


#: A command (interrupts installed) whose SIGTERM arrives just after its worker was forked, before the
#: runner recorded it: prints the worker's pid, then "terminated".
SIGNAL_AT_FORK = """
import multiprocessing.context, os, signal, time
from onnxpart import interrupts, parallel
interrupts.install()
fork = multiprocessing.context.ForkProcess.start
def start(process):
    fork(process)
    print(process.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
multiprocessing.context.ForkProcess.start = start
try:
    with parallel.Runner(workers=1) as runner:
        runner.submit(time.sleep, 60)
        runner.wait(lambda events: False)
except interrupts.Terminated:
    print("terminated", flush=True)
"""


def test_a_signal_just_after_a_fork_still_ends_that_worker():
    """The worker forked when SIGTERM arrived is ended with the others (before, the signal was raised
    inside ``start()``, the runner never recorded the worker, and it ran on — holding the command's
    output pipes, so a pipeline waited for its whole time limit)."""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT_FORK], capture_output=True, text=True, timeout=30)
    words = proc.stdout.split()
    assert len(words) == 2 and words[0].isdigit(), proc.stdout + proc.stderr
    pid, said = int(words[0]), words[1]
    deadline = time.monotonic() + 10
    try:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said == "terminated" and not _alive(pid), proc.stderr
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


#: A process forked inside a deferred block (as the runner forks its workers) and sent SIGTERM before it
#: reset its handlers; prints "ended" once the child is gone.
SIGNAL_BEFORE_IN_WORKER = """
import os, signal, time
from onnxpart import interrupts
interrupts.install()
with interrupts.deferred():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
time.sleep(0.2)  # past the fork: CPython drops a signal that reaches a child inside os.fork()
os.kill(pid, signal.SIGTERM)
os.waitpid(pid, 0)
print("ended", flush=True)
"""


def test_a_worker_signalled_before_it_reset_its_handlers_still_ends():
    """The block the worker inherited is its parent's: the worker does not hold the signal back (if it did,
    a runner's ``terminate()`` would not end it, and it would run its job to the end)."""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_BEFORE_IN_WORKER], capture_output=True, text=True,
                          timeout=20)
    assert proc.stdout.split() == ["ended"], proc.stderr


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_board_keeps_the_best_incumbent_and_the_best_proven_bound():
    records = []
    board = Board(records.append)
    assert board.offer(10.0, "first") and not board.offer(10.0, "same") and board.offer(8.0, "better")
    board.add(LowerBound("simple", 5.0, Status.BOUND.value, "formula", 0.0))
    board.add(LowerBound("simple", 7.0, Status.BOUND.value, "formula", 0.0))  # a method counts once
    assert board.lower == 5.0 and best_bound(board.bounds) == 5.0
    assert board.post("exact", 6.0) and not board.post("exact", 5.5)
    assert board.lower == 6.0 and not board.closed()
    board.post("exact", 8.0)
    assert board.closed()
    entries = board.posted_bounds({"exact": ("highs", "the MIP")})
    assert [(b.method, b.value, b.status) for b in entries] == [("exact", 8.0, "interrupted")]
    assert [r.phase for r in records] == ["first", "better"] and records[-1].gap == 1.0  # no bound yet then
    board.report("bounds")
    assert records[-1].lower == records[-1].upper == 8.0 and records[-1].gap == 0.0
