"""`onnxpart partition` end to end: files, stage models that reproduce the outputs in onnxruntime, the
ONNX multi-device annotation, --json, --check-certificate, determinism, and every error case."""

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from tests.conftest import FIXTURES, SHARED, light, requires_shared

FAST = ["--time-limit", "20", "--population", "8", "--generations", "3", "--random-orders", "3", "--no-mla"]
runner = CliRunner()


def partition(*args: str):
    return runner.invoke(app, ["partition", *map(str, args)])


@pytest.mark.parametrize("name,k", [("squeezenet", 3), ("inception_v1", 4), ("resnet50", 5), ("zfnet512", 2)])
def test_stages_reproduce_the_model(tmp_path, name, k):
    out = tmp_path / "out"
    # 1 s: with no bound job the local search runs its kicks until the time limit (the stages, not their
    # quality, are what this test checks)
    result = partition(light(name), "-k", k, "-o", out, "--verify", "--bounds", "simple", "--ideal-limit", "0",
                       "--json", *FAST, "--time-limit", "1")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["verify"]["ok"] and summary["verify"]["max_rel_error"] < 1e-4
    manifest = json.loads((out / "manifest.json").read_text())
    files = [s["file"] for s in manifest["stages"] if s["file"]]
    assert len(files) == len([s for s in manifest["stages"] if s["ops"]]) >= 2
    for stage in manifest["stages"]:
        if not stage["file"]:
            continue
        model = onnx.load(out / stage["file"])
        onnx.checker.check_model(model)
        assert [i.name for i in model.graph.input] == stage["inputs"]
        assert [o.name for o in model.graph.output] == stage["outputs"]
        assert {n.name for n in model.graph.node} >= set(stage["onnx_nodes"])
    assert max(s["cost"] for s in manifest["stages"]) == pytest.approx(manifest["bottleneck"])
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["problem"] == "mtpp" and cert["upper_bound"] == pytest.approx(manifest["bottleneck"])
    assert cert["best_lower_bound"] <= cert["upper_bound"]


def test_outputs_no_op_makes_come_out_of_the_last_stage(tmp_path):
    """A model output that is a constant (built by generator nodes) or a graph input passed through is
    made by no op; the stages must still reproduce it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["y"], name="tanh"),
             helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill",
                              value=numpy_helper.from_array(np.array([2.5], dtype=np.float32))),
             helper.make_node("Cast", ["filled"], ["const_out"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "outs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
         (("y", [2, 4]), ("const_out", [2, 3]), ("x", [2, 3]), ("w", [3, 4]))],
        initializer=[weight, shape])
    path = tmp_path / "outs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    out = tmp_path / "out"
    result = partition(path, "-k", 2, "-o", out, "--verify", "--bounds", "simple", "--ideal-limit", "0",
                       "--json", *FAST)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"]["max_abs_error"] == 0.0
    stages = [s for s in json.loads((out / "manifest.json").read_text())["stages"] if s["file"]]
    assert {"const_out", "x", "w"} <= set(stages[-1]["outputs"]) and "x" in stages[-1]["inputs"]
    for stage in stages[:-1]:
        assert not {"const_out", "w"} & set(stage["outputs"])
    onnx.checker.check_model(onnx.load(out / stages[-1]["file"]))


def test_annotated_model_carries_the_plan(tmp_path):
    out = tmp_path / "out"
    assert partition(light("squeezenet"), "-k", 3, "-o", out, *FAST).exit_code == 0
    model = onnx.load(out / "annotated.onnx")
    onnx.checker.check_model(model)
    assert model.ir_version >= 11
    assert model.configuration[0].name == "pipeline" and model.configuration[0].num_devices == 3
    manifest = json.loads((out / "manifest.json").read_text())
    stage_of = {n: s["index"] for s in manifest["stages"] for n in s["onnx_nodes"]}
    annotated = {n.name: n.device_configurations[0].pipeline_stage for n in model.graph.node
                 if n.device_configurations}
    assert all(annotated[name] == stage for name, stage in stage_of.items())
    from onnxpart.runtime import make_session

    make_session(model)  # onnxruntime accepts the IR-11 annotations


def test_ideal_dp_and_certificate_check(tmp_path):
    out = tmp_path / "out"
    result = partition(light("squeezenet"), "-k", 4, "-o", out, "--json", *FAST)
    assert result.exit_code == 0
    cert = json.loads(result.stdout)["certificate"]
    assert cert["proven_optimal"] and any(b["method"] == "ideal-dp" and b["status"] == "optimal"
                                          for b in cert["lower_bounds"])
    check = partition(light("squeezenet"), "-k", 4, "--check-certificate", out, "--json")
    assert check.exit_code == 0 and json.loads(check.stdout)["ok"]
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["stages"][0]["cost"] *= 0.5
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert partition(light("squeezenet"), "-k", 4, "--check-certificate", out).exit_code == 2
    # another bandwidth is another instance: the hash no longer matches
    manifest["stages"][0]["cost"] *= 2
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert partition(light("squeezenet"), "-k", 4, "--bandwidth", "1GB/s", "--check-certificate", out).exit_code == 2


def test_same_seed_same_files(tmp_path):
    """The transformer block at k = 3 (another seed gives other stages): its local search ends after its
    fixed number of kicks, well within the time limit (on inception the limit cut it, so two runs agreed
    only as long as the machine was equally fast)."""
    outputs = []
    for run in range(2):
        out = tmp_path / f"run{run}"
        args = [FIXTURES / "transformer_block.onnx", "-k", 3, "-o", out, "--seed", 5, "--bounds", "none", "--ideal-limit", 0]
        assert partition(*args, *FAST).exit_code == 0
        outputs.append(out)
    for name in ["manifest.json", "annotated.onnx"] + [p.name for p in outputs[0].glob("stage_*.onnx")]:
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name


@requires_shared
def test_graph_only_inputs(tmp_path):
    dnn = SHARED / "benchmarks" / "dnn-partitioning" / "throughput-inputs" / "LayerGraphs" / "bert24_inference.json"
    result = partition(dnn, "-k", 4, "-o", tmp_path / "dnn", "--json", *FAST)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["manifest"]["method"] == "ideal-dp" and summary["certificate"]["gap"] == 0.0
    assert sorted(p.name for p in (tmp_path / "dnn").iterdir()) == ["certificate.json", "manifest.json"]
    # a costs.json from `annotate`
    costs = tmp_path / "costs.json"
    assert runner.invoke(app, ["annotate", str(light("squeezenet")), "-o", str(costs)]).exit_code == 0
    result = partition(costs, "-k", 2, "-o", tmp_path / "costs", "--json", *FAST)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["manifest"]["stages"][0]["file"] is None


def test_node_link_graph_is_partitioned(tmp_path):
    """A networkx node-link graph (remat's benchmark format), read through onnxpart.readers: durations are
    the work, out_cost the tensor bytes, priced at --bandwidth."""
    from tests.remat.helpers import node_link

    path = tmp_path / "diamond.json"
    path.write_text(json.dumps(node_link([1000] * 4, [1e-3, 2e-3, 2e-3, 1e-3], [(0, 1), (0, 2), (1, 3), (2, 3)])))
    result = partition(path, "-k", 2, "-o", tmp_path / "o", *FAST)
    assert result.exit_code == 2 and "pass --bandwidth" in result.output
    result = partition(path, "-k", 2, "-o", tmp_path / "o", "--bandwidth", "1MB/s", "--format", "node-link", "--json",
                       *FAST)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    stages = [stage["ops"] for stage in summary["manifest"]["stages"]]
    assert stages == [["n0", "n1"], ["n2", "n3"]] or stages == [["n0", "n2"], ["n1", "n3"]]
    assert summary["manifest"]["bottleneck"] == pytest.approx(5e-3) and summary["certificate"]["gap"] == 0.0
    result = partition(path, "-k", 2, "-o", tmp_path / "p", "--format", "dnn-partitioning", *FAST)
    assert result.exit_code == 2 and f"{path.name} is not a dnn-partitioning graph" in result.output
    assert not (tmp_path / "p").exists()


def tiny_costs(tmp_path: Path) -> Path:
    """Three ops in a chain, as a costs.json any tool could write."""
    data = {"bandwidth": 1e9, "ops": [{"name": n, "work": w, "param_bytes": p}
                                      for n, w, p in (("a", 1e-3, 4000), ("b", 2e-3, 0), ("c", 1e-3, 9000))],
            "tensors": [{"name": "x", "bytes": 1000, "producer": "a", "consumers": ["b", "c"]},
                        {"name": "y", "bytes": 500, "producer": "b", "consumers": ["c"]}]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    return path


def test_more_stages_than_ops_is_allowed(tmp_path):
    result = partition(tiny_costs(tmp_path), "-k", 5, "-o", tmp_path / "o", "--json", *FAST)
    assert result.exit_code == 0, result.output
    stages = json.loads(result.stdout)["manifest"]["stages"]
    assert len(stages) == 5 and sum(1 for s in stages if not s["ops"]) >= 2


def test_stage_memory_adds_overflow(tmp_path):
    result = partition(tiny_costs(tmp_path), "-k", 1, "-o", tmp_path / "o", "--stage-memory", "5000B", "--json",
                       *FAST)
    assert result.exit_code == 0, result.output
    stage = json.loads(result.stdout)["manifest"]["stages"][0]
    assert stage["overflow"] == pytest.approx((13000 - 5000) / 1e9)


def test_stage_memory_warns_about_big_ops(tmp_path, capsys):
    from onnxpart.cli.partition_cmd import _warn_memory
    from onnxpart.onnx_io import load_graph

    graph, _ = load_graph(light("zfnet512"))
    _warn_memory(graph, 1024.0)
    assert "need more than --stage-memory" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["-k", "0"], "at least 1"),
    (["-k", "2", "--time-limit", "0"], "must be positive"),
    (["-k", "2", "--bounds", "magic"], "unknown --bounds"),
    (["-k", "2", "--max-gap", "150%"], "--max-gap"),
    (["-k", "2", "--format", "xml"], "unknown --format"),
])
def test_bad_options_exit_2(tmp_path, args, message):
    result = partition(tiny_costs(tmp_path), *args, "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert not (tmp_path / "o").exists()


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "o"
    out.mkdir()  # an empty folder is used as it is
    assert partition(tiny_costs(tmp_path), "-k", 2, "-o", out, *FAST).exit_code == 0
    assert partition(tiny_costs(tmp_path), "-k", 2, "-o", out, *FAST).exit_code == 2
    assert partition(tiny_costs(tmp_path), "-k", 2, "-o", out, "--force", *FAST).exit_code == 0
    assert (out / "manifest.json").exists()


def test_max_gap_not_met_exits_3(tmp_path):
    costs = tiny_costs(tmp_path)
    # with no lower bound at all, no gap can be certified
    assert partition(costs, "-k", 2, "-o", tmp_path / "a", "--bounds", "none", "--ideal-limit", 0,
                     "--max-gap", "5%", *FAST).exit_code == 3
    assert (tmp_path / "a" / "manifest.json").exists()  # results are still written
    assert partition(costs, "-k", 2, "-o", tmp_path / "b", "--max-gap", "0%", *FAST).exit_code == 0


def test_verify_needs_a_model(tmp_path):
    assert partition(tiny_costs(tmp_path), "-k", 2, "-o", tmp_path / "o", "--verify", *FAST).exit_code == 2


def test_workers_bound_the_background_processes(tmp_path):
    result = partition(light("squeezenet"), "-k", 3, "-o", tmp_path / "one", "--workers", 1, "--bounds",
                       "simple,bottleneck", "--ideal-limit", "0", "--json", *FAST)
    assert result.exit_code == 0, result.output
    methods = {b["method"] for b in json.loads(result.stdout)["certificate"]["lower_bounds"]}
    assert "bottleneck" in methods or "weighted-bottleneck" in methods
