"""Forked helper processes that never outlive the command: a bench pipeline's workers
(:mod:`onnxpart.bench.pipeline`) and a measurement's busy neighbours (:mod:`onnxpart.neighbours`).

Each is started inside :func:`onnxpart.interrupts.forking` and calls :func:`bound_to_parent` first; the
parent ends them with :func:`end` however its block ends (an error, Ctrl-C, SIGTERM), so nothing is left
running. A child puts its error on a control queue (:func:`report`); the parent, waiting for a message
(:func:`receive`) or between measurements (:func:`check`), raises it, or a child's death, as a UserError.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
from collections.abc import Iterable, Sequence

from onnxpart.errors import UserError

#: seconds a terminated child gets to exit before it is killed
GRACE = 2.0
#: seconds between liveness checks while waiting for a child's message
POLL = 0.5


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


def report(control, exc: Exception) -> None:
    """In a child: put its error on ``control``, on one line, for :func:`receive` or :func:`check` to raise."""
    control.put(("error", " ".join(f"{type(exc).__name__}: {exc}".split())[:300]))


def receive(source, control, processes: Sequence, what: str):
    """The next message on ``source`` (a child's ``("error", text)`` there is an error); while none comes, every
    :data:`POLL` seconds :func:`check` the children. ``what`` names them in the error (``pipeline worker``)."""
    while True:
        try:
            message = source.get(timeout=POLL)
        except queue.Empty:
            check(None if source is control else control, processes, what)  # never drop a message waited for
            continue
        if message[0] == "error":
            raise UserError(f"{what}: {message[1]}")
        return message


def check(control, processes: Sequence, what: str) -> None:
    """An error that a child put on ``control`` (None: not read; a message that is not an error is dropped), or
    a child that has died, as a UserError naming ``what``."""
    try:
        message = control.get_nowait() if control is not None else None
    except queue.Empty:
        message = None
    if message is not None and message[0] == "error":
        raise UserError(f"{what}: {message[1]}")
    dead = next((p for p in processes if not p.is_alive()), None)
    if dead is not None:
        raise UserError(f"{what} {dead.name} ended with exit code {dead.exitcode}")
