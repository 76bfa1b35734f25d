"""LLM scale (issue 30) for partition and remat: ``--time-limit`` is the whole command (the solve gets what
loading left of it), and ``--verify`` on weights that do not fit in memory is skipped with a word. The
20,000-op answers within the limit are the grid of :mod:`tests.test_time_limits` (issue 40)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.cli.common import run_clock
from onnxpart.errors import UserError
from tests.conftest import light
from tests.safety.harness import DIAMOND


@pytest.mark.parametrize("command,args", [("partition", ["-k", "2"]), ("remat", ["--budget", "90%"])])
def test_the_solve_gets_what_loading_left_of_the_time_limit(tmp_path, monkeypatch, command, args):
    """The command hands its solve ``run_clock.solve_seconds(--time-limit)``, not the whole limit (which
    would let the command run a whole load past it)."""
    import importlib

    module = importlib.import_module(f"onnxpart.{command}")
    seen = []

    def spy(problem, options, board=None, seconds=None):
        seen.append((seconds, options.time_limit))
        raise UserError("stopped by the test")

    monkeypatch.setattr(module, "solve", spy)
    monkeypatch.setattr(run_clock, "solve_seconds", lambda limit: limit - 1.25)
    result = CliRunner().invoke(app, [command, str(DIAMOND), *args, "--time-limit", "7", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert seen == [(5.75, 7.0)]  # the solve's seconds; the options keep the user's limit for the certificate


@pytest.mark.parametrize("command,args", [("partition", ["-k", "2"]), ("remat", ["--budget", "min"])])
def test_verify_is_skipped_with_a_word_when_the_weights_do_not_fit_in_memory(tmp_path, monkeypatch, command, args):
    """A model whose weights outgrow the memory available (a 70B export here) is not loaded into
    onnxruntime, which would take the machine down: the files are written and --verify says why it did
    not run. Here the machine is made to look small: 1 KiB available for the tiny model's weights."""
    from onnxpart import verify

    monkeypatch.setattr(verify, "_available_memory", lambda: 1024)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [command, str(light("squeezenet")), *args, "--time-limit", "5", "-o", str(out),
                                      "--verify", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["verify"]
    assert report["skipped"].startswith("skipped: the model's") and not report["sizes"]
    assert out.is_dir()
