"""The zygote the safety tests fork their commands from (tests/safety/zygote.py) behaves like a command
started afresh: same exit code and output, its own working folder, a crash reported as a traceback and
exit 1, a run past its time limit killed."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import light
from tests.safety import zygote
from tests.safety.harness import DIAMOND, run_cli


@pytest.mark.parametrize("args", [("inspect", DIAMOND, "--json"), ("inspect", "missing.onnx"),
                                  ("partition", DIAMOND, "-k", "0"), ("remta",)], ids=str)
def test_a_forked_command_answers_like_a_fresh_one(tmp_path, args):
    forked = run_cli(*args, cwd=tmp_path / "forked")
    fresh = run_cli(*args, cwd=tmp_path / "fresh", fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_forked_command_runs_in_its_own_folder(tmp_path):
    proc = run_cli("annotate", DIAMOND, "-o", "costs.json", cwd=tmp_path / "cwd")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "cwd").iterdir()] == ["costs.json"]


def test_an_exception_is_a_traceback_and_exit_1(capsys):
    assert zygote.run(lambda: 1 / 0) == 1
    assert "ZeroDivisionError" in capsys.readouterr().err
    assert zygote.run(lambda: None) == 0


def test_a_command_past_its_time_limit_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("partition", light("inception_v1"), "-k", "8", "--time-limit", "60", "-o", tmp_path / "out",
                cwd=tmp_path / "cwd", timeout=1)
    assert run_cli("inspect", DIAMOND, cwd=tmp_path / "cwd").returncode == 0  # the zygote still answers
