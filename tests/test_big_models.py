"""Models over 2 GiB, in small: weights stay on disk while planning, every emitted model is written with
external data when the input used it (or above --external-data-threshold), copied in chunks, checked by
path, and nothing is left behind on a failure. scripts/bench_scale.py measures the real sizes."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart import data_files, writer
from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.onnx_io import load_graph
from tests.export_like import ALL_DYNAMIC, save_with_external_data

runner = CliRunner()
FAST = ["--time-limit", "5", "--json"]
DIMS = ["--dim", "batch=1", "--dim", "sequence=8"]


def cli(*args):
    return runner.invoke(app, [*map(str, args)])


@pytest.fixture
def external_model(tmp_path):
    """The tied-LM-head export with every weight in model.onnx.data."""
    name, builder, _ = ALL_DYNAMIC[2]
    return save_with_external_data(builder(), tmp_path / "in", "model.onnx")


def mlp(dtype=np.float32, layers=3, width=64):
    """x [1, width] through ``layers`` MatMul+Relu with weights of ``dtype``."""
    rng = np.random.default_rng(0)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, inits, h = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(dtype), f"w{i}"))
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"h{i}"])]
        h = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", elem, [1, width])],
                              [helper.make_tensor_value_info(h, elem, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_partition_and_remat_write_external_data_that_checks_and_runs(tmp_path, external_model):
    out = tmp_path / "p"
    result = cli("partition", external_model, "-k", 3, "-o", out, "--verify", "--bounds", "simple", *DIMS, *FAST)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"]["ok"]
    for stage in sorted(out.glob("stage_*.onnx")):
        assert (out / f"{stage.name}.data").is_file()
        onnx.checker.check_model(str(stage))  # the path form follows external data
        model = onnx.load(str(stage), load_external_data=False)
        assert all(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer if t.dims and
                   np.prod(t.dims) * 4 >= writer.WeightPolicy.tensor_threshold)
    onnx.checker.check_model(str(out / "annotated.onnx"))
    cloned = out / "model.onnx.data"  # annotated.onnx keeps the input's weights as the input stored them
    assert cloned.read_bytes() == (external_model.parent / "model.onnx.data").read_bytes()
    assert cloned.stat().st_nlink == 1  # a hard link would fail onnx.checker ("hardlink attack")
    out = tmp_path / "r"
    result = cli("remat", external_model, "--budget", "100%", "-o", out, "--verify", *DIMS, *FAST)
    assert result.exit_code == 0, result.output
    assert (out / "remat.onnx.data").is_file()
    onnx.checker.check_model(str(out / "remat.onnx"))


def test_threshold_moves_weights_of_an_inline_model_outside(tmp_path):
    source = tmp_path / "mlp.onnx"
    onnx.save(mlp(), source)
    result = cli("partition", source, "-k", 2, "-o", tmp_path / "small", "--bounds", "simple", *FAST)
    assert result.exit_code == 0 and not list((tmp_path / "small").glob("*.data"))
    result = cli("partition", source, "-k", 2, "-o", tmp_path / "big", "--bounds", "simple", "--verify",
                 "--external-data-threshold", "1KiB", *FAST)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "big").glob("*.data")) == [
        "annotated.onnx.data", "stage_0.onnx.data", "stage_1.onnx.data"]


def test_weights_are_never_read_to_plan(tmp_path, external_model):
    """Planning works when the data file holds no readable weights at all: only its size is checked."""
    data = external_model.parent / "model.onnx.data"
    size = data.stat().st_size
    data.write_bytes(b"")
    os.truncate(data, size)  # a sparse file of zeros, same size: never opened by planning
    os.chmod(data, 0)
    try:
        graph, loaded = load_graph(external_model, dims={"batch": 1, "sequence": 8})
    finally:
        os.chmod(data, 0o644)
    assert graph.total_param_bytes == size - (size - graph.total_param_bytes)  # sizes from dims
    assert not any(t.raw_data for t in loaded.model.graph.initializer)


def test_truncated_data_file_is_a_one_line_error_naming_the_tensor(tmp_path, external_model):
    data = external_model.parent / "model.onnx.data"
    os.truncate(data, data.stat().st_size // 2)
    out = tmp_path / "out"
    result = cli("partition", external_model, "-k", 2, "-o", out, *DIMS, *FAST)
    assert result.exit_code == 2
    assert "runs past the end" in result.output and "tensor '" in result.output
    assert not out.exists() and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("failure", ["crash", "disk full"])
def test_a_failure_mid_write_leaves_nothing_behind(tmp_path, external_model, monkeypatch, failure):
    calls, step = [], data_files._copy_step

    def broken(*args):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device") if failure == "disk full" else RuntimeError("boom")
        return step(*args)

    monkeypatch.setattr(data_files, "_copy_step", broken)
    out = tmp_path / "out"
    result = cli("partition", external_model, "-k", 2, "-o", out, "--bounds", "simple", *DIMS, *FAST)
    assert result.exit_code != 0
    if failure == "disk full":
        assert result.exit_code == 2 and "no space left" in result.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no staging folder either


def test_no_protobuf_over_the_limit_is_ever_written(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "PROTOBUF_LIMIT", 1000)
    with pytest.raises(UserError, match="over protobuf's 2 GiB limit"):
        writer.write_model(mlp(), tmp_path / "m.onnx", writer.WeightPolicy(threshold=1 << 40))
    assert not list(tmp_path.iterdir())
    written = writer.write_model(mlp(), tmp_path / "m.onnx", writer.WeightPolicy(threshold=0))
    assert [p.name for p in written] == ["m.onnx", "m.onnx.data"]  # weights outside: the protobuf fits


def test_fp16_weights_are_costed_and_emitted_at_their_own_size(tmp_path):
    source = tmp_path / "half.onnx"
    onnx.save(mlp(np.float16), source)
    graph, _ = load_graph(source)
    assert graph.total_param_bytes == 3 * 64 * 64 * 2
    out = tmp_path / "out"
    result = cli("partition", source, "-k", 3, "-o", out, "--bounds", "simple", "--verify",
                 "--external-data-threshold", "0", *FAST)
    assert result.exit_code == 0, result.output
    assert sum((out / f"stage_{i}.onnx.data").stat().st_size >= 64 * 64 * 2 for i in range(3)) == 3


def test_a_model_with_no_tensor_to_move_out_gets_no_data_file(tmp_path):
    """With an external-data input every emitted model keeps its weights outside; a part holding none (a
    schedule piece of shape ops: 982 of them on the 70B shape) is one file, not one and an empty data file."""
    h = onnx.helper
    graph = h.make_graph([h.make_node("Shape", ["x"], ["s"])], "g",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                         [h.make_tensor_value_info("s", onnx.TensorProto.INT64, [2])])
    policy = writer.WeightPolicy(source_dir=tmp_path, always_external=True)
    written = writer.write_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "p.onnx",
                                 policy)
    assert [p.name for p in written] == ["p.onnx"] and sorted(p.name for p in tmp_path.iterdir()) == ["p.onnx"]
    assert [p.name for p in writer.write_model(mlp(), tmp_path / "m.onnx", policy)] == ["m.onnx", "m.onnx.data"]
