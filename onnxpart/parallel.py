"""Background jobs for every strategy: solvers that prove bounds (or search) in worker processes while
the main process searches, posting their proven bounds as they rise.

A :class:`Runner` runs picklable callables in forked processes, at most ``workers`` at a time, in the
order they were submitted. A job may call :func:`post_bound` (or a throttled :class:`BoundPoster`)
while it runs: the parent sees ``("bound", …)`` events before the job ends, so a bound that meets the
incumbent can end the whole run early. :meth:`Runner.shutdown` with ``wait=False`` terminates the
running workers (a HiGHS or CP-SAT run cannot be interrupted from outside its process) — each worker
is a process the runner started itself, so no private attribute of a pool is needed — and the runner
as a context manager leaves no process behind on an error, Ctrl-C or SIGTERM (which the parent turns into
an exception, :mod:`onnxpart.interrupts`; a worker keeps SIGTERM's default and ignores SIGINT).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import queue as queue_module
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onnxpart import interrupts
from onnxpart.strategy import cores

log = logging.getLogger(__name__)

NICE_STEP = 5  # how much nicer than the others a job given low priority runs (:meth:`Runner.lower_priority`)
MAX_NICE = 19  # the lowest CPU priority a Linux thread can have
_POST: Callable[[str, float], None] | None = None  # in a worker: sends ("bound", job, method, value)


@dataclass(frozen=True)
class Event:
    """What :meth:`Runner.poll` reports: ``kind`` is ``bound`` (``method``, ``value``: a proven bound a
    running job posted), ``done`` (``value``: the job's return value) or ``error`` (``value``: text)."""

    kind: str
    job: int
    value: Any
    method: str | None = None


def post_bound(method: str, value: float) -> None:
    """From inside a job: report a proven bound now (a no-op outside a runner's worker)."""
    if _POST is not None:
        _POST(method, value)


class BoundPoster:
    """Posts a running solver's proven bound, times ``scale`` (the job's units back to the instance's),
    when it rises; at most every ``interval`` seconds (a rise in between goes with the next call)."""

    def __init__(self, method: str, scale: float = 1.0, interval: float = 0.2):
        self.method, self.scale, self.interval = method, scale, interval
        self.posted, self.pending, self.next = -math.inf, -math.inf, 0.0

    def __call__(self, bound: float) -> None:
        self.pending = max(self.pending, bound * self.scale)
        now = time.monotonic()
        if self.pending > self.posted and now >= self.next:
            self.posted, self.next = self.pending, now + self.interval
            post_bound(self.method, self.posted)


def _child(channel, job: int, fn: Callable, args: tuple) -> None:
    global _POST
    interrupts.in_worker()  # SIGTERM ends a worker even inside a native solve; Ctrl-C is the parent's

    def send(method: str, value: float) -> None:
        try:
            channel.put(("bound", job, value, method))
        except (OSError, ValueError):  # the parent is gone: nobody to tell
            pass

    _POST = send
    try:
        channel.put(("done", job, fn(*args), None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as an error event
        channel.put(("error", job, f"{type(exc).__name__}: {exc}"[:300], None))
    channel.close()
    channel.join_thread()


class Runner:
    """At most ``workers`` jobs (0: one per core) in forked processes; see the module doc."""

    def __init__(self, workers: int = 0):
        self.workers = cores(workers)
        self._ctx = mp.get_context("fork")  # instances are not re-pickled; no solver threads run yet
        self._channel = self._ctx.Queue()
        self._pending: list[tuple[int, Callable, tuple]] = []
        self._running: dict[int, Any] = {}
        self._next = 0
        self._closed = False

    def submit(self, fn: Callable, *args: Any) -> int:
        """Queue ``fn(*args)`` (picklable or fork-inherited); returns the job's id."""
        job, self._next = self._next, self._next + 1
        self._pending.append((job, fn, args))
        self._start_pending()
        return job

    @property
    def busy(self) -> bool:
        return bool(self._pending or self._running)

    def poll(self, timeout: float = 0.0) -> list[Event]:
        """Events since the last poll (waiting up to ``timeout`` seconds for the first one); starts queued
        jobs as workers free up, and reports a worker that died without a result as an error."""
        if not self._running and not self._pending:  # nothing can arrive: searches poll this per step
            return []
        dead = [job for job, process in self._running.items() if not process.is_alive()]
        events: list[Event] = []
        deadline = time.monotonic() + timeout
        while True:
            wait = 0.0 if events or dead else max(0.0, deadline - time.monotonic())
            try:
                kind, job, value, method = self._channel.get(timeout=wait) if wait else self._channel.get_nowait()
            except (queue_module.Empty, OSError, EOFError, ValueError):
                break
            events.append(Event(kind, job, value, method))
            if kind in ("done", "error"):
                self._reap(job)
        for job in dead:  # a worker flushes its result before it exits: none now means it was lost
            if job in self._running:
                code = self._running[job].exitcode
                self._reap(job)
                events.append(Event("error", job, f"worker exited with code {code} without a result"))
        self._start_pending()
        return events

    def lower_priority(self, job: int) -> bool:
        """Give running ``job`` a lower CPU priority: :data:`NICE_STEP` nicer than it was (at most
        :data:`MAX_NICE`), so that the other processes get most of the cores and it runs on, slower. Under
        Linux's scheduler a thread five steps nicer weighs 335 against 1024: beside two busy processes on two
        cores it gets about a seventh of the CPU instead of a third. Every thread of its process is reniced:
        on Linux a nice value is per thread and a solver's threads are already running. False if ``job`` is
        not running. (A nice value can only rise without privileges: there is no way back.)"""
        process = self._running.get(job)
        if process is None or process.pid is None:
            return False
        try:
            threads = [int(tid) for tid in os.listdir(f"/proc/{process.pid}/task")]
        except OSError:  # no /proc (not Linux) or the process just ended: its main thread only
            threads = [process.pid]
        for tid in threads:
            try:
                nice = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICE, nice + NICE_STEP))
            except OSError:  # the thread ended meanwhile
                pass
        return True

    def wait(self, stop: Callable[[list[Event]], bool], interval: float = 0.2) -> None:
        """Poll until no job is left or ``stop(events)`` says so."""
        while self.busy:
            if stop(self.poll(interval)):
                return

    def shutdown(self, wait: bool = True, until: float = math.inf) -> list[Event]:
        """Let the running jobs finish (``wait``, at most until ``until`` on ``time.monotonic()``) and
        return their last events, then terminate what is still running and drop the queued ones. Either
        way every worker is joined."""
        events: list[Event] = []
        if self._closed:
            return events
        if wait:
            while self.busy and time.monotonic() < until:
                events += self.poll(0.2)
        self._pending.clear()
        for process in self._running.values():
            process.terminate()
        for process in self._running.values():
            process.join(timeout=5)
            if process.is_alive():  # a worker that ignores SIGTERM (stuck in native code) is killed
                process.kill()
                process.join()
        self._running.clear()
        self._channel.cancel_join_thread()
        self._channel.close()
        self._closed = True
        return events

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._running or self._pending:
            self.shutdown(wait=False)

    # ---------------------------------------------------------------------------------- internals
    def _start_pending(self) -> None:
        """Start queued jobs while workers are free. Each fork and its record are one block
        (:func:`onnxpart.interrupts.forking`): a signal raised between them would leave a worker nobody
        ends, running its job to its time limit and holding the command's output pipes open (seen as a
        SIGTERM that did not stop partition)."""
        while self._pending and len(self._running) < self.workers:
            job, fn, args = self._pending.pop(0)
            process = self._ctx.Process(target=_child, args=(self._channel, job, fn, args), daemon=True,
                                        name=f"onnxpart-job-{job}")
            with interrupts.forking():
                process.start()
                self._running[job] = process

    def _reap(self, job: int) -> None:
        process = self._running.pop(job, None)
        if process is not None:
            process.join(timeout=5)
