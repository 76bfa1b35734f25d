"""Embedded weights (in the .onnx file, not external data) stay in the file: loading cuts each large
``raw_data`` out of what it parses (:mod:`onnxpart.onnx_wire`), and writing copies those byte ranges
into the outputs, so neither holds the weights whole (issue 30: a 0.95 GB transformer partitioned at
5.99 GB peak RSS). tracemalloc sees the Python bytes ``onnx.load`` and ``SerializeToString`` make."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from onnxpart import onnx_wire, writer
from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.loading import weight_policy
from onnxpart.onnx_io import load_graph
from tests.test_big_models import mlp

runner = CliRunner()
WIDTH, LAYERS = 512, 16  # sixteen 1 MiB weights: 16 MiB embedded
WEIGHTS = WIDTH * WIDTH * 4 * LAYERS


def _save(folder, layers: int):
    path = folder / "in" / "mlp.onnx"
    path.parent.mkdir()
    onnx.save(mlp(layers=layers, width=WIDTH), path)
    return path


@pytest.fixture
def embedded(tmp_path):
    return _save(tmp_path, LAYERS)


def _original(path) -> dict[str, bytes]:
    return {t.name: t.raw_data for t in onnx.load(str(path)).graph.initializer}


def _peak(call):
    """The most Python memory ``call`` holds at once, after a first call untraced (imports, caches)."""
    call()
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_loading_leaves_embedded_weights_in_the_file_as_ranges_of_it(embedded):
    (_, loaded), peak = _peak(lambda: load_graph(embedded))
    assert peak < WEIGHTS / 4  # onnx.load alone holds the file's bytes: more than WEIGHTS
    assert loaded.model.ByteSize() < WEIGHTS / 100 and not loaded.uses_external_data
    data = embedded.read_bytes()
    for name, raw in _original(embedded).items():
        tensor = next(t for t in loaded.model.graph.initializer if t.name == name)
        info = onnx.external_data_helper.ExternalDataInfo(tensor)
        assert info.location == embedded.name and data[info.offset:info.offset + info.length] == raw


def test_a_symlinked_model_loads_its_embedded_weights_through_the_link(embedded, tmp_path):
    link = tmp_path / "elsewhere" / "link.onnx"  # outside the real file's folder: still its own bytes
    link.parent.mkdir()
    link.symlink_to(embedded)
    graph, loaded = load_graph(link)
    assert graph.total_param_bytes == WEIGHTS and loaded.embedded(loaded.model.graph.initializer[0])


def test_writing_copies_the_ranges_without_holding_the_weights(embedded, tmp_path):
    graph, loaded = load_graph(embedded)
    target = tmp_path / "copy.onnx"
    _, peak = _peak(lambda: writer.write_model(loaded.model, target, weight_policy(loaded, None)))
    assert peak < WEIGHTS / 4  # reading the ranges into the protobuf and serializing it: 2 x WEIGHTS
    onnx.checker.check_model(str(target))
    assert _original(target) == _original(embedded)
    assert [t.name for t in onnx.load(str(target)).graph.initializer] == list(_original(embedded))


def test_stage_files_of_an_embedded_model_hold_its_weights_and_run(tmp_path):
    embedded, out = _save(tmp_path, 4), tmp_path / "out"
    result = runner.invoke(app, ["partition", str(embedded), "-k", "2", "-o", str(out), "--bounds", "simple",
                                 "--verify", "--time-limit", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"]["ok"]
    assert sorted(p.name for p in out.glob("*.onnx*")) == ["annotated.onnx", "stage_0.onnx", "stage_1.onnx"]
    original, held = _original(embedded), {}
    for path in out.glob("*.onnx"):
        onnx.checker.check_model(str(path))
        weights = _original(path)
        assert all(raw == original[name] for name, raw in weights.items())
        held.update(weights) if path.name != "annotated.onnx" else None
    assert held == original and _original(out / "annotated.onnx") == original


def test_embedded_and_external_weights_together(tmp_path):
    """annotated.onnx clones the data file and writes the embedded weights inline (no copy of the model
    file beside it: its references would point at the output folder's)."""
    model = mlp(layers=3, width=WIDTH)
    first = model.graph.initializer[0]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "w0.bin").write_bytes(first.raw_data)
    first.ClearField("raw_data")
    first.data_location = onnx.TensorProto.EXTERNAL
    first.external_data.add(key="location", value="w0.bin")
    onnx.save(model, folder / "mixed.onnx")
    graph, loaded = load_graph(folder / "mixed.onnx")
    assert loaded.uses_external_data
    out = tmp_path / "out"
    out.mkdir()
    written = writer.write_annotated(loaded.model, out / "annotated.onnx", weight_policy(loaded, None))
    assert sorted(p.name for p in written) == ["annotated.onnx", "w0.bin"]
    onnx.checker.check_model(str(out / "annotated.onnx"))
    reloaded = onnx.load(str(out / "annotated.onnx"))
    expected = {t.name: numpy_helper.to_array(t) for t in mlp(layers=3, width=WIDTH).graph.initializer}
    assert all(np.array_equal(numpy_helper.to_array(t, str(out)), expected[t.name]) for t in reloaded.graph.initializer)


@pytest.mark.invalid_onnx
def test_a_large_raw_data_of_the_wrong_length_is_still_refused(tmp_path):
    model = mlp(layers=1, width=WIDTH)
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    onnx.save(model, tmp_path / "short.onnx")
    with pytest.raises(UserError, match="invalid model short.onnx.*w0"):
        load_graph(tmp_path / "short.onnx")


@pytest.mark.invalid_onnx
def test_bytes_that_are_no_protobuf_are_left_to_onnx_load(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x0f" * 64)  # wire type 7: no message the walk can read
    assert onnx_wire.read_weightless(path, 0) is None
    with pytest.raises(UserError, match="not a readable ONNX model"):
        load_graph(path)


def test_a_sweep_ships_an_embedded_model_as_its_one_file(embedded):
    from onnxpart.sweep.models import model_files

    files, peak = _peak(lambda: model_files(embedded))
    assert files == [embedded] and peak < WEIGHTS / 4  # not the model twice, nor its weights in memory


def test_ort_optimize_hands_onnxruntime_the_weights_left_in_the_file(embedded):
    from onnxpart.ort_optimize import ort_optimized

    with ort_optimized(embedded) as optimized:
        model = onnx.load(str(optimized))
        assert {t.name: t.raw_data for t in model.graph.initializer} == _original(embedded)
