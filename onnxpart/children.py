"""Forked helper processes that never outlive the command: a bench pipeline's workers
(:mod:`onnxpart.bench.pipeline`) and a measurement's busy neighbours (:mod:`onnxpart.neighbours`).

Each is started inside :func:`onnxpart.interrupts.forking` and calls :func:`bound_to_parent` first; the
parent ends them with :func:`end` however its block ends (an error, Ctrl-C, SIGTERM), so nothing is left
running.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable

#: seconds a terminated child gets to exit before it is killed
GRACE = 2.0


def bound_to_parent(parent: int) -> None:
    """In a forked child: SIGTERM ends it and Ctrl-C is the parent's (:func:`onnxpart.interrupts.in_worker`),
    and Linux ends it with its parent (``PR_SET_PDEATHSIG``); it ends at once if ``parent`` is already gone."""
    from onnxpart import interrupts

    interrupts.in_worker()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(137)


def end(processes: Iterable) -> None:
    """Terminate every started process of ``processes`` (multiprocessing's), then kill any still running
    after :data:`GRACE` seconds."""
    processes = [p for p in processes if p.pid is not None]
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=GRACE)
        if process.is_alive():
            process.kill()
            process.join()
