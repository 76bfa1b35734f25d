"""Ctrl-C and SIGTERM, one meaning for every command: stop at once, write nothing, exit 130 (SIGTERM: 143).

:func:`install` (the command line's entry, once, in the main thread) makes SIGINT raise
:class:`KeyboardInterrupt` and SIGTERM raise :class:`Terminated` — a KeyboardInterrupt, so every clean-up
path that handles one handles both: the runner's ``with`` ends its workers, an output folder's ``with``
removes its staging folder, and the CLI prints one line and exits with :func:`exit_code`.

Python runs a signal handler only between bytecodes of the main thread, so a native solver holding the
main thread (CP-SAT's ``Solve``, HiGHS' ``run``) would see the signal only when it returns, up to its time
limit later. Such a call runs inside :func:`deferred` with the solver's stop function: a watcher thread,
woken through :func:`signal.set_wakeup_fd`, calls it at once (and again until the block ends), and the
interrupt is raised when the block ends. :func:`deferred` without a stop function keeps a short critical
section (an output folder's commit, a worker's fork and its record) whole. Workers forked by
:mod:`onnxpart.parallel` call :func:`in_worker` first.

Without :func:`install` (the library used from Python) nothing changes: Ctrl-C is Python's own
KeyboardInterrupt, raised when the native call returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESTOP_SECONDS = 0.05  # how often the watcher repeats a stop while a signalled solver still runs

_stops: list[Callable[[], None]] = []  # the stop functions of the deferred blocks now running
_deferring = 0  # deferred blocks now open (nested blocks raise when the outermost ends)
_pending: int | None = None  # a signal that arrived inside a deferred block
_received: int | None = None  # the first signal this process received
_installed = False
_owner: int | None = None  # the process that installed the handlers


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C (exit 143 instead of 130)."""


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended: 130 or 143."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


def install() -> None:
    """Route SIGINT and SIGTERM through :func:`_on_signal` and start the watcher thread (main thread only;
    a second call does nothing)."""
    global _installed, _owner
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read,), daemon=True, name="onnxpart-signals").start()
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    _installed, _owner = True, os.getpid()


def in_worker() -> None:
    """In a forked worker: SIGTERM back to its default (the runner ends a worker by terminating it, even
    inside a native solve), SIGINT ignored (Ctrl-C reaches the whole process group; the parent decides),
    and no wakeup fd shared with the parent's watcher. Before this call a signal already ends the worker:
    the deferred blocks it inherited (the runner forks inside one) are its parent's."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(ValueError):  # not the main thread: nothing was inherited there
        signal.set_wakeup_fd(-1)
    _stops.clear()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # held back since the fork (:func:`forking`)


@contextlib.contextmanager
def deferred(stop: Callable[[], None] | None = None) -> Iterator[None]:
    """Run the block whole: SIGINT or SIGTERM during it calls ``stop()`` (if given, from the watcher
    thread, so a native solver returns early) and is raised as the block ends."""
    global _deferring, _pending
    _deferring += 1
    if stop is not None:
        _stops.append(stop)
    try:
        yield
    finally:
        if stop is not None:
            _stops.remove(stop)
        _deferring -= 1
    if not _deferring and _pending is not None:
        signum, _pending = _pending, None
        raise _interrupt(signum)


@contextlib.contextmanager
def forking() -> Iterator[None]:
    """Fork workers inside this block: it is :func:`deferred` here (a signal cannot fall between a fork
    and its record), and SIGINT and SIGTERM are blocked in this thread, so a child starts with them
    blocked until :func:`in_worker` has set its handlers. A signal sent to a child before it first ran
    would otherwise be handled and then dropped by CPython's after-fork reset: the runner's
    ``terminate()`` right after a start was lost, and the worker ran its job on."""
    with deferred():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def received() -> KeyboardInterrupt | None:
    """The interrupt of the first signal received, or None. An exception raised after it may be the
    interrupt seen through a library that wraps it: a KeyboardInterrupt raised while a native extension
    module initializes comes out as ``ImportError: initialization failed`` (pybind11)."""
    return None if _received is None else _interrupt(_received)


def _on_signal(signum: int, _frame) -> None:
    global _pending, _received
    _received = _received or signum
    if _deferring and os.getpid() == _owner:  # a forked child that inherited the block does not defer
        _pending = _pending or signum
        _call_stops()
        return
    raise _interrupt(signum)


def _watch(fd: int) -> None:
    """The watcher thread: each byte on the wakeup fd is a signal's number. After a signal it calls the
    open blocks' stop functions again every :data:`RESTOP_SECONDS` until the blocks end: a stop that came
    before the solver began (CP-SAT's ``stop_search`` does nothing until ``Solve`` has built its search)
    is not lost, and the solver does not run on to its time limit."""
    while data := os.read(fd, 512):
        if any(byte in SIGNALS for byte in data):
            _call_stops()
            while _stops:
                time.sleep(RESTOP_SECONDS)
                _call_stops()


def _call_stops() -> None:
    for stop in list(_stops):
        try:
            stop()
        except Exception as exc:  # noqa: BLE001 - a solver that cannot stop still ends by its time limit
            log.warning("could not stop a solver early: %s", exc)
