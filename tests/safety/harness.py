"""The real command line as a separate process, and the promises every bad input must keep (README, "Exit
codes"): one ``error:`` line on stderr, no traceback, the expected exit code, the output absent or
unchanged, every input file byte-identical, nothing written in the current folder.

Every safety test runs the command in a fresh, empty working folder, so a file left behind there (an
onnxruntime profile, a staging folder) is caught too. The command is a process forked from a zygote
that has imported the command line once (:mod:`tests.safety.zygote`): its own argv, folder, environment,
output files and exit code, without a second of start-up each. ``run_cli(..., fresh=True)`` (or an
``env`` of its own) starts ``python -m onnxpart.cli.app`` afresh instead.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import sys
import tempfile
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


ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, cwd: Path, timeout: float = 180, env: dict | None = None,
            fresh: bool = False) -> subprocess.CompletedProcess:
    """``onnxpart ARGS`` as a separate process in ``cwd`` (created if needed); text output captured. Forked
    from the zygote, unless ``fresh`` or ``env`` (which may change what start-up imports) asks for a
    process started afresh."""
    cwd.mkdir(parents=True, exist_ok=True)
    args = [str(arg) for arg in args]
    if fresh or env:
        return subprocess.run([sys.executable, "-m", "onnxpart.cli.app", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})
    return _zygote().run(args, cwd, timeout)


class Zygote:
    """The zygote process of this test process (:mod:`tests.safety.zygote`), started on first use."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.safety.zygote"], cwd=ROOT, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**os.environ, "COLUMNS": "200"})
        ready = json.loads(self.process.stdout.readline())
        self.preamble = ready["preamble"]
        atexit.register(self.close)

    def run(self, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        """``onnxpart ARGS`` in a child forked in ``cwd``, its output in files outside ``cwd``."""
        command = ["onnxpart", *args]
        with tempfile.TemporaryDirectory(prefix="onnxpart-zygote-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            out.touch()
            err.touch()
            request = {"args": args, "cwd": str(cwd), "env": {**os.environ, "COLUMNS": "200"},
                       "stdout": str(out), "stderr": str(err), "timeout": timeout}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = json.loads(self.process.stdout.readline())
            if answer.get("timeout"):
                raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(command, answer["code"], out.read_text(),
                                               self.preamble + err.read_text())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


_ZYGOTES: dict[int, Zygote] = {}


def _zygote() -> Zygote:
    """This process's zygote (a forked test process starts its own)."""
    if os.getpid() not in _ZYGOTES:
        _ZYGOTES[os.getpid()] = Zygote()
    return _ZYGOTES[os.getpid()]


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
