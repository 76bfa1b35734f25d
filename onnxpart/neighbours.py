"""Busy neighbours: processes that run a model over and over on the cores a measurement leaves free, so that
what it measures is what a pipeline's stage does beside the other stages.

A pipeline's stage never runs alone: the other workers share the machine's last-level cache and memory
bandwidth. On a 2-core VM a stage's busy time in a two-stage pipeline was 1.32–1.61 × its time alone
(BENCHMARKS.md, "bench"), which a per-op profile taken alone cannot predict. ``annotate --cost measured
--beside N`` profiles with N neighbours running the model, and ``bench --beside N`` times each stage with
the same neighbours, so that the prediction and the measurement describe the same conditions.

Each neighbour is forked inside :func:`onnxpart.interrupts.forking`, bound to its parent
(:func:`onnxpart.children.bound_to_parent`), pinned to its own ``threads`` cores, builds its own session and
says so, then runs until it is ended. The measuring process runs on the first ``threads`` cores meanwhile and
gets its cores back after. A neighbour that fails is an error; however the block ends, every neighbour is
ended (:func:`onnxpart.children.end`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
from collections.abc import Callable, Iterator
from typing import Any

from onnxpart import children, interrupts
from onnxpart.errors import UserError

#: seconds between liveness checks while a neighbour builds its session
POLL = 0.5


@contextlib.contextmanager
def beside(count: int, threads: int, prepare: Callable[[], Callable[[], Any]]) -> Iterator[None]:
    """Run the block on this process's first ``threads`` cores while ``count`` neighbours, each on the next
    ``threads`` cores, call what ``prepare()`` returns them (a session's run on its inputs) in a loop (module
    docstring); ``count`` 0 runs the block as it is."""
    if count == 0:
        yield
        return
    cores = sorted(os.sched_getaffinity(0))
    if threads < 1:
        raise UserError(f"--beside {count} needs --threads: each neighbour and the measurement get that many cores")
    if (count + 1) * threads > len(cores):
        raise UserError(f"--beside {count} with --threads {threads} needs {(count + 1) * threads} cores; this "
                        f"process may use {len(cores)}")
    context = multiprocessing.get_context("fork")
    control = context.Queue()
    processes = [context.Process(target=_neighbour, daemon=True, name=f"onnxpart-neighbour-{i}",
                                 args=(cores[(i + 1) * threads:(i + 2) * threads], prepare, control, os.getpid()))
                 for i in range(count)]
    try:
        for process in processes:
            with interrupts.forking():
                process.start()
        for _ in processes:
            _ready(control, processes)
        os.sched_setaffinity(0, cores[:threads])
        yield
        _ready(control, processes, timeout=0)
    finally:
        os.sched_setaffinity(0, cores)
        children.end(processes)
        control.cancel_join_thread()
        control.close()


def _ready(control, processes, timeout: float | None = None) -> None:
    """Wait for one neighbour's ``ready`` (``timeout`` 0: only check that none failed or died)."""
    while True:
        try:
            message = control.get(timeout=POLL) if timeout is None else control.get_nowait()
        except queue.Empty:
            message = None
        if message is not None and message[0] == "error":
            raise UserError(f"busy neighbour: {message[1]}")
        dead = next((p for p in processes if not p.is_alive()), None)
        if dead is not None:
            raise UserError(f"busy neighbour {dead.name} ended with exit code {dead.exitcode}")
        if message is not None or timeout is not None:
            return


def _neighbour(cores, prepare, control, parent: int) -> None:
    """A neighbour's life: pinned to ``cores``, prepare its call, say so, call it until ended."""
    children.bound_to_parent(parent)
    try:
        os.sched_setaffinity(0, cores)
        call = prepare()
        control.put(("ready",))
        while True:
            call()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        control.put(("error", " ".join(f"{type(exc).__name__}: {exc}".split())[:300]))
