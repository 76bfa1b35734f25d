"""Small ONNX models, built without torch, that copy what ``torch.onnx.export`` writes.

These are test helpers, not tests. Each builder returns an ``onnx.ModelProto`` (opset 17, IR 8, seeded
float32 weights from ``np.random.default_rng(0)``) that passes ``onnx.checker.check_model`` and runs in
onnxruntime. The patterns here are the ones that break ONNX shape inference, or that only become static
after ``--dim NAME=VALUE``:

* ``where_equal_expand``: legacy TorchScript ``expand(-1, ...)``. The shape of ``/Expand_output_0`` stays
  unknown after ``infer_shapes(data_prop=True)`` (rank 4, no dims).
* ``reshape_mod_slice``: ``Slice`` ends from ``Reshape(Mod(Constant, Constant))``. ``/Slice_output_0``
  stays unknown (rank 3, no dims).
* ``shape_gather_reshape``: the multi-head split through ``Shape -> Gather -> Unsqueeze -> Concat``, with
  dims ``batch`` and ``sequence``.
* ``kv_cache_decoder``: an optimum-style decoder step with a KV cache, with dims ``batch``, ``sequence``,
  ``past_sequence_length`` and ``total_sequence_length``.
* ``tied_lm_head``: a dynamo-style GPT-2 whose LM head weight is ``Transpose(wte.weight)``.
* ``typed_internal_tensors``: internal bool and int64 tensors whose shapes ONNX cannot infer.

``ALL_STATIC`` and ``ALL_DYNAMIC`` list ``(name, builder, dims)``, where ``dims`` are the ``--dim`` values
that make the model static. For ``kv_cache_decoder``, ``total_sequence_length`` must equal
``past_sequence_length + sequence``, or onnxruntime fails on the ``Concat``/``Add``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
               np.dtype(np.bool_): TensorProto.BOOL}


class _Graph:
    """Appends nodes with torch-like names (``/MatMul_3``, ``/MatMul_3_output_0``)."""

    def __init__(self, seed: int = 0):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._count = 0

    def op(self, op_type: str, inputs, out: str | None = None, **attrs) -> str:
        self._count += 1
        name = f"/{op_type}_{self._count}"
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def const(self, value, dtype=np.int64) -> str:
        """A ``Constant`` node, as the TorchScript exporter writes for every literal."""
        return self.op("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def weight(self, name: str, shape, scale: float | None = None) -> str:
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        array = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, producer_name="pytorch", producer_version="2.x")
        onnx.checker.check_model(model, full_check=False)
        return model


def _value(name: str, elem_type: int, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(dims))


def _where_equal_shape(g: _Graph, shape) -> str:
    """The legacy exporter's ``-1`` handling: ``Where(Equal(s, Mul(ConstantOfShape(len), -1)), 1, s)``."""
    shape_const = g.const(shape)
    ones = g.op("ConstantOfShape", [g.const([len(shape)])],
                value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
    minus_ones = g.op("Mul", [ones, g.const(-1)])
    is_minus_one = g.op("Equal", [shape_const, minus_ones])
    return g.op("Where", [is_minus_one, ones, shape_const])


def where_equal_expand(batch: int = 1, seq: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """The legacy TorchScript pattern for ``mask.expand(-1, 1, seq, seq)``, followed by one attention head.

    The Expand shape is ``Where(Equal(c, Mul(ConstantOfShape(4), -1)), ConstantOfShape(4), c)`` with
    ``c = [-1, 1, seq, seq]``, built from Constant nodes only. ONNX data propagation stops at
    Equal/Where, so::

        >>> m = onnx.shape_inference.infer_shapes(where_equal_expand(), data_prop=True)
        >>> # "/Expand_output_0": rank 4, every dim unknown (true shape [batch, 1, seq, seq])

    Inputs ``x`` float [batch, seq, hidden] and ``attention_mask`` float [batch, 1, 1, seq]; output ``y``
    float [batch, 1, seq, hidden].
    """
    g = _Graph()
    mask = g.op("Expand", ["attention_mask", _where_equal_shape(g, [-1, 1, seq, seq])], out="/Expand_output_0")
    axis1 = g.const([1])
    q = g.op("Unsqueeze", [g.op("MatMul", ["x", g.weight("q.weight", (hidden, hidden))]), axis1])
    k = g.op("Unsqueeze", [g.op("MatMul", ["x", g.weight("k.weight", (hidden, hidden))]), axis1])
    v = g.op("Unsqueeze", [g.op("MatMul", ["x", g.weight("v.weight", (hidden, hidden))]), axis1])
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    g.op("MatMul", [g.op("MatMul", [probs, v]), g.weight("o.weight", (hidden, hidden))], out="y")
    return g.model("where_equal_expand",
                   [_value("x", TensorProto.FLOAT, (batch, seq, hidden)),
                    _value("attention_mask", TensorProto.FLOAT, (batch, 1, 1, seq))],
                   [_value("y", TensorProto.FLOAT, (batch, 1, seq, hidden))])


def reshape_mod_slice(batch: int = 1, seq: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """The exporter's negative-index normalisation ``x[:, :-2]`` -> ``ends = Reshape(Mod(-2, seq), [1])``.

    Every input of the chain is a Constant node, but ONNX does not propagate data through ``Mod``, so::

        >>> m = onnx.shape_inference.infer_shapes(reshape_mod_slice(), data_prop=True)
        >>> # "/Slice_output_0": rank 3, every dim unknown (true shape [batch, seq - 2, hidden])

    Input ``x`` float [batch, seq, hidden]; output ``y`` float [batch, seq - 2, hidden].
    """
    g = _Graph()
    ends = g.op("Reshape", [g.op("Mod", [g.const(-2), g.const(seq)]), g.const([1])])
    sliced = g.op("Slice", ["x", g.const([0]), ends, g.const([1])], out="/Slice_output_0")
    h = g.op("Add", [g.op("MatMul", [sliced, g.weight("fc1.weight", (hidden, 2 * hidden))]),
                     g.weight("fc1.bias", (2 * hidden,), 0.1)])
    h = g.op("Relu", [h])
    g.op("MatMul", [h, g.weight("fc2.weight", (2 * hidden, hidden))], out="y")
    return g.model("reshape_mod_slice", [_value("x", TensorProto.FLOAT, (batch, seq, hidden))],
                   [_value("y", TensorProto.FLOAT, (batch, seq - 2, hidden))])


def _batch_seq(g: _Graph, ref: str) -> tuple[str, str]:
    """``Shape(ref) -> Gather(0) / Gather(1) -> Unsqueeze``: the [1]-shaped batch and sequence sizes."""
    shape = g.op("Shape", [ref])
    axis0 = g.const([0])
    batch = g.op("Unsqueeze", [g.op("Gather", [shape, g.const(0)], axis=0), axis0])
    seq = g.op("Unsqueeze", [g.op("Gather", [shape, g.const(1)], axis=0), axis0])
    return batch, seq


def _split_heads(g: _Graph, t: str, ref: str, heads: int, head_dim: int, perm=(0, 2, 1, 3)) -> str:
    """[b, s, hidden] -> Reshape to [b, s, heads, head_dim] (shape from ``Shape(ref)``) -> Transpose."""
    batch, seq = _batch_seq(g, ref)
    shape = g.op("Concat", [batch, seq, g.const([heads]), g.const([head_dim])], axis=0)
    return g.op("Transpose", [g.op("Reshape", [t, shape])], perm=list(perm))


def _merge_heads(g: _Graph, t: str, hidden: int) -> str:
    """[b, heads, s, head_dim] -> Transpose -> Reshape to [b, s, hidden] via another Shape chain."""
    t = g.op("Transpose", [t], perm=[0, 2, 1, 3])
    batch, seq = _batch_seq(g, t)
    return g.op("Reshape", [t, g.op("Concat", [batch, seq, g.const([hidden])], axis=0)])


def shape_gather_reshape(hidden: int = 16, heads: int = 2) -> onnx.ModelProto:
    """GPT-2 attention as TorchScript exports it with dynamic axes: every Reshape target is built from
    ``Shape -> Gather -> Unsqueeze -> Concat``.

    Input ``x`` float ["batch", "sequence", hidden]; output ``y`` float ["batch", "sequence", hidden].
    Static with ``--dim batch=1 --dim sequence=8``.
    """
    g = _Graph()
    head_dim = hidden // heads
    proj = {n: g.op("MatMul", ["x", g.weight(f"{n}.weight", (hidden, hidden))]) for n in "qkv"}
    q = _split_heads(g, proj["q"], "x", heads, head_dim)
    k = _split_heads(g, proj["k"], "x", heads, head_dim, perm=(0, 2, 3, 1))
    v = _split_heads(g, proj["v"], "x", heads, head_dim)
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.sqrt(head_dim), np.float32)])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    g.op("MatMul", [_merge_heads(g, context, hidden), g.weight("o.weight", (hidden, hidden))], out="y")
    dims = ("batch", "sequence", hidden)
    return g.model("shape_gather_reshape", [_value("x", TensorProto.FLOAT, dims)],
                   [_value("y", TensorProto.FLOAT, dims)])


def _additive_mask(g: _Graph) -> str:
    """HF ``_expand_mask``: int64 [b, T] -> float (1 - m) * finfo.min, expanded to [b, 1, s, T]."""
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const(1.0, np.float32), mask])
    additive = g.op("Mul", [inverted, g.const(np.finfo(np.float32).min, np.float32)])
    additive = g.op("Unsqueeze", [additive, g.const([1, 2])])
    batch, seq = _batch_seq(g, "input_ids")
    _, total = _batch_seq(g, "attention_mask")
    shape = g.op("Concat", [batch, g.const([1]), seq, total], axis=0)
    return g.op("Expand", [additive, shape])


def _decoder_layer(g: _Graph, i: int, h: str, mask: str, hidden: int, heads: int) -> str:
    """One pre-norm-free attention block with ``present = Concat(past, new, axis=2)``; returns h + attn."""
    head_dim = hidden // heads
    proj = {n: g.op("MatMul", [h, g.weight(f"layers.{i}.{n}.weight", (hidden, hidden))]) for n in "qkv"}
    q = _split_heads(g, proj["q"], h, heads, head_dim)
    present = {}
    for n, kind in (("k", "key"), ("v", "value")):
        new = _split_heads(g, proj[n], h, heads, head_dim)
        present[n] = g.op("Concat", [f"past_key_values.{i}.{kind}", new], out=f"present.{i}.{kind}", axis=2)
    scores = g.op("MatMul", [q, g.op("Transpose", [present["k"]], perm=[0, 1, 3, 2])])
    scores = g.op("Add", [g.op("Div", [scores, g.const(np.sqrt(head_dim), np.float32)]), mask])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), present["v"]])
    out = g.op("MatMul", [_merge_heads(g, context, hidden), g.weight(f"layers.{i}.o.weight", (hidden, hidden))])
    return g.op("Add", [h, out])


def kv_cache_decoder(hidden: int = 16, heads: int = 2, vocab: int = 50, layers: int = 2) -> onnx.ModelProto:
    """A Llama/GPT-2 decoder step with a KV cache, with the inputs and outputs optimum exports.

    Inputs are ``input_ids`` int64 ["batch", "sequence"], ``attention_mask`` int64
    ["batch", "total_sequence_length"], and, for each layer i, ``past_key_values.{i}.key`` / ``.value``
    float ["batch", heads, "past_sequence_length", hidden // heads]. Outputs are ``logits`` float
    ["batch", "sequence", vocab] and ``present.{i}.key`` / ``.value`` float
    ["batch", heads, "total_sequence_length", hidden // heads]. At run time total_sequence_length must
    equal past_sequence_length + sequence. past_sequence_length = 0 runs in onnxruntime. There is no
    causal mask, only the padding mask.
    """
    g = _Graph()
    head_dim = hidden // heads
    h = g.op("Gather", [g.weight("embed_tokens.weight", (vocab, hidden), 1.0), "input_ids"], axis=0)
    mask = _additive_mask(g)
    for i in range(layers):
        h = _decoder_layer(g, i, h, mask, hidden, heads)
    g.op("MatMul", [h, g.weight("lm_head.weight", (hidden, vocab))], out="logits")
    kv_in = ("batch", heads, "past_sequence_length", head_dim)
    kv_out = ("batch", heads, "total_sequence_length", head_dim)
    inputs = [_value("input_ids", TensorProto.INT64, ("batch", "sequence")),
              _value("attention_mask", TensorProto.INT64, ("batch", "total_sequence_length"))]
    outputs = [_value("logits", TensorProto.FLOAT, ("batch", "sequence", vocab))]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(_value(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv_in))
            outputs.append(_value(f"present.{i}.{kind}", TensorProto.FLOAT, kv_out))
    return g.model("kv_cache_decoder", inputs, outputs)


def tied_lm_head(vocab: int = 64, hidden: int = 32, layers: int = 3,
                 generator_position: str = "first") -> onnx.ModelProto:
    """GPT-2 exported by dynamo: the tied LM head weight is ``Transpose(wte.weight)`` computed at run time.

    The Transpose reads only an initializer (a "weight generator"). With ``generator_position="first"``
    it is node 0, as dynamo places it, and its output ``lm_head_weight`` [hidden, vocab] is read only by
    the last MatMul. With ``"last"`` it comes right before that MatMul. Input ``input_ids`` int64
    ["batch", "sequence"]; output ``logits`` float ["batch", "sequence", vocab].
    """
    if generator_position not in ("first", "last"):
        raise ValueError(f"generator_position must be 'first' or 'last', got {generator_position!r}")
    g = _Graph()
    wte = g.weight("wte.weight", (vocab, hidden), 1.0)
    head = g.op("Transpose", [wte], out="lm_head_weight", perm=[1, 0])
    generator = g.nodes.pop()
    if generator_position == "first":
        g.nodes.append(generator)
    h = g.op("Gather", [wte, "input_ids"], axis=0)
    for i in range(layers):
        h = g.op("MatMul", [h, g.weight(f"h.{i}.weight", (hidden, hidden))])
        h = g.op("Relu", [g.op("Add", [h, g.weight(f"h.{i}.bias", (hidden,), 0.1)])])
    if generator_position == "last":
        g.nodes.append(generator)
    g.op("MatMul", [h, head], out="logits")
    return g.model("tied_lm_head", [_value("input_ids", TensorProto.INT64, ("batch", "sequence"))],
                   [_value("logits", TensorProto.FLOAT, ("batch", "sequence", vocab))])


#: Internal tensors of ``typed_internal_tensors`` whose shapes ONNX cannot infer, with their dtypes and
#: their true shapes given as functions of (batch, seq).
TYPED_INTERNAL_HINTS = {
    "x_reshaped": (np.float32, lambda b, s: (b, s)),
    "is_positive": (np.bool_, lambda b, s: (b, s)),
    "leaky": (np.float32, lambda b, s: (b, s)),
    "argmax": (np.int64, lambda b, s: (b,)),
    "gathered": (np.float32, lambda b, s: (b, 4)),
}


def typed_internal_tensors(batch: int = 2, seq: int = 8) -> onnx.ModelProto:
    """Internal bool and int64 tensors with unknown shapes and no value_info in the model.

    ``x_reshaped = Reshape(x, Where(Equal(...)))`` uses the legacy ``-1`` chain of ``where_equal_expand``,
    so after ``infer_shapes(data_prop=True)`` it and everything computed from it has rank 2 (``argmax``:
    rank 1) and no known dims, but keeps its dtype: ``is_positive`` bool [batch, seq] =
    ``Greater(x_reshaped, 0)``, ``argmax`` int64 [batch] = ``ArgMax(leaky, axis=1)``. These are the
    tensors a test gives ``--input-shape`` hints for; ``TYPED_INTERNAL_HINTS`` lists all of them.
    Input ``x`` float [batch, seq]; output ``y`` float [batch, 4].
    """
    g = _Graph()
    x = g.op("Reshape", ["x", _where_equal_shape(g, [batch, seq])], out="x_reshaped")
    positive = g.op("Greater", [x, g.const(0.0, np.float32)], out="is_positive")
    leaky = g.op("Where", [positive, x, g.op("Mul", [x, g.const(0.1, np.float32)])], out="leaky")
    index = g.op("ArgMax", [leaky], out="argmax", axis=1, keepdims=0)
    gathered = g.op("Gather", [g.weight("table", (seq, 4), 1.0), index], out="gathered", axis=0)
    dense = g.op("MatMul", [leaky, g.weight("fc.weight", (seq, 4))])
    g.op("Add", [dense, gathered], out="y")
    return g.model("typed_internal_tensors", [_value("x", TensorProto.FLOAT, (batch, seq))],
                   [_value("y", TensorProto.FLOAT, (batch, 4))])


_TIED_LAST = functools.partial(tied_lm_head, generator_position="last")

#: (name, builder, dims): models whose inputs are all static; ``dims`` is empty.
ALL_STATIC = [
    ("where_equal_expand", where_equal_expand, {}),
    ("reshape_mod_slice", reshape_mod_slice, {}),
    ("typed_internal_tensors", typed_internal_tensors, {}),
]

#: (name, builder, dims): models with symbolic dims; ``--dim NAME=VALUE`` for each item of ``dims`` makes
#: them static. For kv_cache_decoder, total_sequence_length must equal past_sequence_length + sequence.
ALL_DYNAMIC = [
    ("shape_gather_reshape", shape_gather_reshape, {"batch": 1, "sequence": 8}),
    ("kv_cache_decoder", kv_cache_decoder,
     {"batch": 1, "sequence": 4, "past_sequence_length": 3, "total_sequence_length": 7}),
    ("tied_lm_head", tied_lm_head, {"batch": 1, "sequence": 8}),
    ("tied_lm_head_last", _TIED_LAST, {"batch": 1, "sequence": 8}),
]


def _gather_vocab(model: onnx.ModelProto, name: str) -> int | None:
    """Row count of the initializer that a Gather indexes with graph input ``name`` (an embedding)."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == name and node.input[0] in inits:
            return int(inits[node.input[0]].dims[0])
    return None


def random_feeds(model: onnx.ModelProto, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """onnxruntime feeds for every graph input, with symbolic dims taken from ``dims``.

    Inputs whose name contains "mask" are all ones. Other floats are standard normal. Other int64 inputs
    are ids in [0, vocab) when they index an embedding Gather, and zeros otherwise. Bools are random.
    A symbolic dim that is missing from ``dims`` raises KeyError.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tensor = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in tensor.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        vocab = _gather_vocab(model, vi.name)
        if "mask" in vi.name:
            feeds[vi.name] = np.ones(shape, dtype=dtype)
        elif dtype == np.float32:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif vocab is not None:
            feeds[vi.name] = rng.integers(0, vocab, size=shape).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds


def save_with_external_data(model: onnx.ModelProto, folder: str | os.PathLike, name: str,
                            size_threshold: int = 0) -> Path:
    """Save a copy of ``model`` as ``folder/name``, with every initializer of at least ``size_threshold``
    bytes in ``folder/name.data``. ``model`` itself is not changed. Returns the path of the .onnx file."""
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(clone, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=name + ".data", size_threshold=size_threshold)
    return path
