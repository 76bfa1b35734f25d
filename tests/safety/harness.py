"""The real command line as a subprocess, and the promises every bad input must keep (README, "Exit
codes"): one ``error:`` line on stderr, no traceback, the expected exit code, the output absent or
unchanged, every input file byte-identical, nothing written in the current folder.

Every safety test runs ``python -m onnxpart.cli.app`` in a fresh, empty working folder, so a file left
behind there (an onnxruntime profile, a staging folder) is caught too.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import FIXTURES

DIAMOND = FIXTURES / "diamond.onnx"
SYSTEM = FIXTURES / "systems" / "cpu_t4_a100.yaml"

#: The least each strategy command needs besides its model and -o (small limits: these tests check
#: behaviour, not answers).
STRATEGY_ARGS: dict[str, list[str]] = {
    "partition": ["-k", "2", "--time-limit", "2"],
    "remat": ["--budget", "90%", "--time-limit", "2"],
    "schedule": ["--system", str(SYSTEM), "--time-limit", "2"],
    "tile": ["--devices", "2", "--time-limit", "2"],
}
STRATEGIES = tuple(STRATEGY_ARGS)


def run_cli(*args, cwd: Path, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    """``onnxpart ARGS`` as a separate process in ``cwd`` (created if needed); text output captured."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "onnxpart.cli.app", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def digest(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths`` (files or folders, symlinks not followed), by path; a
    missing path maps to ``"absent"``. Equal digests mean nothing was added, removed or changed."""
    found: dict[str, str] = {}
    for root in map(Path, paths):
        if not root.exists() and not root.is_symlink():
            found[str(root)] = "absent"
            continue
        files = [root] if not root.is_dir() or root.is_symlink() else sorted(p for p in root.rglob("*"))
        for path in files:
            if path.is_symlink():
                found[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[str(path)] = "folder"
    return found


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line a refused command prints; fails unless stderr is exactly that line."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


@dataclass
class Guard:
    """Inputs that must stay byte-identical and an output that must stay as it was (absent or not), plus
    the working folder, which must stay empty."""

    cwd: Path
    inputs: tuple[Path, ...]
    output: Path | None = None

    def __post_init__(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.before = digest(*self.inputs)
        self.output_before = digest(self.output) if self.output is not None else {}

    def run(self, *args, **kwargs) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=self.cwd, **kwargs)

    def assert_untouched(self) -> None:
        assert digest(*self.inputs) == self.before, "an input file changed"
        if self.output is not None:
            assert digest(self.output) == self.output_before, "the output changed"
        assert list(self.cwd.iterdir()) == [], f"files left in the working folder: {list(self.cwd.iterdir())}"

    def refused(self, *args, code: int = 2, mention: str | None = None, **kwargs) -> str:
        """Run, and assert the command was refused: ``code``, one ``error:`` line (containing ``mention``),
        nothing touched. -> the error line."""
        proc = self.run(*args, **kwargs)
        assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
        line = error_line(proc)
        if mention is not None:
            assert mention.lower() in line.lower(), line
        self.assert_untouched()
        return line
