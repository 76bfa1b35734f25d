"""Small ONNX models for the tile tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name: str, shape, seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def mlp(path, batch: int = 8, d_in: int = 16, d_hidden: int = 32, d_out: int = 16, bias: bool = False) -> str:
    """x @ W1 (+ b1) -> Relu -> @ W2: 6 tensors without the bias."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1")]
    inits = [_init("W1", [d_in, d_hidden], 1), _init("W2", [d_hidden, d_out], 2)]
    act = "h"
    if bias:
        nodes.append(helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"))
        inits.append(_init("b1", [d_hidden], 3))
        act = "hb"
    nodes += [helper.make_node("Relu", [act], ["r"], name="relu"),
              helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return str(path)


def attention_core(path, seq: int = 8, d: int = 12) -> str:
    """q @ kᵀ -> Softmax -> @ v with a Transpose: 6 tensors (q, k, kt, s, p, v, o ... minus one)."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], name="tr", perm=[1, 0]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Softmax", ["s"], ["o"], name="softmax", axis=-1)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [seq, d]) for n in ("q", "k")]
    graph = helper.make_graph(nodes, "attn", inputs, [helper.make_tensor_value_info("o", TensorProto.FLOAT, [seq, seq])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def matmul_relu(path, m: int = 4, k: int = 8, n: int = 4) -> str:
    """x @ W -> Relu: 4 tensors, small enough to enumerate on a 2x2 mesh."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "mm_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [_init("W", [k, n], 4)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)
