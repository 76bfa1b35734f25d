"""`onnxpart tile` in-process (typer's CliRunner), for the tile CLI tests of both problems."""

from __future__ import annotations

from typer.testing import CliRunner

from onnxpart.cli.app import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["tile", *[str(a) for a in args]])


def one_line_error(result, code: int, match: str) -> None:
    assert result.exit_code == code, result.output
    assert "error:" in result.output and match in result.output
    assert "Traceback" not in result.output
