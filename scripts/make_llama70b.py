"""Build a Llama-shaped ONNX model (Llama-3-70B by default), written the way torch's legacy (TorchScript)
exporter writes it, whose weights (~141 GB at 70B) live in a SPARSE ``model.onnx.data`` (no disk used, a
few seconds), as a prefill (the whole prompt) or as one decode step with a KV cache (``--decode PAST``).

Shape (the defaults; every one is an option, so tests build the same graph in small): 80 decoder layers,
hidden 8192, 64 attention heads sharing 8 KV heads (GQA, head dim 128), SwiGLU MLP 28672, vocabulary
128256, RMSNorm, rotary position embeddings, untied LM head, fp16 (or bf16) weights: 70.6 B parameters.
``--preset NAME`` (``PRESETS``) starts from another model's sizes: ``llama-7b`` (32 layers, 4096, 32 heads,
no GQA, MLP 11008, vocabulary 32000), ``llama-13b`` (40, 5120, 40 heads, MLP 13824, 32000), ``llama-70b``
(the defaults) and ``gpt2-medium`` (24 layers, 1024, 16 heads, MLP 4096, vocabulary 50257). The GPT-2 one is
a Llama-shaped block at GPT-2-medium's sizes (RMSNorm, RoPE, a SwiGLU MLP of three matrices, no biases), not
GPT-2's LayerNorm + GELU + learned positions: its matrix shapes, FLOPs and activations per layer are
GPT-2's except the MLP's third matrix. ``--layers``/``--hidden``/... override single fields of a preset.

What makes it an export, not a block diagram (the patterns of ``tests/export_like.py``, imported from
there): dynamic axes ``batch`` and ``sequence`` on ``input_ids``, ``attention_mask`` and ``position_ids``,
so every ``view`` is a ``Shape → Gather → Unsqueeze → Concat → Reshape`` chain, GQA's ``repeat_kv`` an
``Unsqueeze → Expand → Reshape`` with shapes read from the tensor, and ``rotate_half`` a pair of
``Slice``s whose ends come from ``Shape → Gather → Div``; every literal a ``Constant`` node; nodes named
by module scope (``/model/layers.3/self_attn/Shape_2``); ``nn.Linear`` weights stored transposed as
``onnx::MatMul_<n>``; HF's casts to float32 around RMSNorm and the softmax; a padding + causal mask
(``Trilu``) built once. Plan a prefill with ``--dim batch=1 --dim sequence=S`` (``static_dims``).

Decode (``build(..., decode=True)``, ``--decode PAST``): the optimum-style step. Inputs ``input_ids`` and
``position_ids`` [batch, sequence] (sequence is 1 for one token; more is a chunk), ``attention_mask`` [batch,
total_sequence] and, per layer i, ``past_key_values.{i}.key``/``.value`` [batch, kv_heads, past_sequence,
head_dim] in the weights' type; outputs ``logits`` [batch, sequence, vocab] and ``present.{i}.key``/``.value``
[batch, kv_heads, total_sequence, head_dim], each the ``Concat`` (axis 2) of the past and the new (post-RoPE)
K/V, which attention then reads. The causal part of the mask is ``Trilu(upper, k = total - sequence + 1)`` of
a [sequence, total] float.min block. total_sequence must be past_sequence + sequence: plan with
``static_dims(shape, 1, PAST)`` = ``--dim batch=1 --dim sequence=1 --dim past_sequence=PAST --dim
total_sequence=PAST+1``.

No weight is materialized: each initializer is an external-data reference (offsets aligned to 4 KiB,
``scripts/make_big_model.py``'s ``Builder``) into one data file that is ``truncate``d to its size, so it
reads as zeros. The model runs in onnxruntime at small shapes (``--layers 2 --hidden 64 …``); ``--check``
runs ``onnx.checker`` and, when the weights are under 1 GiB and fp16, onnxruntime on random inputs.

    .venv/bin/python scripts/make_llama70b.py /tmp/llama70b                  # 80 layers, fp16, ~141 GB sparse
    .venv/bin/python scripts/make_llama70b.py /tmp/llama70b --dtype bfloat16 --check
    .venv/bin/python scripts/make_llama70b.py /tmp/gpt2m_dec --preset gpt2-medium --decode 2048
    .venv/bin/python scripts/make_llama70b.py /tmp/tiny --layers 2 --hidden 64 --heads 4 --kv-heads 2 \\
        --mlp 128 --vocab 100 --decode 8 --check
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
from make_big_model import Builder  # noqa: E402
from tests.export_like import OPSET, _additive_mask, _batch_seq, _Graph, _merge_heads, _split_heads, _value  # noqa: E402

DTYPES = {"float16": (TensorProto.FLOAT16, 2, np.float16), "bfloat16": (TensorProto.BFLOAT16, 2, None)}
#: the --dim values that make the prefill model static (the sequence is a prefill of 128 tokens)
DIMS = {"batch": 1, "sequence": 128}
#: the past length ``build(..., decode=True)`` reports in its ``dims`` (one token after a 2048-token cache)
DECODE_PAST = 2048
#: the KV cache inputs' and outputs' symbolic sequence dims (total = past + sequence)
PAST, TOTAL = "past_sequence", "total_sequence"


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


#: named configurations for ``--preset`` (fp16). gpt2-medium is a Llama-shaped block at GPT-2-medium's sizes
#: (see the module's docstring); llama-7b/13b are Llama-2's (no GQA), llama-70b Llama-3's (``Shape()``).
PRESETS: dict[str, Shape] = {
    "gpt2-medium": Shape(layers=24, hidden=1024, heads=16, kv_heads=16, mlp=4096, vocab=50257, rope_theta=10000.0),
    "llama-7b": Shape(layers=32, hidden=4096, heads=32, kv_heads=32, mlp=11008, vocab=32000, rope_theta=10000.0),
    "llama-13b": Shape(layers=40, hidden=5120, heads=40, kv_heads=40, mlp=13824, vocab=32000, rope_theta=10000.0),
    "llama-70b": Shape(),
}


def static_dims(shape_or_preset: Shape | str = "llama-70b", sequence: int = DIMS["sequence"],
                decode_past: int | None = None, batch: int = 1) -> dict[str, int]:
    """The ``--dim`` values that make a model of this script static: a prefill of ``sequence`` tokens
    (``decode_past`` None: ``batch``, ``sequence``), or a decode step of ``sequence`` tokens (usually 1) after
    ``decode_past`` cached ones (``batch``, ``sequence``, ``past_sequence`` and ``total_sequence`` = their sum).
    The dims do not depend on the shape; a preset name is checked against ``PRESETS``."""
    if isinstance(shape_or_preset, str) and shape_or_preset not in PRESETS:
        raise KeyError(f"unknown preset {shape_or_preset!r}; known: {', '.join(PRESETS)}")
    dims = {"batch": batch, "sequence": sequence}
    if decode_past is not None:
        dims.update({PAST: decode_past, TOTAL: decode_past + sequence})
    return dims


class ExportGraph(_Graph):
    """``tests/export_like._Graph`` with the legacy exporter's scoped node names and sparse external
    weights (``make_big_model.Builder``) instead of seeded in-memory arrays; ``decode`` builds a KV-cache step."""

    def __init__(self, shape: Shape, data_name: str, decode: bool = False):
        super().__init__()
        self.decode = decode  # a decode step: attention reads ``Concat(past, new)`` K/V
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
    """The padding mask of ``attention_mask`` (export_like's HF ``_expand_mask``, [b, 1, s, T]) plus the
    causal part: ``Trilu(upper, k)`` of a float.min block shaped from the inputs. Prefill: an [s, s] square,
    k = 1. Decode: an [s, T] block (T = ``attention_mask``'s width, past + s), k = T - s + 1, so query i
    (position past + i) sees keys 0..past + i; at s = 1 nothing is masked."""
    g.scope = "/model"
    padding = _additive_mask(g)
    _, seq = _batch_seq(g, "input_ids")
    if g.decode:
        _, total = _batch_seq(g, "attention_mask")
        width = g.op("Gather", [g.op("Shape", ["attention_mask"]), g.const(1)], axis=0)
        queries = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(1)], axis=0)
        k = g.op("Add", [g.op("Sub", [width, queries]), g.const(1)])
    else:
        total, k = seq, g.const(1)
    block = g.op("ConstantOfShape", [g.op("Concat", [seq, total], axis=0)],
                 value=helper.make_tensor("value", TensorProto.FLOAT, [1], [float(np.finfo(np.float32).min)]))
    return g.op("Add", [padding, g.op("Trilu", [block, k], upper=1)])


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
    """LlamaAttention (eager): projections, heads, RoPE, (decode: the KV cache's ``present.{i}.key``/``.value``
    = ``Concat(past, new, axis=2)``), GQA, float32 softmax, output projection."""
    g.scope = f"/model/layers.{i}/self_attn"
    kv = s.kv_heads * s.head_dim
    q = _split_heads(g, g.linear(x, s.hidden, s.hidden), x, s.heads, s.head_dim)
    k = _split_heads(g, g.linear(x, s.hidden, kv), x, s.kv_heads, s.head_dim)
    v = _split_heads(g, g.linear(x, s.hidden, kv), x, s.kv_heads, s.head_dim)
    q, k = rope(g, q, cos, sin), rope(g, k, cos, sin)
    if g.decode:  # HF's DynamicCache.update: the cache keeps post-RoPE keys; attention reads past + new
        k = g.op("Concat", [f"past_key_values.{i}.key", k], out=f"present.{i}.key", axis=2)
        v = g.op("Concat", [f"past_key_values.{i}.value", v], out=f"present.{i}.value", axis=2)
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


def graph_of(s: Shape, decode: bool = False) -> ExportGraph:
    """Every node and (sparse) initializer of the model (``decode``: a KV-cache step); ``g.store.offset`` is
    the data file's size."""
    g = ExportGraph(s, "model.onnx.data", decode)
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


def io_values(s: Shape, decode: bool = False) -> tuple[list, list]:
    """The graph's inputs and outputs: prefill ``input_ids``, ``attention_mask``, ``position_ids`` [batch,
    sequence] -> ``logits``; decode adds ``past_key_values.{i}.key``/``.value`` and ``present.{i}.*``, and its
    ``attention_mask`` is [batch, total_sequence]."""
    elem = DTYPES[s.dtype][0]
    dims = ("batch", "sequence")
    mask = ("batch", TOTAL) if decode else dims
    inputs = [_value("input_ids", TensorProto.INT64, dims), _value("attention_mask", TensorProto.INT64, mask),
              _value("position_ids", TensorProto.INT64, dims)]
    outputs = [_value("logits", elem, (*dims, s.vocab))]
    for i in range(s.layers if decode else 0):
        for kind in ("key", "value"):
            inputs.append(_value(f"past_key_values.{i}.{kind}", elem, ("batch", s.kv_heads, PAST, s.head_dim)))
            outputs.append(_value(f"present.{i}.{kind}", elem, ("batch", s.kv_heads, TOTAL, s.head_dim)))
    return inputs, outputs


def build(out_dir: str | os.PathLike, shape: Shape = Shape(), decode: bool = False) -> dict:
    """Write ``out_dir/model.onnx`` and a sparse ``model.onnx.data``; -> what was built. ``decode``: one
    KV-cache step (see the module's docstring), whose ``dims`` are ``static_dims(shape, 1, DECODE_PAST)``;
    a prefill's are ``DIMS``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    g = graph_of(shape, decode)
    inputs, outputs = io_values(shape, decode)
    graph = helper.make_graph(g.nodes, "llama_decode_like" if decode else "llama70b_like", inputs, outputs,
                              g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                              producer_name="pytorch", producer_version="2.x")
    path = out / "model.onnx"
    onnx.save_model(model, str(path))  # the graph only: no tensor holds data
    with open(out / "model.onnx.data", "wb") as f:
        f.truncate(g.store.offset)  # sparse: reads as zeros, allocates nothing
    params = sum(int(np.prod(t.dims)) for t in g.inits)
    dims = static_dims(shape, 1, DECODE_PAST) if decode else dict(DIMS)
    return {"path": str(path), **asdict(shape), "decode": decode, "nodes": len(g.nodes),
            "initializers": len(g.inits), "parameters": params, "data_bytes": g.store.offset,
            "largest_tensor_bytes": g.store.largest, "proto_bytes": path.stat().st_size, "dims": dims}


def random_feeds(model_path: str, s: Shape, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """onnxruntime feeds at ``dims`` (``static_dims``): token ids below the vocabulary, a mask of ones,
    positions continuing after the past, standard-normal past K/V in the weights' type (fp16 only)."""
    rng = np.random.default_rng(seed)
    batch, seq, past = dims["batch"], dims["sequence"], dims.get(PAST, 0)
    feeds = {"input_ids": rng.integers(0, s.vocab, (batch, seq), dtype=np.int64),
             "attention_mask": np.ones((batch, past + seq), np.int64),
             "position_ids": np.broadcast_to(np.arange(past, past + seq, dtype=np.int64), (batch, seq)).copy()}
    for vi in onnx.load(model_path, load_external_data=False).graph.input:
        if vi.name.startswith("past_key_values."):
            cache = rng.standard_normal((batch, s.kv_heads, past, s.head_dim))
            feeds[vi.name] = cache.astype(DTYPES[s.dtype][2])
    return feeds


def check(info: dict, s: Shape, max_run_bytes: int = 1 << 30) -> str:
    """``onnx.checker`` (full) on the path; then, for fp16 weights under ``max_run_bytes``, onnxruntime on
    random inputs (prefill: sequence 5; decode: sequence 1 and 3 after 8 cached), checking every output's
    shape and that each ``present`` starts with its ``past``. -> what ran."""
    onnx.checker.check_model(info["path"], full_check=True)
    if info["data_bytes"] > max_run_bytes or DTYPES[s.dtype][2] is None:
        return "onnx.checker passed; onnxruntime skipped (weights too big, or bf16)"
    import onnxruntime as ort

    session = ort.InferenceSession(info["path"], providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    runs = [static_dims(s, q, 8) for q in (1, 3)] if info["decode"] else [static_dims(s, 5, batch=2)]
    for dims in runs:
        feeds = random_feeds(info["path"], s, dims)
        results = dict(zip(names, session.run(None, feeds)))
        assert results["logits"].shape == (dims["batch"], dims["sequence"], s.vocab), results["logits"].shape
        for name, value in results.items():
            if name.startswith("present."):
                past = feeds[name.replace("present.", "past_key_values.")]
                assert value.shape == (dims["batch"], s.kv_heads, dims[TOTAL], s.head_dim), (name, value.shape)
                assert np.array_equal(value[:, :, :dims[PAST]], past), name
    return f"onnx.checker passed; onnxruntime ran at {runs}"


def parse_args(argv=None) -> tuple[argparse.Namespace, Shape]:
    """The command line; -> (arguments, the preset's ``Shape`` with the explicit options replacing fields)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="llama-70b",
                    help="start from this model's sizes (default llama-70b); the options below replace fields")
    for name in ("layers", "hidden", "heads", "kv_heads", "mlp", "vocab"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None)
    ap.add_argument("--decode", type=int, default=None, metavar="PAST",
                    help="build one decode step with a KV cache; PAST is the past length the --dim line uses")
    ap.add_argument("--sequence", type=int, default=None,
                    help=f"the sequence the printed --dim line uses (default {DIMS['sequence']}; 1 with --decode)")
    ap.add_argument("--check", action="store_true",
                    help="onnx.checker.check_model (full check) and, at small fp16 sizes, an onnxruntime run")
    args = ap.parse_args(argv)
    fields = {k: v for k, v in vars(args).items() if k in Shape.__dataclass_fields__ and v is not None}
    shape = replace(PRESETS[args.preset], **fields)
    if shape.hidden % shape.heads or shape.heads % shape.kv_heads:
        ap.error(f"hidden {shape.hidden} must divide by heads {shape.heads}, and heads by kv-heads {shape.kv_heads}")
    return args, shape


def main(argv=None) -> None:
    args, shape = parse_args(argv)
    decode = args.decode is not None
    dims = static_dims(shape, args.sequence or (1 if decode else DIMS["sequence"]), args.decode)
    start = time.perf_counter()
    info = build(args.out_dir, shape, decode)
    info["dims"] = dims
    built = time.perf_counter() - start
    if args.check:
        print(check(info, shape))
    print(f"built in {built:.1f} s: {info['nodes']} nodes, {info['parameters'] / 1e9:.2f} B parameters, "
          f"{info['data_bytes'] / 1e9:.1f} GB sparse data; plan with "
          + " ".join(f"--dim {k}={v}" for k, v in dims.items()))
    print(info)


if __name__ == "__main__":
    main()
