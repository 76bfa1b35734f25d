"""``--weights copy|link|reference``: how emitted models get the input's external-data weights.

copy owns its bytes (an in-place edit of the input changes nothing; onnx.checker passes by path); link
shares the input's inode (the edit shows through, as the README warns; onnx refuses hard-linked data by
path, onnxruntime runs it); reference writes no weight at all: the files read the input's data file at the
input's offsets and name its folder, and run in onnxruntime from any working folder."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import external_data_helper
from typer.testing import CliRunner

from onnxpart import data_files, runtime
from onnxpart.cli.app import app
from tests.export_like import save_with_external_data
from tests.test_big_models import mlp

runner = CliRunner()
FAST = ["--time-limit", "5", "--bounds", "simple", "--json"]
X = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)


def cli(*args):
    return runner.invoke(app, [*map(str, args)])


@pytest.fixture
def model(tmp_path):
    """A 3-layer MLP with every weight in in/model.onnx.data."""
    return save_with_external_data(mlp(), tmp_path / "in", "model.onnx")


def partition(model, out, *weights):
    result = cli("partition", model, "-k", 2, "-o", out, "--verify", *weights, *FAST)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"]["ok"]
    return out


def run(path) -> np.ndarray:
    """The model file's one output on ``X``, in onnxruntime (:func:`onnxpart.runtime.make_session`)."""
    return next(iter(runtime.run(path, {"x": X}).values()))


def references(path) -> dict[str, tuple[str, int]]:
    """{weight: (external-data location, offset)} of the model file ``path``."""
    model = onnx.load(str(path), load_external_data=False)
    return {t.name: (info.location, info.offset)
            for t, info in ((t, external_data_helper.ExternalDataInfo(t)) for t in model.graph.initializer)}


def data_folder_of(path):
    return data_files.data_folder(path).resolve()


def edit_in_place(data) -> None:
    """Overwrite the first weight's first bytes of the input's data file, in place (same inode)."""
    with open(data, "r+b") as handle:
        handle.write(np.full(64, 0.5, np.float32).tobytes())


# onnx (and onnxruntime) refuse external data outside a model's folder by path: the files are checked, and
# shown valid, from a copy beside the input's data file instead (the README's own recipe)
@pytest.mark.invalid_onnx
def test_reference_reads_the_original_weights_and_runs_from_another_folder(tmp_path, model, monkeypatch):
    out = partition(model, tmp_path / "out", "--weights", "reference")
    assert not list(out.glob("*.data"))  # nothing copied
    original = references(model)
    for name in ("stage_0.onnx", "stage_1.onnx", "annotated.onnx"):
        assert references(out / name).items() <= original.items()  # the input's file, at the input's offsets
        assert data_folder_of(out / name) == model.parent.resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    options = ort.SessionOptions()  # the README's recipe, with onnxruntime's own API
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model.parent))
    annotated = onnx.load(str(out / "annotated.onnx"), load_external_data=False)
    session = ort.InferenceSession(annotated.SerializeToString(), options, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], run(model))
    np.testing.assert_array_equal(run(out / "annotated.onnx"), run(model))  # onnxpart's runner finds the folder
    for name in ("stage_0.onnx", "annotated.onnx"):  # a valid model of the input's folder, by path
        (model.parent / name).write_bytes((out / name).read_bytes())
        onnx.checker.check_model(str(model.parent / name), full_check=True)
    check = cli("partition", model, "-k", 2, "--check-certificate", out)
    assert check.exit_code == 0, check.output


def test_a_copy_stays_correct_when_the_original_is_edited_in_place(tmp_path, model):
    out = partition(model, tmp_path / "out")
    before = run(out / "annotated.onnx")
    for name in ("stage_0.onnx", "stage_1.onnx", "annotated.onnx"):
        onnx.checker.check_model(str(out / name))  # the path form, which follows external data
    edit_in_place(model.parent / "model.onnx.data")
    assert not np.array_equal(run(model), before)
    np.testing.assert_array_equal(run(out / "annotated.onnx"), before)
    assert (out / "model.onnx.data").stat().st_nlink == 1


@pytest.mark.invalid_onnx  # onnx refuses hard-linked external data by path, the input's too (the README's caveat)
def test_link_shares_the_input_inode_so_an_in_place_edit_shows_through(tmp_path, model):
    out = partition(model, tmp_path / "out", "--weights", "link")
    data = model.parent / "model.onnx.data"
    assert (out / "model.onnx.data").stat().st_ino == data.stat().st_ino and not list(out.glob("stage_*.data"))
    assert references(out / "stage_1.onnx").items() <= references(model).items()
    before = run(out / "stage_0.onnx")  # onnxruntime reads hard-linked data by path
    with pytest.raises(onnx.checker.ValidationError, match="hard link"):
        onnx.checker.check_model(str(out / "stage_0.onnx"))  # the README's caveat: onnx refuses it by path
    edit_in_place(data)
    assert not np.array_equal(run(out / "stage_0.onnx"), before)  # the edit shows through


def test_an_embedded_model_is_copied_with_a_note(tmp_path):
    source = tmp_path / "mlp.onnx"
    onnx.save(mlp(), source)
    result = cli("partition", source, "-k", 2, "-o", tmp_path / "out", "--weights", "reference", "--time-limit", "5",
                 "--bounds", "simple")
    assert result.exit_code == 0, result.output
    assert "embeds its weights" in result.output
    for stage in (tmp_path / "out").glob("*.onnx"):
        assert data_files.data_folder(stage) is None
        onnx.checker.check_model(str(stage))


@pytest.mark.parametrize("args, message", [
    (["--weights", "hardlink"], "--weights hardlink: use copy, link or reference"),
    (["--weights", "link"], "hard links cannot cross file systems"),
])
def test_bad_weights_are_one_error_line_and_nothing_written(tmp_path, model, monkeypatch, args, message):
    monkeypatch.setattr(data_files, "same_file_system", lambda a, b: False)
    out = tmp_path / "out"
    result = cli("partition", model, "-k", 2, "-o", out, *args, *FAST)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {result.output.strip()[7:]}"] and message in result.output
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_copy_range_keeps_holes_and_reports_progress(tmp_path):
    source, target = tmp_path / "sparse", tmp_path / "copy"
    with open(source, "wb") as handle:
        handle.truncate(64 << 20)
        handle.seek(32 << 20)
        handle.write(b"x" * 4096)
    seen = []
    data_files.clone_file(source, target, lambda name, done, total: seen.append((done, total)))
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_blocks * 512 < 1 << 20  # the 64 MiB hole stayed a hole
    assert seen[0] == (0, 64 << 20) and seen[-2] == (64 << 20, 64 << 20) and seen[-1] == (None, 64 << 20)


def test_the_copy_bar_draws_big_copies_only_and_always_closes():
    from onnxpart.cli.weights import BAR_BYTES, CopyBar

    bar = CopyBar(quiet=False)
    bar("small.data", 0, BAR_BYTES - 1)
    assert bar.bar is None
    bar("big.data", 0, BAR_BYTES)
    bar("big.data", BAR_BYTES // 2, BAR_BYTES)
    assert bar.bar is not None
    bar("big.data", None, BAR_BYTES)  # the copy ended (or failed): the bar goes
    assert bar.bar is None and not bar.tasks
    quiet = CopyBar(quiet=True)  # --json: nothing on the terminal
    quiet("big.data", 0, BAR_BYTES)
    assert quiet.bar is None
