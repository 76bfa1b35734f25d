"""Invalid models are refused at the door (issue 26, parts 3 and 4): every command that reads a model
answers one ``error:`` line naming the tensor or node, exit 2, and writes nothing — for a model onnx
would refuse (built here with ``onnx.helper``), and, under ``--verify`` and ``--cost measured``, for a
valid model that onnxruntime cannot build, run, or feed on this machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.safety.harness import DIAMOND, STRATEGY_ARGS, Guard, digest, error_line

pytestmark = pytest.mark.invalid_onnx

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])


def _model(nodes, inputs=(X,), outputs=(Y,), initializers=(), opset: int = 17, ir: int = 8) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "bad", list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _relu(name: str = "relu", op: str = "Relu", src: str = "x", out: str = "y") -> onnx.NodeProto:
    return helper.make_node(op, [src], [out], name=name)


def _weight() -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((2, 3), np.float32), "w")


def _short_raw_data() -> onnx.ModelProto:
    weight = _weight()
    weight.raw_data = weight.raw_data[:8]
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], initializers=[weight])


def _external(offset: str, file_bytes: int):
    """The weight ``w`` in ``w.bin`` at ``offset``, the file ``file_bytes`` long (it needs 24)."""
    weight = _weight()
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", offset)):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], initializers=[weight])
    return model, {"w.bin": bytes(file_bytes)}


def _typed(elem_type: int, dims=(2, 3)) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", elem_type, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.COMPLEX64 if elem_type == TensorProto.COMPLEX64
                                      else TensorProto.FLOAT, list(dims))
    return _model([_relu()], inputs=[x], outputs=[y])


def _matmul_mismatch() -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 5])
    return _model([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], inputs=[a, b], outputs=[c])


#: kind -> (the model and the files beside it, what the error line must name)
INVALID = {
    "duplicate-writers": (lambda: (_model([_relu("first"), _relu("second", "Neg")]), {}), "'y'"),
    "output-nothing-produces": (lambda: (_model([_relu()], outputs=[Y, helper.make_tensor_value_info(
        "z", TensorProto.FLOAT, [2, 3])]), {}), "'z'"),
    "no-outputs": (lambda: (_model([_relu()], outputs=[]), {}), "no outputs"),
    "short-raw-data": (lambda: (_short_raw_data(), {}), "tensor name: w"),
    "short-external-file": (lambda: _external("0", 8), "'w'"),
    "external-offset-negative": (lambda: _external("-100", 24), "offset '-100'"),
    "external-offset-text": (lambda: _external("abc", 24), "offset 'abc'"),
    "relu-on-complex64": (lambda: (_typed(TensorProto.COMPLEX64), {}), "complex64"),
    "undefined-element-type": (lambda: (_typed(TensorProto.UNDEFINED), {}), "'x' has no element type"),
    "negative-dim": (lambda: (_typed(TensorProto.FLOAT, (2, -3)), {}), "dim -3"),
    "output-without-shape": (lambda: (_model([_relu()], outputs=[helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)]), {}), "'y' declares no shape"),
    "ir-version-99": (lambda: (_model([_relu()], ir=99), {}), "IR version 99"),
    "opset-99": (lambda: (_model([_relu()], opset=99), {}), "opset 99"),
    "unknown-op": (lambda: (_model([_relu("mystery", "Frobnicate")]), {}), "Frobnicate"),
    "matmul-dims-disagree": (lambda: (_matmul_mismatch(), {}), "mm"),
}

#: every command that reads a model, with what it needs besides the model and its output
COMMANDS = {"inspect": [], "annotate": [], **STRATEGY_ARGS}


def _save(folder: Path, model: onnx.ModelProto, extra: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, data in extra.items():
        (folder / name).write_bytes(data)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _args(command: str, model: Path, output: Path) -> list:
    if command == "inspect":
        return [command, model]
    if command == "annotate":
        return [command, model, "-o", output]
    return [command, model, *COMMANDS[command], "-o", output]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", INVALID)
def test_invalid_model_is_refused_at_load(tmp_path, kind, command):
    build, mention = INVALID[kind]
    model = _save(tmp_path / "in", *build())
    guard = Guard(tmp_path / "cwd", (model.parent,), tmp_path / "out")
    guard.refused(*_args(command, model, guard.output), mention=mention)


# ------------------------------------------------------------------ onnxruntime under --verify / measured
def _diamond_with(change) -> onnx.ModelProto:
    """The diamond fixture, changed in place by ``change(graph)``; still a valid ONNX model."""
    model = onnx.load(str(DIAMOND))
    change(model.graph)
    onnx.checker.check_model(model, full_check=True)
    return model


def _relu_on_int16(graph: onnx.GraphProto) -> None:
    """Relu on int16: ONNX allows it, onnxruntime's CPU provider has no kernel (the session cannot be built)."""
    relu = next(node for node in graph.node if node.op_type == "Relu")
    source, target = relu.input[0], relu.output[0]
    relu.input[0], relu.output[0] = "as_int16", "relu_int16"
    at = list(graph.node).index(relu)
    nodes = list(graph.node)
    nodes[at:at + 1] = [helper.make_node("Cast", [source], ["as_int16"], name="to_int16", to=TensorProto.INT16), relu,
                        helper.make_node("Cast", ["relu_int16"], [target], name="to_float", to=TensorProto.FLOAT)]
    del graph.node[:]
    graph.node.extend(nodes)


def _gather_out_of_range(graph: onnx.GraphProto) -> None:
    """A Gather of channel 99 of 16: valid for ONNX, an error when onnxruntime runs it."""
    sigmoid = next(node for node in graph.node if node.op_type == "Sigmoid")
    target = sigmoid.output[0]
    sigmoid.output[0] = "sigmoid_all"
    graph.initializer.append(numpy_helper.from_array(np.array([*range(15), 99], np.int64), "channels"))
    graph.node.insert(list(graph.node).index(sigmoid) + 1,
                      helper.make_node("Gather", ["sigmoid_all", "channels"], [target], name="pick", axis=1))


def _huge_batch(graph: onnx.GraphProto) -> None:
    """A batch of 5e8: 1.02e12 input elements, 3.7 TiB of float32."""
    for value in list(graph.input) + list(graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 500_000_000


RUNTIME_FAULTS = {
    "no-kernel": (_relu_on_int16, "Relu"),
    "fails-while-running": (_gather_out_of_range, "'pick'"),
    "inputs-beyond-memory": (_huge_batch, "1,024,000,000,000"),
}

#: the commands that run the user's model in onnxruntime, and the option that makes them
RUNS_MODEL = {
    "inspect": ["--cost", "measured"],
    "annotate": ["--cost", "measured"],
    "partition": ["-k", "2", "--time-limit", "2", "--verify"],
    "remat": ["--budget", "100%", "--time-limit", "2", "--verify"],
    "schedule": ["--system", str(DIAMOND.parent / "systems" / "cpu_t4_a100.yaml"), "--time-limit", "2", "--verify"],
    "tile": ["--devices", "2", "--time-limit", "2", "--verify"],
}


#: no device of the system file holds 3.7 TiB: schedule refuses that model before --verify (exit 2 too)
RUNTIME_CASES = [(fault, command) for fault in RUNTIME_FAULTS for command in RUNS_MODEL
                 if (fault, command) != ("inputs-beyond-memory", "schedule")]


@pytest.mark.parametrize("fault, command", RUNTIME_CASES)
def test_model_onnxruntime_cannot_run_is_refused(tmp_path, fault, command):
    change, mention = RUNTIME_FAULTS[fault]
    model = _save(tmp_path / "in", _diamond_with(change), {})
    guard = Guard(tmp_path / "cwd", (model.parent,), tmp_path / "out")
    args = [command, model, *RUNS_MODEL[command]] + ([] if command == "inspect" else ["-o", guard.output])
    if RUNS_MODEL[command][0] != "--cost":
        guard.refused(*args, mention=mention)
        return
    # --cost measured: where onnxruntime's profile goes is the working-folder tests' concern, not this one's
    proc = guard.run(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert mention in error_line(proc)
    assert digest(model.parent) == guard.before and not guard.output.exists()
