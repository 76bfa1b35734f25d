"""Build the small hand-made ONNX models in fixtures/ (run: ``make fixtures``).

Each model is small enough to commit and exercises one structure the strategies must handle:

- diamond.onnx            a diamond DAG (one tensor read by two branches that join again)
- unet.onnx               a U-Net-like encoder/decoder with long skip connections (Concat)
- transformer_block.onnx  a pre-LN transformer block: LayerNormalization, MatMul, Softmax attention, GELU MLP
                          (benchmarks build deeper/wider ones with ``transformer_block(layers=...)``)
- external/mlp.onnx       a 3-layer MLP whose weights live in external data (mlp.onnx.data)
- if_model.onnx           an ``If`` whose branches read outer-scope tensors
- symbolic.onnx           a model with a symbolic batch dim ("N") for ``--input-shape``

All weights are seeded, so the files are byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
ROOT = Path(__file__).resolve().parent.parent / "fixtures"


class Builder:
    """Collects nodes and seeded initializers; names every node."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.1) -> str:
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        self.count += 1
        out = output or f"t{self.count}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{op_type.lower()}_{self.count}", **attrs))
        return out

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxpart-fixtures")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def diamond() -> onnx.ModelProto:
    b = Builder(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    a = b.op("Conv", ["x", b.weight("w0", (16, 8, 3, 3)), b.weight("b0", (16,))], pads=[1, 1, 1, 1])
    left = b.op("Relu", [a])
    left = b.op("Conv", [left, b.weight("w1", (16, 16, 3, 3))], pads=[1, 1, 1, 1])
    right = b.op("Sigmoid", [a])
    right = b.op("Conv", [right, b.weight("w2", (16, 16, 1, 1))])
    joined = b.op("Add", [left, right])
    b.op("Conv", [joined, b.weight("w3", (4, 16, 1, 1))], output="y")
    return b.model("diamond", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])])


def unet() -> onnx.ModelProto:
    b = Builder(2)
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])

    def block(inp: str, cin: int, cout: int, tag: str) -> str:
        h = b.op("Conv", [inp, b.weight(f"{tag}_w1", (cout, cin, 3, 3)), b.weight(f"{tag}_b1", (cout,))], pads=[1, 1, 1, 1])
        h = b.op("Relu", [h])
        h = b.op("Conv", [h, b.weight(f"{tag}_w2", (cout, cout, 3, 3)), b.weight(f"{tag}_b2", (cout,))], pads=[1, 1, 1, 1])
        return b.op("Relu", [h])

    skips, h, channels = [], "image", 3
    for level, width in enumerate((4, 8, 16)):
        h = block(h, channels, width, f"down{level}")
        skips.append((h, width))
        h = b.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
        channels = width
    h = block(h, channels, 32, "bottom")
    channels = 32
    for level, (skip, width) in reversed(list(enumerate(skips))):
        h = b.op("ConvTranspose", [h, b.weight(f"up{level}_wt", (channels, width, 2, 2))], strides=[2, 2])
        h = b.op("Concat", [h, skip], axis=1)
        h = block(h, 2 * width, width, f"up{level}")
        channels = width
    b.op("Conv", [h, b.weight("head_w", (2, channels, 1, 1))], output="mask")
    return b.model("unet", [x], [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 2, 32, 32])])


def transformer_block(seq: int = 64, dim: int = 32, heads: int = 4, hidden: int = 128, layers: int = 1,
                      seed: int = 3) -> onnx.ModelProto:
    """``layers`` pre-LN transformer blocks (attention + GELU MLP, both residual) on [1, seq, dim] tokens."""
    b = Builder(seed)
    head_dim = dim // heads
    x = helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, seq, dim])
    split_shape = b.const("split_heads", np.array([1, seq, heads, head_dim], np.int64))
    merge_shape = b.const("merge_heads", np.array([1, seq, dim], np.int64))
    scale = b.const("scale", np.array(np.sqrt(head_dim), np.float32))
    sqrt2 = b.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    one = b.const("one", np.array(1.0, np.float32))
    half = b.const("half", np.array(0.5, np.float32))
    h = "tokens"
    for layer in range(layers):
        p = f"l{layer}_" if layers > 1 else ""
        ln1 = b.op("LayerNormalization", [h, b.const(f"{p}ln1_g", np.ones(dim, np.float32)),
                                          b.const(f"{p}ln1_b", np.zeros(dim, np.float32))], axis=-1)

        def project(name: str) -> str:
            t = b.op("MatMul", [ln1, b.weight(f"{p}w_{name}", (dim, dim))])
            t = b.op("Add", [t, b.weight(f"{p}b_{name}", (dim,))])
            t = b.op("Reshape", [t, split_shape])
            return b.op("Transpose", [t], perm=[0, 2, 1, 3] if name != "k" else [0, 2, 3, 1])

        q, k, v = project("q"), project("k"), project("v")
        scores = b.op("Div", [b.op("MatMul", [q, k]), scale])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merge_shape])
        attn = b.op("Add", [b.op("MatMul", [ctx, b.weight(f"{p}w_o", (dim, dim))]), b.weight(f"{p}b_o", (dim,))])
        h1 = b.op("Add", [h, attn])
        ln2 = b.op("LayerNormalization", [h1, b.const(f"{p}ln2_g", np.ones(dim, np.float32)),
                                          b.const(f"{p}ln2_b", np.zeros(dim, np.float32))], axis=-1)
        up = b.op("Add", [b.op("MatMul", [ln2, b.weight(f"{p}w_up", (dim, hidden))]), b.weight(f"{p}b_up", (hidden,))])
        # GELU as its parts (erf form): 0.5 * u * (1 + erf(u / sqrt(2)))
        erf1 = b.op("Add", [b.op("Erf", [b.op("Div", [up, sqrt2])]), one])
        gelu = b.op("Mul", [b.op("Mul", [up, erf1]), half])
        down = b.op("Add", [b.op("MatMul", [gelu, b.weight(f"{p}w_down", (hidden, dim))]), b.weight(f"{p}b_down", (dim,))])
        h = b.op("Add", [h1, down], output="hidden" if layer == layers - 1 else None)
    return b.model("transformer", [x], [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, seq, dim])])


def mlp_external() -> onnx.ModelProto:
    b = Builder(4)
    x = helper.make_tensor_value_info("features", TensorProto.FLOAT, [4, 32])
    h = "features"
    for layer, (cin, cout) in enumerate(((32, 64), (64, 64), (64, 10))):
        h = b.op("Gemm", [h, b.weight(f"fc{layer}_w", (cin, cout)), b.weight(f"fc{layer}_b", (cout,))],
                 output="logits" if layer == 2 else None)
        if layer < 2:
            h = b.op("Relu", [h])
    return b.model("mlp", [x], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 10])])


def if_model() -> onnx.ModelProto:
    b = Builder(5)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    h = b.op("MatMul", ["x", b.weight("w_in", (16, 16))])
    h = b.op("Relu", [h], output="h")
    then_out = helper.make_tensor_value_info("then_y", TensorProto.FLOAT, [2, 16])
    else_out = helper.make_tensor_value_info("else_y", TensorProto.FLOAT, [2, 16])
    then_graph = helper.make_graph([helper.make_node("Mul", ["h", "w_then"], ["then_y"], name="then_mul")],
                                   "then_branch", [], [then_out])
    else_graph = helper.make_graph([helper.make_node("Sigmoid", ["h"], ["else_y"], name="else_sigmoid")],
                                   "else_branch", [], [else_out])
    b.weight("w_then", (16,))
    b.nodes.append(helper.make_node("If", ["flag"], ["branch"], name="choose", then_branch=then_graph,
                                    else_branch=else_graph))
    b.op("MatMul", ["branch", b.weight("w_out", (16, 4))], output="y")
    return b.model("if_model", [x, flag], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])


def symbolic() -> onnx.ModelProto:
    b = Builder(6)
    x = helper.make_tensor_value_info("batch", TensorProto.FLOAT, ["N", 3, 16, 16])
    h = b.op("Conv", ["batch", b.weight("w", (8, 3, 3, 3))], pads=[1, 1, 1, 1])
    h = b.op("Relu", [h])
    b.op("GlobalAveragePool", [h], output="pooled")
    return b.model("symbolic", [x], [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["N", 8, 1, 1])])


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in (("diamond", diamond), ("unet", unet), ("transformer_block", transformer_block),
                        ("if_model", if_model), ("symbolic", symbolic)):
        path = out / f"{name}.onnx"
        onnx.save(build(), str(path))
        written.append(path)
    external = out / "external"
    external.mkdir(exist_ok=True)
    path = external / "mlp.onnx"
    (external / "mlp.onnx.data").unlink(missing_ok=True)  # onnx.save appends to an existing data file
    onnx.save(mlp_external(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="mlp.onnx.data", size_threshold=0)
    written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT)
    for path in write(parser.parse_args().out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
