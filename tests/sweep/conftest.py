"""The tiny grid swept once on the local engine (the local tests read it; the Ray tests compare with it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.safety.harness import run_cli
from tests.sweep.sweep_helpers import TINY


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(the sweep folder, the finished process) of ``onnxpart sweep TINY --json`` on the local engine."""
    work = tmp_path_factory.mktemp("tiny")
    return work / "sweep", run_cli("sweep", *TINY, "--json", "-o", work / "sweep", cwd=work)
