"""A command run the way the scale tests (issue 30) measure it: in a fresh process, with the peak RSS of its
process tree, killed with its workers if it outlives a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

MEMORY_CAP = 3 << 30  # bytes: far above the 1.5 GB target; a dense 20,000 × 20,000 float64 matrix alone is 3.2 GB

#: Runs ``python -m onnxpart.cli.app ARGS`` and prints its exit code and the peak RSS (bytes) of its
#: process tree (RUSAGE_CHILDREN: the largest of the command and the workers it waited for).
_MEASURE = """
import resource, subprocess, sys
code = subprocess.run([sys.executable, "-m", "onnxpart.cli.app", *sys.argv[1:]]).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)
"""


def run_measured(*args, cwd: Path, timeout: float = 300) -> tuple[subprocess.CompletedProcess, int]:
    """``onnxpart ARGS`` in a fresh process under ``cwd``; -> (its output, peak RSS of its process tree)."""
    cwd.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen([sys.executable, "-c", _MEASURE, *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the command and its workers too, not just the wrapper
            raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    *stderr, last = proc.stderr.strip().splitlines()
    code, peak = last.split()
    return subprocess.CompletedProcess(proc.args, int(code), proc.stdout, "\n".join(stderr)), int(peak)
