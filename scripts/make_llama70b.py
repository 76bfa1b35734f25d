"""Build a Llama-3-70B-shaped ONNX model, written the way torch's legacy (TorchScript) exporter writes
it, whose ~141 GB of weights live in a SPARSE ``model.onnx.data`` (no disk used, a few seconds).

Shape (the defaults; every one is an option, so tests build the same graph in small): 80 decoder layers,
hidden 8192, 64 attention heads sharing 8 KV heads (GQA, head dim 128), SwiGLU MLP 28672, vocabulary
128256, RMSNorm, rotary position embeddings, untied LM head, fp16 (or bf16) weights: 70.6 B parameters.

What makes it an export, not a block diagram (the patterns of ``tests/export_like.py``, imported from
there): dynamic axes ``batch`` and ``sequence`` on ``input_ids``, ``attention_mask`` and ``position_ids``,
so every ``view`` is a ``Shape → Gather → Unsqueeze → Concat → Reshape`` chain, GQA's ``repeat_kv`` an
``Unsqueeze → Expand → Reshape`` with shapes read from the tensor, and ``rotate_half`` a pair of
``Slice``s whose ends come from ``Shape → Gather → Div``; every literal a ``Constant`` node; nodes named
by module scope (``/model/layers.3/self_attn/Shape_2``); ``nn.Linear`` weights stored transposed as
``onnx::MatMul_<n>``; HF's casts to float32 around RMSNorm and the softmax; a padding + causal mask
(``Trilu``) built once. Plan it with ``--dim batch=1 --dim sequence=S``.

No weight is materialized: each initializer is an external-data reference (offsets aligned to 4 KiB,
``scripts/make_big_model.py``'s ``Builder``) into one data file that is ``truncate``d to its size, so it
reads as zeros. The model runs in onnxruntime at small shapes (``--layers 2 --hidden 64 …``).

    .venv/bin/python scripts/make_llama70b.py /tmp/llama70b                  # 80 layers, fp16, ~141 GB sparse
    .venv/bin/python scripts/make_llama70b.py /tmp/llama70b --dtype bfloat16 --check
    .venv/bin/python scripts/make_llama70b.py /tmp/tiny --layers 2 --hidden 64 --heads 4 --kv-heads 2 \\
        --mlp 128 --vocab 100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
from make_big_model import Builder  # noqa: E402
from tests.export_like import OPSET, _additive_mask, _batch_seq, _Graph, _merge_heads, _split_heads, _value  # noqa: E402

DTYPES = {"float16": (TensorProto.FLOAT16, 2, np.float16), "bfloat16": (TensorProto.BFLOAT16, 2, None)}
#: the --dim values that make the model static (the sequence is a prefill of 128 tokens)
DIMS = {"batch": 1, "sequence": 128}


@dataclass(frozen=True)
class Shape:
    """A Llama configuration (Llama-3-70B by default)."""

    layers: int = 80
    hidden: int = 8192
    heads: int = 64
    kv_heads: int = 8
    mlp: int = 28672
    vocab: int = 128256
    dtype: str = "float16"
    rope_theta: float = 500000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class ExportGraph(_Graph):
    """``tests/export_like._Graph`` with the legacy exporter's scoped node names and sparse external
    weights (``make_big_model.Builder``) instead of seeded in-memory arrays."""

    def __init__(self, shape: Shape, data_name: str):
        super().__init__()
        elem, nbytes, _ = DTYPES[shape.dtype]
        self.store = Builder(elem, nbytes, data_name)
        self.inits = self.store.inits
        self.scope = ""
        self.names: Counter[str] = Counter()
        self.linears = 0

    def op(self, op_type: str, inputs, out: str | None = None, **attrs) -> str:
        base = f"{self.scope}/{op_type}"
        count = self.names[base]
        self.names[base] += 1
        name = base if not count else f"{base}_{count}"
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def weight(self, name: str, shape, scale: float | None = None) -> str:
        return self.store.weight(name, list(shape))

    def linear(self, x: str, fan_in: int, fan_out: int) -> str:
        """``nn.Linear`` without bias: MatMul by the transposed weight ``onnx::MatMul_<n>`` [in, out]."""
        self.linears += 1
        return self.op("MatMul", [x, self.weight(f"onnx::MatMul_{self.linears}", (fan_in, fan_out))])


def literal(g: ExportGraph, value: float, s: Shape) -> str:
    """A scalar of the weights' type: a Constant (bf16, which numpy lacks: a float32 Constant, Cast)."""
    elem, _, np_type = DTYPES[s.dtype]
    return g.const(value, np_type) if np_type is not None else g.op("Cast", [g.const(value, np.float32)], to=elem)


def rms_norm(g: ExportGraph, x: str, weight: str, s: Shape) -> str:
    """HF LlamaRMSNorm: in float32, ``x * rsqrt(mean(x²) + eps)``, back to the weights' type, × weight."""
    x32 = g.op("Cast", [x], to=TensorProto.FLOAT)
    mean = g.op("ReduceMean", [g.op("Pow", [x32, g.const(2.0, np.float32)])], axes=[-1], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, g.const(s.eps, np.float32)])])
    normed = g.op("Mul", [x32, g.op("Div", [g.const(1.0, np.float32), root])])
    return g.op("Mul", [g.weight(weight, (s.hidden,)), g.op("Cast", [normed], to=DTYPES[s.dtype][0])])


def rotary_tables(g: ExportGraph, s: Shape) -> tuple[str, str]:
    """LlamaRotaryEmbedding once per model: ``cos``/``sin`` [b, 1, s, head_dim] of ``position_ids``."""
    inv_freq = 1.0 / s.rope_theta ** (np.arange(0, s.head_dim, 2, dtype=np.float32) / s.head_dim)
    g.scope = "/model/rotary_emb"
    positions = g.op("Unsqueeze", [g.op("Cast", ["position_ids"], to=TensorProto.FLOAT), g.const([1])])
    freqs = g.op("MatMul", [g.const(inv_freq.reshape(1, -1, 1), np.float32), positions])
    freqs = g.op("Transpose", [freqs], perm=[0, 2, 1])
    emb = g.op("Concat", [freqs, freqs], axis=-1)
    elem = DTYPES[s.dtype][0]
    cos = g.op("Unsqueeze", [g.op("Cast", [g.op("Cos", [emb])], to=elem), g.const([1])])
    sin = g.op("Unsqueeze", [g.op("Cast", [g.op("Sin", [emb])], to=elem), g.const([1])])
    return cos, sin


def causal_mask(g: ExportGraph) -> str:
    """The padding mask of ``attention_mask`` (export_like's HF ``_expand_mask``) plus the causal part:
    ``Trilu(upper, k=1)`` of a [s, s] float.min square shaped from ``input_ids``."""
    g.scope = "/model"
    padding = _additive_mask(g)
    _, seq = _batch_seq(g, "input_ids")
    square = g.op("ConstantOfShape", [g.op("Concat", [seq, seq], axis=0)],
                  value=helper.make_tensor("value", TensorProto.FLOAT, [1], [float(np.finfo(np.float32).min)]))
    return g.op("Add", [padding, g.op("Trilu", [square, g.const(1)], upper=1)])


def rotate_half(g: ExportGraph, x: str) -> str:
    """``cat(-x[..., d/2:], x[..., :d/2])`` with ``d/2`` read from the tensor's shape, as traced."""
    half = g.op("Div", [g.op("Gather", [g.op("Shape", [x]), g.const(3)], axis=0), g.const(2)])
    half = g.op("Unsqueeze", [half, g.const([0])])
    first = g.op("Slice", [x, g.const([0]), half, g.const([3])])
    second = g.op("Slice", [x, half, g.const([np.iinfo(np.int64).max]), g.const([3])])
    return g.op("Concat", [g.op("Neg", [second]), first], axis=-1)


def rope(g: ExportGraph, x: str, cos: str, sin: str) -> str:
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotate_half(g, x), sin])])


def repeat_kv(g: ExportGraph, x: str, s: Shape) -> str:
    """GQA's ``repeat_kv``: [b, kv, s, d] → Unsqueeze → Expand [b, kv, rep, s, d] → Reshape [b, heads, s, d],
    the batch and sequence read from ``x``'s shape."""
    shape = g.op("Shape", [x])
    batch = g.op("Unsqueeze", [g.op("Gather", [shape, g.const(0)], axis=0), g.const([0])])
    seq = g.op("Unsqueeze", [g.op("Gather", [shape, g.const(2)], axis=0), g.const([0])])
    rep = s.heads // s.kv_heads
    wide = g.op("Concat", [batch, g.const([s.kv_heads]), g.const([rep]), seq, g.const([s.head_dim])], axis=0)
    expanded = g.op("Expand", [g.op("Unsqueeze", [x, g.const([2])]), wide])
    return g.op("Reshape", [expanded, g.op("Concat", [batch, g.const([s.heads]), seq, g.const([s.head_dim])], axis=0)])


def attention(g: ExportGraph, x: str, i: int, mask: str, cos: str, sin: str, s: Shape) -> str:
    """LlamaAttention (eager): projections, heads, RoPE, GQA, float32 softmax, output projection."""
    g.scope = f"/model/layers.{i}/self_attn"
    kv = s.kv_heads * s.head_dim
    q = _split_heads(g, g.linear(x, s.hidden, s.hidden), x, s.heads, s.head_dim)
    k = _split_heads(g, g.linear(x, s.hidden, kv), x, s.kv_heads, s.head_dim)
    v = _split_heads(g, g.linear(x, s.hidden, kv), x, s.kv_heads, s.head_dim)
    q, k = rope(g, q, cos, sin), rope(g, k, cos, sin)
    k, v = repeat_kv(g, k, s), repeat_kv(g, v, s)
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.op("Div", [scores, literal(g, np.sqrt(s.head_dim), s)])
    scores = g.op("Add", [g.op("Cast", [scores], to=TensorProto.FLOAT), mask])
    probs = g.op("Cast", [g.op("Softmax", [scores], axis=-1)], to=DTYPES[s.dtype][0])
    context = _merge_heads(g, g.op("MatMul", [probs, v]), s.hidden)
    return g.linear(context, s.hidden, s.hidden)


def mlp(g: ExportGraph, x: str, i: int, s: Shape) -> str:
    """LlamaMLP: ``down(silu(gate(x)) * up(x))``, SiLU as ``x · Sigmoid(x)``."""
    g.scope = f"/model/layers.{i}/mlp"
    gate = g.linear(x, s.hidden, s.mlp)
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
    return g.linear(g.op("Mul", [silu, g.linear(x, s.hidden, s.mlp)]), s.mlp, s.hidden)


def decoder_layer(g: ExportGraph, h: str, i: int, mask: str, cos: str, sin: str, s: Shape) -> str:
    g.scope = f"/model/layers.{i}/input_layernorm"
    normed = rms_norm(g, h, f"model.layers.{i}.input_layernorm.weight", s)
    h = g.op("Add", [h, attention(g, normed, i, mask, cos, sin, s)])
    g.scope = f"/model/layers.{i}/post_attention_layernorm"
    normed = rms_norm(g, h, f"model.layers.{i}.post_attention_layernorm.weight", s)
    out = mlp(g, normed, i, s)
    g.scope = f"/model/layers.{i}"
    return g.op("Add", [h, out])


def graph_of(s: Shape) -> ExportGraph:
    """Every node and (sparse) initializer of the model; ``g.store.offset`` is the data file's size."""
    g = ExportGraph(s, "model.onnx.data")
    g.scope = "/model/embed_tokens"
    h = g.op("Gather", [g.weight("model.embed_tokens.weight", (s.vocab, s.hidden)), "input_ids"], axis=0)
    mask = causal_mask(g)
    cos, sin = rotary_tables(g, s)
    for i in range(s.layers):
        h = decoder_layer(g, h, i, mask, cos, sin, s)
    g.scope = "/model/norm"
    h = rms_norm(g, h, "model.norm.weight", s)
    g.scope = "/lm_head"
    g.op("MatMul", [h, g.weight(f"onnx::MatMul_{g.linears + 1}", (s.hidden, s.vocab))], out="logits")
    return g


def build(out_dir: str | os.PathLike, shape: Shape = Shape()) -> dict:
    """Write ``out_dir/model.onnx`` and a sparse ``model.onnx.data``; -> what was built."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    g = graph_of(shape)
    elem = DTYPES[shape.dtype][0]
    dims = ("batch", "sequence")
    inputs = [_value(name, TensorProto.INT64, dims) for name in ("input_ids", "attention_mask", "position_ids")]
    graph = helper.make_graph(g.nodes, "llama70b_like", inputs, [_value("logits", elem, (*dims, shape.vocab))],
                              g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                              producer_name="pytorch", producer_version="2.x")
    path = out / "model.onnx"
    onnx.save_model(model, str(path))  # the graph only: no tensor holds data
    with open(out / "model.onnx.data", "wb") as f:
        f.truncate(g.store.offset)  # sparse: reads as zeros, allocates nothing
    params = sum(int(np.prod(t.dims)) for t in g.inits)
    return {"path": str(path), **asdict(shape), "nodes": len(g.nodes), "initializers": len(g.inits),
            "parameters": params, "data_bytes": g.store.offset, "largest_tensor_bytes": g.store.largest,
            "proto_bytes": path.stat().st_size, "dims": dict(DIMS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    defaults = Shape()
    for name in ("layers", "hidden", "heads", "kv_heads", "mlp", "vocab"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=defaults.dtype)
    ap.add_argument("--check", action="store_true", help="run onnx.checker.check_model on the path (full check)")
    args = ap.parse_args()
    shape = Shape(args.layers, args.hidden, args.heads, args.kv_heads, args.mlp, args.vocab, args.dtype)
    start = time.perf_counter()
    info = build(args.out_dir, shape)
    if args.check:
        onnx.checker.check_model(info["path"], full_check=True)
    print(f"built in {time.perf_counter() - start:.1f} s: {info['nodes']} nodes, {info['parameters'] / 1e9:.2f} B "
          f"parameters, {info['data_bytes'] / 1e9:.1f} GB sparse data; plan with "
          + " ".join(f"--dim {k}={v}" for k, v in DIMS.items()))
    print(info)


if __name__ == "__main__":
    main()
