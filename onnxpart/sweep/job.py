"""One sweep job: the real strategy command as a child process, and the row it leaves.

The child runs ``python -m onnxpart.cli.app STRATEGY MODEL ARGV --json -o OUT`` in its own process group
(so a timeout or a cancel reaches its solver processes too), dies with the process that started it
(``PR_SET_PDEATHSIG`` on Linux: a sweep killed with SIGKILL leaves no job running), and is reaped with
``os.wait4`` for its peak RSS. Its ``--json`` result gives the certificate; its exit code and first
``error:`` line say how it failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from onnxpart.sweep.commands import output_in

#: Runs the CLI like ``python -m onnxpart.cli.app`` after asking Linux to kill it when its parent dies.
_LAUNCHER = """\
import os, signal, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(137)  # the parent died before prctl
sys.argv = ["onnxpart", *sys.argv[2:]]
import runpy
runpy.run_module("onnxpart.cli.app", run_name="__main__", alter_sys=True)
"""

#: Exit codes of the strategy commands (README, "Exit codes") -> a job's status.
_STATUS = {0: "ok", 3: "gap", 4: "infeasible", 130: "interrupted", 143: "interrupted"}
#: Statuses of jobs that ran to a result; the others are failures (--fail-on-error, --retry-failed).
SUCCEEDED = ("ok", "gap")

#: Seconds a cancelled job gets to clean up after SIGINT before SIGKILL.
CANCEL_GRACE = 10.0


@dataclass
class Outcome:
    """How a job's command ended: ``status`` (ok, gap, infeasible, failed, timeout, killed, interrupted),
    its exit code (128 + N when killed by signal N, as a shell reports it), the first error line, its
    ``--json`` result, wall seconds and the peak RSS of its largest process."""

    status: str
    exit_code: int
    error: Optional[str]
    result: Optional[dict]
    seconds: float
    peak_rss_bytes: int
    stderr: str = ""
    files: dict[str, bytes] = field(default_factory=dict)  # the job's folder, where it travels by value (Ray)


class Child:
    """A running job command. :meth:`wait` blocks until it ends (or ``timeout`` passes, which kills it);
    :meth:`cancel` asks it to stop (SIGINT, then SIGKILL after :data:`CANCEL_GRACE`) from any thread."""

    def __init__(self, strategy: str, model: Path, argv: list[str], folder: Path, cwd: Path):
        output = output_in(strategy, folder)
        output.parent.mkdir(exist_ok=True)  # annotate writes a file inside the job's folder
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(os.getpid()), strategy, str(model), *argv, "--json",
             "-o", str(output)],
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, cwd=cwd, start_new_session=True)
        self.cancelled = False
        self.timed_out = False
        self._timers: list[threading.Timer] = []

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def _later(self, seconds: float, action) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def cancel(self) -> None:
        self.cancelled = True
        self._signal(signal.SIGINT)
        self._later(CANCEL_GRACE, lambda: self._signal(signal.SIGKILL))

    def _expire(self) -> None:
        self.timed_out = True
        self._signal(signal.SIGKILL)

    def wait(self, timeout: float) -> Outcome:
        self._later(timeout, self._expire)
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
        finally:
            for timer in self._timers:
                timer.cancel()
        self.proc.returncode = code = os.waitstatus_to_exitcode(status)
        self._signal(signal.SIGKILL)  # whatever the command left in its group
        seconds = time.monotonic() - self.started
        stdout, stderr = _read(self._out), _read(self._err)
        peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        return _outcome(code, stdout, stderr, seconds, peak, timeout if self.timed_out else None,
                        self.cancelled)


def run_command(strategy: str, model: Path, argv: list[str], folder: Path, timeout: float) -> Outcome:
    """Run one job's command, writing the job's ``folder``, to the end (where nothing needs to cancel it)."""
    return Child(strategy, model, argv, folder, folder.parent).wait(timeout)


def _read(handle) -> str:
    handle.seek(0)
    text = handle.read().decode(errors="replace")
    handle.close()
    return text


def _outcome(code: int, stdout: str, stderr: str, seconds: float, peak: int, timed_out: Optional[float],
             cancelled: bool) -> Outcome:
    result = None
    if code in (0, 3):
        try:
            result = json.loads(stdout)
        except json.JSONDecodeError:
            code, stderr = 1, stderr + "\nerror: the command's --json output is not JSON"
    if timed_out is not None:
        status, error = "timeout", f"exceeded the job timeout of {timed_out:g} s and was killed"
    elif code < 0:
        name = signal.Signals(-code).name
        status = "interrupted" if cancelled else "killed"
        error = f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" and not cancelled else "")
    else:
        status = _STATUS.get(code, "failed")
        error = None if code == 0 else _error_line(stderr) or f"exit code {code}"
    exit_code = 128 - code if code < 0 else code
    return Outcome(status, exit_code, error, result, seconds, peak, stderr[-20000:])


def _error_line(stderr: str) -> Optional[str]:
    """The command's ``error:`` line, else the last line of a traceback (``MemoryError``)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return lines[-1] if lines else None


def row(job: Any, outcome: Outcome, folder: Optional[str], node: str, version: str) -> dict:
    """A finished job's row (results.csv/jsonl): what ran, how it ended, its certificate's numbers,
    wall seconds, peak RSS, its folder (None when the command wrote nothing) and the command's own
    summary numbers (e.g. remat's ``budget_bytes``)."""
    cert = (outcome.result or {}).get("certificate") or {}
    summary = {name: value for name, value in (outcome.result or {}).items()
               if name not in ("output", "verify") and not isinstance(value, (dict, list))}
    return {"job": job.name, "key": job.key, "model": job.model, "model_sha256": job.model_sha256,
            "strategy": job.strategy, "options": dict(job.options), "status": outcome.status,
            "exit_code": outcome.exit_code, "error": outcome.error, "upper_bound": cert.get("upper_bound"),
            "best_lower_bound": cert.get("best_lower_bound"), "gap": cert.get("gap"),
            "proven_optimal": cert.get("proven_optimal"), "seconds": round(outcome.seconds, 3),
            "peak_rss_bytes": outcome.peak_rss_bytes, "folder": folder, "node": node,
            "onnxpart_version": version, "summary": summary}
