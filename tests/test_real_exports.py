"""Real exports: the patterns of torch.onnx.export (legacy and dynamo) and optimum load with no hint (or
with --dim only), keep their dynamic dims in every emitted model, and round-trip through partition and
remat with --verify at two sizes. The models are built without torch by tests/export_like.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from onnxpart import runtime
from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.onnx_io import load_graph, parse_input_shapes
from onnxpart.verify import VerificationError, VerifyReport, add_size
from tests.export_like import ALL_DYNAMIC, ALL_STATIC, TYPED_INTERNAL_HINTS, kv_cache_decoder, typed_internal_tensors

runner = CliRunner()
FAST = ["--time-limit", "2", "--json"]
#: Short searches (what these tests check is the files, not the plan): partition's small order search, whose
#: local search then runs its kicks until a 1 s limit, and schedule's list schedulers.
FIXED_SEARCH = {"partition": ["--population", "8", "--generations", "3", "--random-orders", "3", "--no-mla",
                              "--time-limit", "1"],
                "schedule": ["--method", "met,greedy,heft"]}


def cli(command, *args):
    return runner.invoke(app, [command, *map(str, args), *FIXED_SEARCH.get(command, [])])


def saved(tmp_path, name, builder):
    path = tmp_path / f"{name}.onnx"
    onnx.save(builder(), path)
    return path


def dim_args(dims):
    return [arg for name, value in dims.items() for arg in ("--dim", f"{name}={value}")]


@pytest.mark.parametrize("name,builder,dims", ALL_STATIC + ALL_DYNAMIC, ids=lambda v: v if isinstance(v, str) else "")
def test_every_export_pattern_loads_with_no_hint_or_dims_only(tmp_path, name, builder, dims):
    before = onnx.shape_inference.infer_shapes(builder(), data_prop=True)
    graph, loaded = load_graph(saved(tmp_path, name, builder), dims=dims)
    assert all(-1 not in t.shape for t in graph.tensors.values())
    assert loaded.dynamic == bool(dims)
    if name in ("where_equal_expand", "reshape_mod_slice"):  # ONNX inference alone leaves them unknown
        stated = {vi.name: vi for vi in before.graph.value_info}
        assert any(not d.HasField("dim_value") for vi in stated.values() for d in vi.type.tensor_type.shape.dim)


def test_dynamic_model_without_dims_names_them_in_the_error(tmp_path):
    path = saved(tmp_path, *ALL_DYNAMIC[1][:2])
    with pytest.raises(UserError, match=r"symbolic dims batch \(input_ids.*--dim batch=VALUE --dim sequence=VALUE"):
        load_graph(path)
    with pytest.raises(UserError, match="no symbolic dim of that name"):
        load_graph(path, dims={"batchsize": 1})


def test_input_shape_on_an_input_means_its_named_dims(tmp_path):
    path = saved(tmp_path, *ALL_DYNAMIC[2][:2])  # tied_lm_head: input_ids [batch, sequence]
    graph, loaded = load_graph(path, parse_input_shapes(["input_ids=2x5"]))
    assert loaded.dims == {"batch": 2, "sequence": 5} and graph.tensors["logits"].shape[:2] == (2, 5)
    with pytest.raises(UserError, match=r"rank 2, got 4 dims \(e.g. --input-shape input_ids=1x1\)"):
        load_graph(path, parse_input_shapes(["input_ids=1x3x224x224"]))


def test_hints_on_internal_tensors_take_their_producers_type(tmp_path):
    """A bool mask and an int64 index hinted by shape keep their types (and bool is 1 byte, not 4)."""
    path = saved(tmp_path, "typed", typed_internal_tensors)
    hints = {name: shape(2, 8) for name, (_, shape) in TYPED_INTERNAL_HINTS.items()}
    graph, _ = load_graph(path, hints)
    for name, (dtype, shape) in TYPED_INTERNAL_HINTS.items():
        info = graph.values[name]
        assert info.dtype == np.dtype(dtype).name, name
        assert info.shape == tuple(shape(2, 8))
    assert graph.values["is_positive"].bytes == 16 and graph.values["argmax"].bytes == 16


@pytest.mark.parametrize("name,builder,dims", ALL_DYNAMIC, ids=lambda v: v if isinstance(v, str) else "")
def test_partition_keeps_dynamic_dims_and_verifies_at_two_sizes(tmp_path, name, builder, dims):
    path = saved(tmp_path, name, builder)
    out = tmp_path / "out"
    result = cli("partition", path, "-k", 3, "-o", out, "--verify", "--bounds", "simple", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["verify"]
    assert report["ok"] and [size["dims"] for size in report["sizes"]] == [dims, {k: 2 * v for k, v in dims.items()}]
    first = onnx.load(str(out / "stage_0.onnx"))
    params = {d.dim_param for vi in first.graph.input for d in vi.type.tensor_type.shape.dim}
    assert "batch" in params  # the stage takes any batch
    frozen = tmp_path / "frozen"
    result = cli("partition", path, "-k", 3, "-o", frozen, "--freeze-dims", "--bounds", "simple", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    stage = onnx.load(str(frozen / "stage_0.onnx"))
    assert all(d.HasField("dim_value") for vi in stage.graph.input for d in vi.type.tensor_type.shape.dim)


@pytest.mark.parametrize("name,builder,dims", ALL_DYNAMIC[1:3], ids=lambda v: v if isinstance(v, str) else "")
def test_remat_at_the_smallest_budget_verifies_at_two_sizes(tmp_path, name, builder, dims):
    path = saved(tmp_path, name, builder)
    out = tmp_path / "out"
    result = cli("remat", path, "--budget", "min", "-o", out, "--verify", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["budget_search"]["budget_bytes"] == payload["budget_bytes"] >= payload["min_budget_bytes"]
    assert payload["verify"]["ok"] and len(payload["verify"]["sizes"]) == 2
    remat = onnx.load(str(out / "remat.onnx"))
    assert any(d.dim_param == "batch" for vi in remat.graph.input for d in vi.type.tensor_type.shape.dim)


@pytest.mark.parametrize("command", [
    ["partition", "-k", 2, "--bounds", "simple"], ["remat", "--budget", "min"],
    ["schedule", "--system", "fixtures/systems/cpu_t4_a100.yaml"],
    ["schedule", "--system", "fixtures/systems/cpu_t4_a100.yaml", "--objective", "throughput", "--batch", 2]],
    ids=["partition", "remat", "schedule-latency", "schedule-throughput"])
def test_frozen_dims_verify_at_the_costed_dims_only(tmp_path, command):
    """--freeze-dims writes the costed dims into every emitted file, so --verify must not also run them at
    twice the dims (onnxruntime refused those shapes: exit 1 with a traceback)."""
    name, builder, dims = ALL_DYNAMIC[1]  # the KV-cache decoder: four symbolic dims
    path = saved(tmp_path, name, builder)
    out = tmp_path / "out"
    result = cli(command[0], path, *command[1:], "-o", out, "--freeze-dims", "--verify", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["verify"]
    assert report["ok"] and [size["dims"] for size in report["sizes"]] == [dims]


def test_throughput_pieces_verify_at_two_sizes(tmp_path):
    """Throughput --verify runs the batch at the costed dims and at twice each, as latency does: the
    pieces stay dynamic (a symbolic batch axis: each input twice the rows)."""
    name, builder, dims = ALL_DYNAMIC[1]
    path = saved(tmp_path, name, builder)
    result = cli("schedule", path, "--system", "fixtures/systems/cpu_t4_a100.yaml", "--objective", "throughput",
                 "--batch", 3, "-o", tmp_path / "out", "--verify", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["verify"]
    assert report["ok"] and [size["dims"] for size in report["sizes"]] == [dims, {k: 2 * v for k, v in dims.items()}]


def test_a_part_of_dead_ops_only_emits_their_results(tmp_path):
    """The KV-cache decoder keeps a dead chain (Gather → Unsqueeze, read by nothing). Alone in a part it made
    no outputs, and onnxruntime refuses a graph without one ("At least one output should be requested")."""
    from onnxpart.parts import part_io, part_models

    name, builder, dims = ALL_DYNAMIC[1]
    path = saved(tmp_path, name, builder)
    graph, loaded = load_graph(path, dims=dims)
    dead = [op for op in graph.ops if all(not graph.tensors[out].consumers and out not in graph.outputs
                                          for out in op.outputs if out in graph.tensors)]
    assert dead  # the case this test is about
    assignment = np.zeros(len(graph.ops), dtype=np.int64)
    assignment[dead[-1].index] = 1
    io = part_io(graph, assignment, 2)
    assert io[1][1] == [out for out in dead[-1].outputs if out in graph.tensors]
    model = part_models(loaded.model, graph, assignment, 2, lambda part: f"part{part}", loaded.value_info, only=[1])[1]
    session = runtime.make_session(model)
    feeds = runtime.random_inputs(session, 0)
    assert list(runtime.run_session(session, feeds)) == io[1][1]


def test_weight_generators_sit_just_before_their_first_reader(tmp_path):
    """The tied LM head's Transpose is node 0 in the file; remat.onnx and the last stage move it to just
    before the MatMul that reads it, where onnxruntime starts to hold its output."""
    name, builder, dims = ALL_DYNAMIC[2]
    path = saved(tmp_path, name, builder)
    assert onnx.load(str(path)).graph.node[0].op_type == "Transpose"
    cli("remat", path, "--budget", "100%", "-o", tmp_path / "r", *dim_args(dims), *FAST)
    cli("partition", path, "-k", 2, "-o", tmp_path / "p", "--bounds", "simple", *dim_args(dims), *FAST)
    for model_path in (tmp_path / "r" / "remat.onnx", tmp_path / "p" / "stage_1.onnx"):
        nodes = list(onnx.load(str(model_path)).graph.node)
        at = next(i for i, node in enumerate(nodes) if node.op_type == "Transpose")
        assert nodes[at].output[0] in nodes[at + 1].input, model_path.name


def test_budget_accepts_the_numbers_onnxpart_prints(tmp_path):
    from onnxpart.units import parse_bytes, parse_percent_or_bytes

    assert parse_bytes("6,422,528") == parse_bytes("6_422_528") == 6422528
    assert parse_percent_or_bytes("min") == ("min", 0.0)
    with pytest.raises(UserError):
        parse_bytes("6,42,528")


def test_relative_error_catches_a_mismatch_on_small_valued_outputs():
    reference = {"tiny": np.full(4, 1e-14), "big": np.ones(3)}
    candidate = {"tiny": np.full(4, 2e-14), "big": np.ones(3)}
    mismatch = runtime.compare(reference, candidate)
    assert mismatch.max_abs_error < 1e-13 and mismatch.max_rel_error == pytest.approx(1.0)
    assert mismatch.worst_output == "tiny" and not mismatch.ok
    report = VerifyReport(seed=0, tolerance=1e-4)
    add_size(report, {"batch": 2}, mismatch)
    with pytest.raises(VerificationError, match="'tiny'.*batch"):
        report.raise_if_failed()
    assert VerificationError.exit_code == 1
    assert not runtime.compare({"m": np.array([True, False])}, {"m": np.array([True, True])}).ok
    half = {"h": np.array([512.0], np.float16)}
    assert runtime.compare(half, {"h": np.array([512.5], np.float16)}).ok  # within float16's rounding
    assert not runtime.compare({"h": np.array([512.0], np.float32)}, {"h": np.array([512.5], np.float32)}).ok


def legacy_kv_cache() -> onnx.ModelProto:
    """The KV-cache decoder as legacy exports declare it: the attention mask's length has a name of its own
    (``attention_length``) while the present keys and values say ``total_sequence_length``. onnxruntime's
    symbolic inference derives the present length from the mask, and would call it ``attention_length``."""
    model = kv_cache_decoder()
    mask = next(vi for vi in model.graph.input if vi.name == "attention_mask")
    mask.type.tensor_type.shape.dim[1].dim_param = "attention_length"
    return model


@pytest.mark.parametrize("command", [
    ["partition", "-k", 3, "--bounds", "simple"], ["schedule", "--system", "fixtures/systems/cpu_t4_a100.yaml"],
    ["schedule", "--system", "fixtures/systems/cpu_t4_a100.yaml", "--objective", "throughput", "--batch", 2]],
    ids=["partition", "schedule-latency", "schedule-throughput"])
def test_emitted_files_keep_the_declared_input_and_output_types(tmp_path, command):
    """Every emitted file declares each graph input and output of the original exactly as the original
    does, dim names included (``total_sequence_length``, not what symbolic inference derives)."""
    model = legacy_kv_cache()
    path = tmp_path / "legacy_kv.onnx"
    onnx.save(model, path)
    dims = {"batch": 1, "sequence": 4, "past_sequence_length": 3, "attention_length": 7}
    out = tmp_path / "out"
    result = cli(command[0], path, *command[1:], "-o", out, "--verify", *dim_args(dims), *FAST)
    assert result.exit_code == 0, result.output
    declared = {vi.name: vi.type for vi in list(model.graph.input) + list(model.graph.output)}
    seen = set()
    for file in sorted(out.glob("*.onnx")):
        emitted = onnx.load(str(file), load_external_data=False).graph
        for vi in list(emitted.input) + list(emitted.output):
            if vi.name in declared:
                assert vi.type == declared[vi.name], (file.name, vi.name, vi.type)
                seen.add(vi.name)
    assert seen == set(declared)
