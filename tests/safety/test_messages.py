"""Silent changes and wrong words (issue 26, part 5): an ``--input-shape`` over a dim the model fixes is
refused unless ``--force-shape``; an empty comma list says no method was given; messages name what is
really wrong; usage mistakes are one ``error:`` line like every other bad input."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from tests.safety.harness import DIAMOND, STRATEGY_ARGS, Guard, run_cli

pytestmark = pytest.mark.invalid_onnx

#: every command that reads a model, with what it needs besides the model (and -o for all but inspect)
COMMANDS = {"inspect": [], "annotate": [], **STRATEGY_ARGS}


def _args(command: str, tmp_path, *extra) -> list:
    output = [] if command == "inspect" else ["-o", tmp_path / "out"]
    return [command, DIAMOND, *COMMANDS[command], *output, *extra]


def _guard(tmp_path) -> Guard:
    return Guard(tmp_path / "cwd", (DIAMOND,), tmp_path / "out")


# --------------------------------------------------------------------------- --input-shape over fixed dims
@pytest.mark.parametrize("command", COMMANDS)
def test_input_shape_over_a_fixed_dim_is_refused(tmp_path, command):
    """diamond's input x is 1x8x16x16: batch 2 changed axis 0 without a word."""
    _guard(tmp_path).refused(*_args(command, tmp_path, "--input-shape", "x=2x8x16x16"),
                             mention="--input-shape x: axis 0 is 1 in the model, not 2; pass --force-shape")


def test_input_shape_over_an_inner_fixed_dim_is_refused(tmp_path):
    """t2_relu is 1x16x16x16 by ONNX inference; the hint halved its last two dims silently."""
    _guard(tmp_path).refused("inspect", DIAMOND, "--input-shape", "t2_relu=1x16x8x8",
                             mention="axis 2 is 16 in the model, not 8")


def test_force_shape_costs_the_given_dims(tmp_path):
    def activations(*extra) -> int:
        proc = run_cli("inspect", DIAMOND, "--json", *extra, cwd=tmp_path / "cwd")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["activation_bytes"]

    assert activations("--input-shape", "x=2x8x16x16", "--force-shape") == 2 * activations()


# --------------------------------------------------------------------------------------- comma lists
@pytest.mark.parametrize("command, option", [("remat", "--method"), ("schedule", "--method"), ("tile", "--method"),
                                             ("partition", "--bounds")])
def test_empty_comma_list_says_nothing_was_given(tmp_path, command, option):
    what = "bound" if option == "--bounds" else "method"
    _guard(tmp_path).refused(*_args(command, tmp_path, option, ","), mention=f"no {what} given to {option}: use ")


def test_empty_entry_between_commas_is_named(tmp_path):
    _guard(tmp_path).refused(*_args("schedule", tmp_path, "--method", "heft,,sa"),
                             mention="--method 'heft,,sa' has an empty method between commas")


# -------------------------------------------------------------------------------- messages that misled
def _saved(tmp_path, model: onnx.ModelProto):
    path = tmp_path / "in" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path))
    return path


def test_matmul_dims_that_disagree_once_fixed_are_named(tmp_path):
    """[n, k] @ [m, 5] with --dim k=3 --dim m=4: the shapes disagree (was costed as if they fit)."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "k"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m", 5])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n", 5])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], "mm", [a, b], [c])
    path = _saved(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    line = Guard(tmp_path / "cwd", (path.parent,)).refused("inspect", path, "--dim", "n=2", "--dim", "k=3",
                                                           "--dim", "m=4")
    assert "shapes disagree at node 'mm' (MatMul): a float32[2, 3], b float32[4, 5]" in line


def test_negative_dim_is_reported_as_negative(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, -3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "neg", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, -3])])
    path = _saved(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    Guard(tmp_path / "cwd", (path.parent,)).refused("inspect", path, mention="'x' has dim -3 on axis 1")


def test_folder_given_as_the_model_is_named_a_folder(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    Guard(tmp_path / "cwd", (folder,)).refused("inspect", folder, mention="is a folder, not a file")


# ------------------------------------------------------------------------------------- usage errors
USAGE = {
    "unknown-option": (["--tim-limit", "3"], "No such option: --tim-limit"),
    "missing-argument": (None, "Missing argument 'model'"),
    "extra-argument": (["surplus"], "unexpected extra argument(s) (surplus)"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("mistake", USAGE)
def test_usage_mistake_is_one_line(tmp_path, command, mistake):
    extra, mention = USAGE[mistake]
    args = [command] if extra is None else _args(command, tmp_path, *extra)
    _guard(tmp_path).refused(*args, mention=mention)


@pytest.mark.parametrize("args, mention", [(["partiton", DIAMOND], "Did you mean 'partition'?"),
                                           ([], "Missing command")], ids=["unknown-command", "no-arguments"])
def test_command_level_usage_mistake_is_one_line(tmp_path, args, mention):
    _guard(tmp_path).refused(*args, mention=mention)


def test_help_keeps_its_page(tmp_path):
    proc = run_cli("partition", "--help", cwd=tmp_path / "cwd")
    assert proc.returncode == 0 and "--stages" in proc.stdout and "Usage: onnxpart partition" in proc.stdout


# --------------------------------------------------------------------------- issue 40's smaller things
@pytest.mark.parametrize("command", COMMANDS)
def test_a_dtype_hint_that_contradicts_the_model_is_refused(tmp_path, command):
    """x is float32 in the model: ':int64' was accepted without a word by every command."""
    _guard(tmp_path).refused(*_args(command, tmp_path, "--input-shape", "x=1x8x16x16:int64"),
                             mention="--input-shape x: :int64 contradicts the model, where 'x' is float32")


@pytest.mark.parametrize("command", [*STRATEGY_ARGS, "annotate", "sweep"])
def test_an_output_name_longer_than_the_file_system_takes_is_one_line(tmp_path, command):
    """-o with 300 characters printed 'OSError: [Errno 36] File name too long' as a traceback."""
    out = tmp_path / ("o" * 300)
    args = ["sweep", DIAMOND, "--partition", "k=2", "-o", out] if command == "sweep" else \
        [command, DIAMOND, *COMMANDS[command], "-o", out]
    Guard(tmp_path / "cwd", (DIAMOND,)).refused(*args, mention="choose a shorter -o")
    assert [p.name for p in tmp_path.iterdir()] == ["cwd"]  # nothing written beside it, staging included


@pytest.mark.parametrize("objective", (["--objective", "latency"], ["--objective", "throughput", "--batch", "2"]))
def test_a_zero_dim_is_planned_without_nan(tmp_path, objective):
    """An empty tensor (a decode step's empty KV cache, here a zero batch) made schedule print numpy's
    'invalid value encountered in multiply': 0 bytes times a missing link's infinite seconds per byte."""
    out = tmp_path / "out"
    proc = run_cli("schedule", DIAMOND, *STRATEGY_ARGS["schedule"], *objective, "--input-shape", "x=0x8x16x16",
                   "--force-shape", "-o", out, "--json", cwd=tmp_path / "cwd")
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["certificate"]["upper_bound"] >= 0


@pytest.mark.parametrize("command", [*COMMANDS, "sweep"])
def test_a_model_with_no_nodes_is_answered_in_one_line_or_planned(tmp_path, command):
    """Its output is its input: schedule printed a traceback (an (n, K) array of no ops), sweep's plot
    another (a unit of 'ns' as its scale)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    path = _saved(tmp_path, helper.make_model(helper.make_graph([], "empty", [x], [x]),
                                              opset_imports=[helper.make_opsetid("", 17)]))
    out = tmp_path / "out"
    args = ["sweep", path, "--partition", "k=2", "--remat", "budget=90%", "--time-limit", "1", "-o", out] \
        if command == "sweep" else [command, path, *COMMANDS[command], *([] if command == "inspect" else ["-o", out])]
    proc = run_cli(*args, cwd=tmp_path / "cwd")
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    if proc.returncode == 2:
        assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
