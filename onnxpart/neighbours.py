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
from collections.abc import Callable, Iterator
from typing import Any

from onnxpart import children, interrupts
from onnxpart.errors import UserError


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
        for _ in processes:  # each says it is ready
            children.receive(control, control, processes, "busy neighbour")
        os.sched_setaffinity(0, cores[:threads])
        yield
        children.check(control, processes, "busy neighbour")
    finally:
        os.sched_setaffinity(0, cores)
        children.end(processes)
        control.cancel_join_thread()
        control.close()


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
        children.report(control, exc)
