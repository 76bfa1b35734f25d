"""The tiny grid swept once on the local engine (the local tests read it; the Ray tests compare with it)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.safety.harness import run_cli
from tests.sweep.sweep_helpers import TINY


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(the sweep folder, the finished process) of ``onnxpart sweep TINY --json`` on the local engine.

    Under pytest-xdist the sweep runs once per session, not once per worker: the first worker that asks
    runs it in the session's folder (above the workers' own) under a lock; every worker gets its own copy,
    since a test reruns a job in it."""
    work = tmp_path_factory.mktemp("tiny")
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return work / "sweep", run_cli("sweep", *TINY, "--json", "-o", work / "sweep", cwd=work)
    shared = tmp_path_factory.getbasetemp().parent / "tiny-sweep"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "process.json").is_file():
            proc = run_cli("sweep", *TINY, "--json", "-o", shared / "sweep", cwd=shared)
            (shared / "process.json").write_text(json.dumps([proc.args, proc.returncode, proc.stdout, proc.stderr]))
    if (shared / "sweep").is_dir():
        shutil.copytree(shared / "sweep", work / "sweep")
    return work / "sweep", subprocess.CompletedProcess(*json.loads((shared / "process.json").read_text()))
