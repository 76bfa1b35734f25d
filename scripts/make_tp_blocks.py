"""Transformer blocks shaped like the models tensor parallelism is tuned on, as ONNX files: GPT-2 (pre-LN,
biased projections, multi-head attention split by Reshape/Transpose, erf-GELU MLP, as the legacy exporter
writes them) and Llama (RMSNorm as Pow/ReduceMean/Add/Sqrt/Div/Mul, no biases, SwiGLU MLP).

Weights are either sparse zero external data (:class:`make_big_model.Builder`: any size, nothing read or
written but the protobuf — for planning and benchmarks) or small random initializers (``random=True``:
runnable, for ``--verify``). Names follow one scheme, ``l{i}.attn.{q,k,v,o}.{w,b}`` and
``l{i}.mlp.{up,gate,down}.{w,b}``, which the Megatron-LM layout of the tests reads
(:mod:`tests.tile.onnx.megatron`).

    .venv/bin/python scripts/make_tp_blocks.py /tmp/gpt2m --kind gpt2 --hidden 1024 --heads 16 --seq 1024
    .venv/bin/python scripts/make_tp_blocks.py /tmp/llama --kind llama --hidden 4096 --heads 32 --ffn 11008 --seq 2048

``SHAPES`` holds the two benchmark shapes (GPT-2 medium and Llama 7B, one block each).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_big_model  # noqa: E402

#: name -> (kind, hidden, heads, ffn, seq): one block of GPT-2 medium and of Llama 7B
SHAPES = {"gpt2-medium": ("gpt2", 1024, 16, 4096, 1024), "llama-7b": ("llama", 4096, 32, 11008, 2048)}
NUMPY = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


@dataclass
class BlockBuilder(make_big_model.Builder):
    """make_big_model's sparse builder; with ``rng`` the weights are small random initializers instead."""

    rng: np.random.Generator | None = None
    constants: list = field(default_factory=list)

    def weight(self, name: str, dims: list[int]) -> str:
        if self.rng is None:
            return super().weight(name, dims)
        value = (self.rng.standard_normal(dims) / np.sqrt(dims[0])).astype(NUMPY[self.elem])
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, name: str, value) -> str:
        """A small constant stored in the model (shapes, axes, scales), once per name (every layer reads
        the same one)."""
        array = np.asarray(value, dtype=np.int64 if np.asarray(value).dtype.kind == "i" else NUMPY[self.elem])
        stored = next((c for c in self.constants if c.name == name), None)
        if stored is None:
            self.constants.append(numpy_helper.from_array(array, name))
        elif not np.array_equal(numpy_helper.to_array(stored), array):
            raise ValueError(f"constant {name!r} given two values")
        return name


def linear(b: BlockBuilder, x: str, p: str, n_in: int, n_out: int, bias: bool) -> str:
    y = b.node("MatMul", [x, b.weight(f"{p}.w", [n_in, n_out])], f"{p}.mm")
    return b.node("Add", [y, b.weight(f"{p}.b", [n_out])], f"{p}.out") if bias else y


def norm(b: BlockBuilder, x: str, p: str, h: int, kind: str) -> str:
    if kind == "gpt2":
        return b.node("LayerNormalization", [x, b.weight(f"{p}.g", [h]), b.weight(f"{p}.b", [h])], f"{p}.out",
                      axis=-1)
    square = b.node("Pow", [x, b.const("two", 2.0)], f"{p}.sq")
    mean = b.node("ReduceMean", [square, b.const("last", [-1])], f"{p}.mean", keepdims=1)
    rms = b.node("Sqrt", [b.node("Add", [mean, b.const("eps", 1e-6)], f"{p}.eps")], f"{p}.rms")
    return b.node("Mul", [b.node("Div", [x, rms], f"{p}.unit"), b.weight(f"{p}.g", [h])], f"{p}.out")


def attention(b: BlockBuilder, x: str, p: str, batch: int, seq: int, h: int, heads: int, bias: bool) -> str:
    split = b.const("split_heads", [batch, seq, heads, h // heads])
    perms = {"q": [0, 2, 1, 3], "k": [0, 2, 3, 1], "v": [0, 2, 1, 3]}
    qkv = {n: b.node("Transpose", [b.node("Reshape", [linear(b, x, f"{p}.{n}", h, h, bias), split], f"{p}.{n}.heads")],
                     f"{p}.{n}.t", perm=perm) for n, perm in perms.items()}
    scores = b.node("Div", [b.node("MatMul", [qkv["q"], qkv["k"]], f"{p}.qk"), b.const("scale", np.sqrt(h // heads))],
                    f"{p}.scaled")
    probs = b.node("Softmax", [scores], f"{p}.probs", axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, qkv["v"]], f"{p}.ctx")], f"{p}.ctx.t", perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [ctx, b.const("merge_heads", [batch, seq, h])], f"{p}.merged")
    return linear(b, merged, f"{p}.o", h, h, bias)


def mlp(b: BlockBuilder, x: str, p: str, h: int, ffn: int, kind: str) -> str:
    if kind == "gpt2":  # erf-GELU as the legacy exporter writes it: x * 0.5 * (1 + erf(x / sqrt(2)))
        up = linear(b, x, f"{p}.up", h, ffn, True)
        erf = b.node("Erf", [b.node("Div", [up, b.const("sqrt2", np.sqrt(2.0))], f"{p}.scaled")], f"{p}.erf")
        half = b.node("Mul", [b.node("Mul", [up, b.node("Add", [erf, b.const("one", 1.0)], f"{p}.erf1")], f"{p}.gelu2"),
                              b.const("half", 0.5)], f"{p}.act")
        return linear(b, half, f"{p}.down", ffn, h, True)
    gate = linear(b, x, f"{p}.gate", h, ffn, False)
    silu = b.node("Mul", [gate, b.node("Sigmoid", [gate], f"{p}.sig")], f"{p}.silu")
    act = b.node("Mul", [silu, linear(b, x, f"{p}.up", h, ffn, False)], f"{p}.act")
    return linear(b, act, f"{p}.down", ffn, h, False)


def build(path: str | Path, kind: str = "gpt2", hidden: int = 1024, heads: int = 16, ffn: int | None = None,
          seq: int = 1024, batch: int = 1, layers: int = 1, dtype: str = "float16", random: bool = False) -> Path:
    """Write ``layers`` pre-norm blocks (module docstring) on input ``x`` [batch, seq, hidden] to ``path``
    (sparse weights in ``path``'s folder as ``<name>.data``, or random inline ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    elem, nbytes = make_big_model.DTYPES[dtype]
    b = BlockBuilder(elem, nbytes, path.name + ".data", rng=np.random.default_rng(0) if random else None)
    ffn, bias, x = ffn or 4 * hidden, kind == "gpt2", "x"
    for i in range(layers):
        h1 = b.node("Add", [x, attention(b, norm(b, x, f"l{i}.ln1", hidden, kind), f"l{i}.attn", batch, seq, hidden,
                                         heads, bias)], f"l{i}.res1")
        x = b.node("Add", [h1, mlp(b, norm(b, h1, f"l{i}.ln2", hidden, kind), f"l{i}.mlp", hidden, ffn, kind)],
                   f"l{i}.res2")
    value = [helper.make_tensor_value_info(name, elem, [batch, seq, hidden]) for name in ("x", x)]
    graph = helper.make_graph(b.nodes, f"{kind}_block", value[:1], value[1:], initializer=b.inits + b.constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="make_tp_blocks")
    model.ir_version = 8
    onnx.save_model(model, str(path))
    if not random:
        with open(path.parent / (path.name + ".data"), "wb") as f:
            f.truncate(b.offset)  # sparse: reads as zeros, allocates nothing
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--kind", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=None, help="MLP width (default 4 x hidden)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--dtype", choices=sorted(make_big_model.DTYPES), default="float16")
    ap.add_argument("--random", action="store_true", help="random inline weights (small models, for --verify)")
    args = ap.parse_args()
    print(build(args.path if args.path.endswith(".onnx") else Path(args.path) / "model.onnx", args.kind, args.hidden,
                args.heads, args.ffn, args.seq, args.batch, args.layers, args.dtype, args.random))


if __name__ == "__main__":
    main()
