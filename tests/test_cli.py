"""The CLI as users and CI pipelines see it: exit codes, one-line errors, --json, nothing written on error."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from tests.conftest import FIXTURES, light

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_help_lists_every_command():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("inspect", "annotate", "partition", "schedule", "remat", "tile"):
        assert command in result.output


def test_inspect_json():
    result = invoke("inspect", light("resnet50"), "--json", "--top", "3")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ops"] == 176 and data["onnx_nodes"] == 415
    assert len(data["costliest_ops"]) == 3
    assert data["costliest_ops"][0]["work"] >= data["costliest_ops"][-1]["work"]
    assert data["peak_activation_bytes"] > 0 and data["flops"] > 7e9


def test_inspect_terminal_view():
    result = invoke("inspect", FIXTURES / "transformer_block.onnx", "--device", "h100")
    assert result.exit_code == 0
    assert "compute ops" in result.output and "peak" in result.output and "MatMul" in result.output


def test_inspect_coarsen_shrinks_the_graph():
    plain = json.loads(invoke("inspect", light("densenet121"), "--json").stdout)
    coarse = json.loads(invoke("inspect", light("densenet121"), "--json", "--coarsen").stdout)
    assert coarse["ops"] < plain["ops"] / 2
    assert coarse["onnx_nodes"] == plain["onnx_nodes"]
    assert coarse["flops"] == pytest.approx(plain["flops"])


def test_annotate_analytic_round_trips_through_costs(tmp_path):
    out = tmp_path / "costs.json"
    result = invoke("annotate", light("squeezenet"), "--cost", "analytic", "--device", "t4", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "onnxpart.costs/1" and data["device"] == "t4"
    assert data["bandwidth"] == pytest.approx(1.6e10)
    assert len(data["ops"]) == 66 and all(op["work"] > 0 for op in data["ops"])
    op = data["ops"][0]
    assert {"name", "onnx_nodes", "op_type", "work", "param_bytes", "flops"} <= set(op)
    tensor = data["tensors"][1]
    assert {"name", "bytes", "producer", "consumers"} <= set(tensor)
    # the costs file is a graph on its own, and reusable with the model
    again = json.loads(invoke("inspect", out, "--json").stdout)
    direct = json.loads(invoke("inspect", light("squeezenet"), "--json", "--device", "t4").stdout)
    reused = json.loads(invoke("inspect", light("squeezenet"), "--json", "--costs", out).stdout)
    for summary in (again, reused):
        assert summary["work"] == pytest.approx(direct["work"])
        assert summary["peak_activation_bytes"] == direct["peak_activation_bytes"]


def test_annotate_refuses_to_overwrite(tmp_path):
    out = tmp_path / "costs.json"
    out.write_text("keep me")
    result = invoke("annotate", light("squeezenet"), "-o", out)
    assert result.exit_code == 2 and "--force" in result.output
    assert out.read_text() == "keep me"


def test_costs_for_another_model_are_refused(tmp_path):
    out = tmp_path / "costs.json"
    assert invoke("annotate", light("squeezenet"), "-o", out).exit_code == 0
    result = invoke("inspect", light("resnet50"), "--costs", out)
    assert result.exit_code == 2 and "another model" in result.output


def test_annotate_measured(tmp_path):
    out = tmp_path / "costs.json"
    result = invoke("annotate", FIXTURES / "diamond.onnx", "--cost", "measured", "--runs", "2", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["cost_model"] == "measured"
    assert data["measured"]["end_to_end"] > 0
    assert sum(op["work"] for op in data["ops"]) == pytest.approx(data["measured"]["end_to_end"])


# Each bad input: the command line, and what its one-line error must say.
BAD_INPUTS = {
    "missing file": (lambda tmp: ["inspect", tmp / "missing.onnx"], r"model file .*missing\.onnx does not exist"),
    "random bytes": (lambda tmp: ["inspect", _write(tmp / "junk.onnx", bytes(range(256)) * 16)],
                     r"junk\.onnx is not a readable ONNX model \(DecodeError: "),
    "truncated": (lambda tmp: ["inspect", _write(tmp / "cut.onnx", light("resnet50").read_bytes()[:5000])],
                  r"cut\.onnx is not a readable ONNX model \(DecodeError: "),
    "symbolic dims": (lambda tmp: ["inspect", FIXTURES / "symbolic.onnx"],
                      r"the model has symbolic dims N \(batch\): pass --dim N=VALUE"),
    "unknown device": (lambda tmp: ["inspect", light("squeezenet"), "--device", "tpu9"],
                       r"unknown device 'tpu9': use one of a100, cpu, h100, t4 or a YAML/JSON file"),
    "missing output folder": (lambda tmp: ["annotate", light("squeezenet"), "-o", tmp / "no" / "costs.json"],
                              r"cannot write .*costs\.json: folder .*no does not exist"),
    "bad input shape": (lambda tmp: ["inspect", FIXTURES / "symbolic.onnx", "--input-shape", "batch=1xQ"],
                        r"cannot read --input-shape 'batch=1xQ': use NAME=DIMS"),
    "unknown cost model": (lambda tmp: ["inspect", light("squeezenet"), "--cost", "guess"],
                           r"unknown cost model 'guess': use analytic or measured"),
    "corrupt costs file": (lambda tmp: ["inspect", _write(tmp / "costs.json", b"{not json")],
                           r"costs\.json: line 1: not valid JSON: "),
}


def _write(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.invalid_onnx
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gives_one_line_error_and_exit_2(tmp_path, case):
    args, message = BAD_INPUTS[case]
    args = args(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output  # one line, no traceback
    assert re.search(message, lines[0]), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


@pytest.mark.invalid_onnx
def test_external_data_escape_via_cli(tmp_path):
    import onnx

    model = onnx.load(str(FIXTURES / "external" / "mlp.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../../etc/passwd"
    onnx.save(model, str(tmp_path / "evil.onnx"))
    result = invoke("inspect", tmp_path / "evil.onnx")
    assert result.exit_code == 2 and "outside the model's folder" in result.output


def test_console_script_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "onnxpart.cli.app", "inspect", str(FIXTURES / "diamond.onnx"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ops"] == 7
    proc = subprocess.run([sys.executable, "-m", "onnxpart.cli.app", "inspect", "/nonexistent.onnx"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_output_dir_leaves_nothing_on_error_and_replaces_atomically(tmp_path):
    from onnxpart.errors import UserError
    from onnxpart.files import OutputDir, write_json

    target = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with OutputDir(target) as out:
            write_json(out.path("a.json"), {"x": 1})
            raise RuntimeError("solver crashed")
    assert list(tmp_path.iterdir()) == []  # no target, no staging folder left behind
    OutputDir(target)  # nothing staged yet: constructing writes nothing
    assert list(tmp_path.iterdir()) == []
    with OutputDir(target) as out:
        write_json(out.path("a.json"), {"x": 1})
        write_json(out.path("certificate.json"), {"schema": "onnxpart.certificate/1"})  # onnxpart's own
    with pytest.raises(UserError, match="--force"):
        OutputDir(target)
    with OutputDir(target, force=True) as out:
        write_json(out.path("b.json"), {"x": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in target.iterdir()) == ["b.json"]
