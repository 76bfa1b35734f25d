"""`onnxpart tile program.json` end to end: the paper's matrix programs through the same command."""

from __future__ import annotations

import json

import pytest

from tests.tile.cli import invoke, one_line_error

PROGRAM = [{"out": "C", "op": "mul", "in": ["A", "B"]}, {"out": "D", "op": "add", "in": ["C", "AT"]},
           {"out": "E", "op": "inv", "in": ["D"]}]


def test_matrix_program(tmp_path):
    path = tmp_path / "prog.json"
    path.write_text(json.dumps(PROGRAM))
    out = tmp_path / "out"
    result = invoke(path, "--method", "local,greedy,exhaustive,exact", "--labels", "row,col", "-o", out,
                    "--time-limit", 2, "--workers", 1, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    costs = {r["method"]: r["cost"] for r in summary["results"]}
    assert costs["exact"] == costs["exhaustive"] <= costs["greedy"] <= costs["local"]
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan["labels"].values()) <= {"row", "col"}
    assert invoke(path, "--labels", "row,col", "--check-certificate", out).exit_code == 0
    plan["cost"] += 1
    (out / "plan.json").write_text(json.dumps(plan))
    one_line_error(invoke(path, "--labels", "row,col", "--check-certificate", out), 2, "differs")


@pytest.mark.parametrize("text,match", [("[{\"out\": \"C\", \"op\": \"mul\"", "not valid JSON"),
                                        ("{\"program\": [{\"op\": \"mul\"}]}", "prog.json: program[0].out: missing")])
def test_malformed_program(tmp_path, text, match):
    path = tmp_path / "prog.json"
    path.write_text(text)
    one_line_error(invoke(path, "-o", tmp_path / "out"), 2, match)
    assert not (tmp_path / "out").exists()


def test_unknown_label(tmp_path):
    path = tmp_path / "prog.json"
    path.write_text(json.dumps(PROGRAM))
    one_line_error(invoke(path, "--labels", "diag", "-o", tmp_path / "out"), 2, "unknown --labels")
