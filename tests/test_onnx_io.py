"""Safe loading, --input-shape, external data, and subgraph extraction."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest

from onnxpart import runtime, shapes
from onnxpart.errors import UserError
from onnxpart.onnx_extract import ModelIndex, extract_subgraph
from onnxpart.onnx_io import load_graph, parse_input_shapes, read_model
from onnxpart.parts import part_io, part_models
from tests import export_like
from tests.conftest import FIXTURES, light


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_model(tmp_path / "nope.onnx")


@pytest.mark.invalid_onnx
def test_random_bytes(tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(UserError, match="not .*ONNX model"):
        read_model(path)


@pytest.mark.invalid_onnx
def test_truncated_file(tmp_path):
    data = light("squeezenet").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="ONNX model"):
        read_model(path)


def test_symbolic_dims_need_input_shape():
    with pytest.raises(UserError, match=r"'batch' \[\?,3,16,16\].*--dim N=VALUE.*--input-shape batch=1x3x16x16"):
        load_graph(FIXTURES / "symbolic.onnx")
    graph, _ = load_graph(FIXTURES / "symbolic.onnx", {"batch": (2, 3, 16, 16)})
    assert graph.tensors["pooled"].shape == (2, 8, 1, 1)
    assert graph.tensors["batch"].bytes == 2 * 3 * 16 * 16 * 4


def test_input_shape_errors():
    with pytest.raises(UserError, match="not a graph input"):
        load_graph(FIXTURES / "symbolic.onnx", {"nope": (1,)})
    with pytest.raises(UserError, match="rank 4"):
        load_graph(FIXTURES / "symbolic.onnx", {"batch": (1, 3)})
    with pytest.raises(UserError, match="NAME=DIMS"):
        parse_input_shapes(["batch:1x3"])
    assert parse_input_shapes(["a=1x3x224x224", "b=7"]) == {"a": (1, 3, 224, 224), "b": (7,)}


def test_external_data_is_checked_but_never_read(tmp_path):
    graph, loaded = load_graph(FIXTURES / "external" / "mlp.onnx")
    assert graph.total_param_bytes == 4 * (32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10)
    weights = [i for i in loaded.model.graph.initializer if i.name == "fc0_w"][0]
    assert onnx.external_data_helper.uses_external_data(weights) and not weights.raw_data  # left on disk


def _with_external_location(tmp_path, location: str):
    folder = tmp_path / "model"
    folder.mkdir()
    model = onnx.load(str(FIXTURES / "external" / "mlp.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(folder / "mlp.onnx"))
    shutil.copy(FIXTURES / "external" / "mlp.onnx.data", tmp_path / "mlp.onnx.data")
    return folder / "mlp.onnx"


@pytest.mark.invalid_onnx
@pytest.mark.parametrize("location", ["../mlp.onnx.data", "ABSOLUTE"])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location):
    if location == "ABSOLUTE":
        location = str(tmp_path / "mlp.onnx.data")
    path = _with_external_location(tmp_path, location)
    with pytest.raises(UserError, match="outside the model's folder"):
        read_model(path)


@pytest.mark.invalid_onnx
def test_external_data_symlink_escaping_is_refused(tmp_path):
    path = _with_external_location(tmp_path, "link.data")
    os.symlink(tmp_path / "mlp.onnx.data", path.parent / "link.data")
    with pytest.raises(UserError, match="outside the model's folder"):
        read_model(path)


def test_input_file_is_never_modified(tmp_path):
    path = tmp_path / "squeezenet.onnx"
    shutil.copy(light("squeezenet"), path)
    before = path.read_bytes()
    load_graph(path, coarsen=True)
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "shufflenet"])
def test_extracted_halves_reproduce_the_model(name):
    """Split the op list in two; the two extracted models, run in sequence, give the original outputs."""
    graph, loaded = load_graph(light(name))
    half = len(graph.ops) // 2
    first, second = graph.ops[:half], graph.ops[half:]
    first_ids = {op.index for op in first}
    crossing = [t.name for t in graph.tensors.values()
                if t.producer in first_ids and any(c not in first_ids for c in t.consumers)]
    first_outputs = crossing + [o for o in graph.outputs if graph.tensors[o].producer in first_ids]
    second_inputs = [t for t in graph.inputs if any(c >= half for c in graph.tensors[t].consumers)] + crossing
    part1 = extract_subgraph(loaded.model, [n for op in first for n in op.onnx_nodes], list(graph.inputs),
                             first_outputs, name="part1", declare=loaded.value_info)
    part2 = extract_subgraph(loaded.model, [n for op in second for n in op.onnx_nodes], second_inputs,
                             [o for o in graph.outputs if graph.tensors[o].producer >= half], name="part2",
                             declare=loaded.value_info)
    for part in (part1, part2):
        onnx.checker.check_model(part, full_check=True)
    session = runtime.make_session(loaded.model)
    feeds = runtime.random_inputs(session, seed=1)
    reference = runtime.run(loaded.model, feeds)
    values = dict(feeds)
    values.update(runtime.run(part1, values))
    values.update(runtime.run(part2, values))
    assert runtime.max_abs_error(reference, {k: values[k] for k in reference}) < 1e-4


def _fixed_and_dynamic_inputs() -> onnx.ModelProto:
    """x is fixed at 1x4 and reshaped by its own Shape; y has a symbolic dim, so the model is dynamic."""
    h = onnx.helper
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Abs", ["s"], ["a"]),  # opaque to ONNX data propagation: known only once folded
             h.make_node("Reshape", ["r", "a"], ["out"]), h.make_node("Relu", ["y"], ["y_out"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4]),
                                      h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4])],
                         [h.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["a", "b"]),
                          h.make_tensor_value_info("y_out", onnx.TensorProto.FLOAT, ["n", 4])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_force_shape_is_not_costed_with_the_declared_dims(tmp_path):
    """A dynamic model is folded once, at no dims, for costing and emission alike; that fold reads
    Shape(x) of the declared 1x4 as a constant, which --force-shape x=2x4 makes false: costing must not
    reuse it (out would be costed 1x4)."""
    path = tmp_path / "m.onnx"
    onnx.save(_fixed_and_dynamic_inputs(), path)
    loaded = read_model(path, parse_input_shapes(["x=2x4"], force=True), {"n": 3})
    assert loaded.types["out"].dims == (2, 4)
    assert read_model(path, dims={"n": 3}).types["out"].dims == (1, 4)


def test_fold_keeps_the_skeleton_inputs():
    """fold hides the graph inputs from graphsurgeon (its cleanup is quadratic in them) and must put them
    back: the weights a skeleton lists as inputs stay typed inputs of the folded model."""
    model = export_like.kv_cache_decoder(hidden=128)
    bare = shapes.skeleton(model)
    folded, constants = shapes.fold(shapes.onnx_infer(bare))
    assert [vi.name for vi in folded.graph.input] == [vi.name for vi in bare.graph.input]
    assert any(init.ByteSize() > shapes.SMALL_CONSTANT_BYTES for init in model.graph.initializer)
    assert constants and len(folded.graph.node) < len(bare.graph.node)


def test_parts_share_one_index_of_the_model(monkeypatch):
    """part_models indexes the model once for all its parts (a schedule of ~1,000 pieces re-indexing a
    13,800-node 70B export per piece spent 100 s writing), and the parts are those extracted one by one."""
    graph, loaded = load_graph(light("inception_v1"))
    assignment = np.arange(len(graph.ops)) % 5
    original, built = ModelIndex.of, []
    monkeypatch.setattr(ModelIndex, "of", staticmethod(lambda model: built.append(model) or original(model)))
    together = part_models(loaded.model, graph, assignment, 5, lambda p: f"p{p}", declare=loaded.value_info)
    assert len(together) == 5 and len(built) == 1
    io = part_io(graph, assignment, 5)
    for part, model in together.items():
        nodes = [n for op in graph.ops if assignment[op.index] == part for n in op.onnx_nodes]
        alone = extract_subgraph(loaded.model, nodes, *io[part], name=f"p{part}", declare=loaded.value_info)
        assert model.SerializeToString() == alone.SerializeToString()
