"""`onnxpart tile --verify` end to end: plans of a CNN and the transformer block run on D virtual
devices; a broken collective exits 1 with nothing written; resnet50's Convs are sharded."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.cli.tile_onnx import replicated_summary
from onnxpart.tile.onnx import exchange
from tests.conftest import FIXTURES, light
from tests.tile.onnx.cnn_model import small_cnn
from tests.tile.onnx.onnx_models import mlp

runner = CliRunner()
BLOCK = FIXTURES / "transformer_block.onnx"


def invoke(*args):
    return runner.invoke(app, ["tile", *[str(a) for a in args]])


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_verify_passes(tmp_path, which, devices):
    model = small_cnn(tmp_path / "cnn.onnx") if which == "cnn" else BLOCK
    out = tmp_path / "out"
    # the small CNN is launch-bound (one device is fastest): its input pinned batch-sharded makes the plan shard
    pins = ["--pin", "x=S(0)"] if which == "cnn" else []
    result = invoke(model, "-d", devices, "-o", out, "--verify", "--time-limit", 2, "--workers", 1, "--json", *pins)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["verify"]["ok"] and summary["verify"]["sizes"][0]["outputs"]
    assert json.loads((out / "certificate.json").read_text())["details"]["verify"]["ok"]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["replicated_only"] == []
    if which == "cnn":
        convs = [op for op in plan["ops"] if op["op_type"] == "Conv"]
        assert any(op["algorithm"] != "replicated" for op in convs)


def test_verify_line_on_the_terminal(tmp_path):
    result = invoke(small_cnn(tmp_path / "cnn.onnx"), "-d", 2, "-o", tmp_path / "out", "--verify",
                    "--time-limit", 2, "--workers", 1)
    assert result.exit_code == 0, result.output
    assert "verify: the plan's 2 virtual devices reproduce the model's outputs" in result.output


def test_a_broken_collective_exits_1_and_writes_nothing(tmp_path, monkeypatch):
    model = mlp(tmp_path / "mlp.onnx", batch=8, d_in=16, d_hidden=32, d_out=16)
    pins = ["--pin", "x=S(1)", "--pin", "W1=S(0)", "--pin", "h=P"]  # the first MatMul leaves partial sums
    ok = invoke(model, "-d", 2, "-o", tmp_path / "ok", "--verify", "--time-limit", 2, "--workers", 1, *pins)
    assert ok.exit_code == 0, ok.output
    real_reduce, real_scatter = exchange.all_reduce, exchange.reduce_scatter  # sums that forget the others
    monkeypatch.setattr(exchange, "all_reduce", lambda group: ([group[0]] * len(group), real_reduce(group)[1]))
    monkeypatch.setattr(exchange, "reduce_scatter", lambda group, dim: (np.split(group[0], len(group), dim),
                                                                        real_scatter(group, dim)[1]))
    out = tmp_path / "out"
    bad = invoke(model, "-d", 2, "-o", out, "--verify", "--time-limit", 2, "--workers", 1, *pins)
    assert bad.exit_code == 1, bad.output
    assert "error:" in bad.output and "differs from the original" in bad.output and "Traceback" not in bad.output
    assert not out.exists()


def test_verify_refused_for_matrix_programs(tmp_path):
    path = tmp_path / "prog.json"
    path.write_text(json.dumps([{"out": "C", "op": "mul", "in": ["A", "B"]}]))
    result = invoke(path, "-o", tmp_path / "out", "--verify")
    assert result.exit_code == 2 and "matrix program" in result.output and "Traceback" not in result.output


def test_replicated_only_summarized_by_op_type(tmp_path):
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"], name="cumsum"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])],
                              [numpy_helper.from_array(np.array(0, np.int64), "axis")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    result = invoke(tmp_path / "m.onnx", "-d", 2, "-o", tmp_path / "out", "--verify", "--time-limit", 1,
                    "--workers", 1)
    assert result.exit_code == 0, result.output
    assert "replicated only (not in the catalog): 1 CumSum (see plan.json)" in result.output
    plan = {"ops": [{"op_type": t, "replicated_only": r} for t, r in
                    [("Reshape", True), ("Concat", True), ("Reshape", True), ("Relu", False)]]}
    assert replicated_summary(plan) == "2 Reshape, 1 Concat"


@pytest.mark.parametrize("fast", [False, True], ids=["nvlink", "near-free links"])
def test_exact_shards_resnet50_convs_only_where_it_pays(tmp_path, fast):
    """Batch-1 resnet50 on 4 A100s over NVLink: an all-gather between convs costs more than the quarter of a
    conv it saves, so nothing is sharded; over near-free links every Conv is."""
    out = tmp_path / "out"
    links = ["--mesh-bandwidth", "10TB/s", "--mesh-latency", "1e-7"] if fast else []
    result = invoke(light("resnet50"), "-d", 4, "-o", out, "--method", "exact", "--time-limit", 4, "--workers", 1,
                    *links)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["method"] == "exact" and plan["replicated_only"] == []
    convs = [op for op in plan["ops"] if op["op_type"] == "Conv"]
    sharded = sum(op["algorithm"] != "replicated" for op in convs)
    assert len(convs) == 53 and (sharded == 53 if fast else sharded == 0)
