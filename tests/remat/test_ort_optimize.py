"""`onnxpart remat --ort-optimize`: onnxruntime's BASIC optimizer as a pre-pass — it fuses and removes nodes
of real models, leaves the input untouched and its temporary folder removed, handles IR-3 models and
external data, refuses non-standard ops; remat plans on the optimized graph with the budget relative to
the original's peak, and --verify compares with the original."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart import runtime
from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.onnx_io import file_sha256, read_model
from onnxpart.ort_optimize import ort_optimized, refuse_new_domains
from tests.conftest import FIXTURES, light

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["remat", *map(str, args)])


def op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def test_prepass_folds_weights_and_fuses_batchnorm_on_a_light_model():
    source = light("shufflenet")  # IR 3: every weight is also a graph input, built by ConstantOfShape
    digest = file_sha256(source)
    original = onnx.load(str(source))
    with ort_optimized(source) as path:
        folder = path.parent
        optimized = onnx.load(str(path))
        onnx.checker.check_model(optimized)
    before, after = op_counts(original), op_counts(optimized)
    assert before["BatchNormalization"] == 49 and after["BatchNormalization"] == 0  # fused into Conv
    assert before["ConstantOfShape"] > 0 and after["ConstantOfShape"] == 0  # folded into initializers
    assert after["Conv"] == before["Conv"] and len(optimized.graph.node) < len(original.graph.node)
    assert optimized.ir_version >= 4 and [vi.name for vi in optimized.graph.input] == ["gpu_0/data_0"]
    assert {entry.domain for entry in optimized.opset_import} <= {"", "ai.onnx"}  # no unused contrib imports
    assert not folder.exists()
    assert file_sha256(source) == digest


def test_prepass_keeps_the_outputs_of_a_random_ir3_conv_batchnorm_model(tmp_path):
    rng = np.random.default_rng(1)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)), "scale": rng.uniform(0.5, 2, 4), "bias": rng.standard_normal(4),
               "mean": rng.standard_normal(4), "var": rng.uniform(0.5, 2, 4)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])],
        "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
        + [helper.make_tensor_value_info(i.name, TensorProto.FLOAT, list(i.dims)) for i in inits],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializer=inits)
    source = tmp_path / "conv_bn.onnx"
    onnx.save(helper.make_model(graph, ir_version=3, opset_imports=[helper.make_opsetid("", 9)]), source)
    with ort_optimized(source) as path:
        optimized = read_model(path).model
    assert op_counts(optimized) == Counter({"Conv": 1})
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    error = runtime.max_abs_error(runtime.run(read_model(source).model, feeds), runtime.run(optimized, feeds))
    assert error < 1e-4


def test_prepass_reads_external_data_and_writes_its_own_in_the_temporary_folder():
    source = FIXTURES / "external" / "mlp.onnx"
    original = read_model(source)
    feeds = runtime.random_inputs(runtime.make_session(original.model, original.folder), seed=0)
    with ort_optimized(source) as path:
        stored = onnx.load(str(path), load_external_data=False)
        locations = {entry.value for tensor in stored.graph.initializer for entry in tensor.external_data
                     if entry.key == "location"}
        optimized = runtime.run(path, feeds)
    assert locations == {"optimized.onnx.data"}
    assert runtime.max_abs_error(runtime.run(original.model, feeds, original.folder), optimized) == 0.0


@pytest.mark.invalid_onnx  # onnxruntime's own EXTENDED output: an IR-3 model that lists no weight as input
def test_contrib_ops_from_the_extended_level_are_refused(tmp_path):
    import onnxruntime as ort

    source = light("squeezenet")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "extended.onnx")
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    with pytest.raises(UserError, match="com.microsoft:FusedConv"):
        refuse_new_domains(onnx.load(str(source)), onnx.load(str(tmp_path / "extended.onnx")))


def test_remat_on_a_light_model_meets_the_budget_by_the_prepass_alone():
    source = light("shufflenet")
    digest = file_sha256(source)
    result = invoke(source, "--budget", "95%", "--ort-optimize", "--verify", "--time-limit", "5", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    prepass = payload["ort_optimize"]
    assert prepass["level"] == "ORT_ENABLE_BASIC" and prepass["optimized_nodes"] < prepass["original_nodes"]
    budget = payload["budget_bytes"]
    assert budget == math.floor(0.95 * prepass["original_peak_bytes"])  # of the original, not the optimized
    assert prepass["optimized_peak_bytes"] == payload["baseline_peak_bytes"] <= budget < prepass["original_peak_bytes"]
    assert payload["methods"][0]["recomputations"] == 0
    assert payload["emitted_peak_bytes"] <= budget
    assert payload["verify"]["outputs"] == 1 and payload["verify"]["max_abs_error"] < 1e-5
    assert file_sha256(source) == digest


def test_remat_recomputes_on_the_optimized_graph_and_verifies_against_the_original(tmp_path):
    out = tmp_path / "out"
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "95%", "--ort-optimize", "--verify",
                    "--time-limit", "5", "-o", out)
    assert result.exit_code == 0, result.output
    assert "ort-optimize" in result.output and "(original)" in result.output and "(optimized)" in result.output
    model = onnx.load(str(out / "remat.onnx"))
    assert op_counts(model)["Gemm"] > 0  # MatMul + Add fused: the plan is for the optimized graph
    assert any("__r1" in node.name for node in model.graph.node)
    sequence = json.loads((out / "sequence.json").read_text())
    prepass = sequence["ort_optimize"]
    assert sequence["budget_bytes"] == math.floor(0.95 * prepass["original_peak_bytes"])
    assert sequence["baseline_peak_bytes"] == prepass["optimized_peak_bytes"]
    assert sequence["peak_bytes"] <= sequence["budget_bytes"] and sequence["recomputations"] > 0
    assert sequence["verify"]["max_abs_error"] < 1e-5


@pytest.mark.parametrize("case", ["costs", "graph file"])
def test_inputs_the_prepass_cannot_use_exit_2_and_write_nothing(tmp_path, case):
    json_file = tmp_path / "costs.json"
    json_file.write_text("{}")
    model, extra, expected = {
        "costs": (FIXTURES / "transformer_block.onnx", ["--costs", json_file], "unoptimized graph"),
        "graph file": (json_file, [], "graph file"),
    }[case]
    result = invoke(model, "--budget", "90%", "--ort-optimize", *extra, "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert expected in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
