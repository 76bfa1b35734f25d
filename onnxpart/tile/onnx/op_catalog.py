"""Which algorithms an ONNX node offers: the per-op-type dispatch from a node (op type, attributes, input
and output shapes, small constant inputs) to the 1-D catalog's families — :mod:`onnxpart.tile.onnx.catalog`
(MatMul, Gemm, elementwise, Transpose, normalizations), :mod:`~onnxpart.tile.onnx.catalog_conv`,
:mod:`~onnxpart.tile.onnx.catalog_shape` and :mod:`~onnxpart.tile.onnx.catalog_reduce`.
:mod:`onnxpart.tile.onnx.build` composes these per mesh axis into an op's choices; a node this module returns
None for runs replicated only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from onnxpart.tile.onnx.catalog import (Algorithm, einsum_algorithms, elementwise_algorithms, gemm_algorithms,
                                   matmul_algorithms, normalization_algorithms, transpose_algorithms,
                                   with_replicated_rest)
from onnxpart.tile.onnx.catalog_conv import POOLS, batchnorm_algorithms, conv_algorithms, pool_algorithms
from onnxpart.tile.onnx.catalog_reduce import REDUCTIONS, reduce_algorithms, reduced_axes
from onnxpart.tile.onnx.catalog_shape import (RESHAPES, expand_algorithms, fill_algorithms, gather_algorithms,
                                         gather_elements_algorithms, gather_nd_algorithms, metadata_algorithms,
                                         pad_touched, reshape_algorithms, resized_dims, untouched_algorithms)

UNARY = {"Relu", "Erf", "Gelu", "Tanh", "Sigmoid", "Sqrt", "Exp", "Log", "Abs", "Neg", "Cast", "Identity",
         "Reciprocal", "Softplus", "LeakyRelu", "Elu", "Silu", "HardSigmoid", "Dropout", "Not", "Floor", "Ceil",
         "Round", "Sign", "Sin", "Cos", "HardSwish", "Mish", "IsNaN", "IsInf", "Selu", "ThresholdedRelu"}
#: broadcasting ops of two or more inputs -> how partial sums pass through them (catalog.elementwise_algorithms)
BINARY = {"Add": "sum", "Sub": "sum", "Sum": "sum", "Mul": "scale", "Div": "scale", "Pow": None, "Max": None,
          "Min": None, "Mean": None, "Where": None, "Clip": None, "PRelu": None, "Equal": None, "Less": None,
          "Greater": None, "LessOrEqual": None, "GreaterOrEqual": None, "And": None, "Or": None, "Xor": None}
#: op types whose omitted optional inputs (``""`` before a given one) do not shift an algorithm's slots:
#: broadcasting ops read each present input alike; Pad and Resize read all but their data replicated
OPTIONAL_GAPS = set(BINARY) | {"Pad", "Resize"}
#: op types whose algorithms no constant input changes (:func:`op_algorithms` reads ``consts`` only for the
#: others), so that ops differing only in such values (an LLM's per-layer biases and norm scales, small
#: enough to be read as constants) share one composition
CONSTANT_FREE = frozenset({"MatMul", "Gemm", "Einsum", "Transpose", "Softmax", "LayerNormalization", "CastLike",
                           *UNARY, *BINARY})


def op_algorithms(op_type: str, attrs: Mapping, in_shapes: Sequence[Sequence[int]],
                  out_shape: Sequence[int], p: int, consts: Sequence | None = None,
                  slots: Sequence[int] | None = None) -> list[Algorithm] | None:
    """The catalog's algorithms of one ONNX node (one input slot per present input, in the node's order);
    None: not in it. ``consts``: per input, its value when it is a small known constant (axes, pads,
    scales), else None; ``slots``: per input, its position in the node (omitted optional inputs leave
    gaps; default 0..n-1)."""
    n = len(in_shapes)
    consts = list(consts) if consts is not None else [None] * n
    if op_type == "MatMul" and n == 2 and len(in_shapes[0]) >= 2 and len(in_shapes[1]) >= 2:
        return matmul_algorithms(len(in_shapes[0]), len(in_shapes[1]), p)
    if op_type == "Gemm" and n in (2, 3):
        c = in_shapes[2] if n == 3 else None
        return gemm_algorithms(bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)), p, c,
                               out_shape if c is not None else None)
    if op_type == "Einsum" and n >= 1:
        return einsum_algorithms(str(attrs.get("equation", "")), p)
    if op_type in UNARY and n == 1:
        return elementwise_algorithms(out_shape, in_shapes, p)
    if op_type in BINARY and n >= 1:
        algs = elementwise_algorithms(out_shape, in_shapes, p, BINARY[op_type] if n == 2 or op_type == "Sum" else None)
        if op_type == "Div":  # only the numerator may be partial
            algs = [a for a in algs if a.name != "partial-scale1"]
        return algs
    if op_type == "Transpose" and n == 1:
        perm = attrs.get("perm") or list(reversed(range(len(in_shapes[0]))))
        return transpose_algorithms(list(perm), p)
    if op_type in ("Softmax", "LayerNormalization") and n >= 1:
        axis = attrs.get("axis", -1)
        algs = normalization_algorithms(len(in_shapes[0]), axis, op_type, p)
        return with_replicated_rest(algs, n)
    if op_type == "CastLike" and n == 2:  # the second input only lends its element type
        return with_replicated_rest(elementwise_algorithms(out_shape, in_shapes[:1], p), n)
    if op_type in ("Pad", "Tile", "Resize", "Upsample", "Expand") and n >= 1:
        return _padding_and_resizing_algorithms(op_type, attrs, in_shapes, out_shape, p,
                                                dict(zip(slots if slots is not None else range(n), consts)))
    return _cnn_and_movement_algorithms(op_type, attrs, in_shapes, out_shape, p, consts)


def _cnn_and_movement_algorithms(op_type: str, attrs: Mapping, in_shapes: Sequence[Sequence[int]],
                                 out_shape: Sequence[int], p: int, consts: list) -> list[Algorithm] | None:
    """The conv family (catalog_conv), data movement (catalog_shape) and reductions (catalog_reduce)."""
    n, rank = len(in_shapes), len(in_shapes[0]) if in_shapes else 0
    if op_type == "Conv" and n in (2, 3) and rank >= 3:
        return conv_algorithms(n, int(attrs.get("group", 1)), p)
    if op_type == "ConvTranspose" and n in (2, 3) and rank >= 3:
        return conv_algorithms(n, int(attrs.get("group", 1)), p, transposed=True)
    if op_type in POOLS and n == 1 and rank >= 3:
        return pool_algorithms(op_type, p)
    if op_type == "BatchNormalization" and n == 5 and rank >= 2 and not attrs.get("training_mode", 0):
        return batchnorm_algorithms(p)
    if op_type in RESHAPES and n >= 1 and not (op_type == "Squeeze" and n == 1 and "axes" not in attrs) \
            and not (op_type == "Reshape" and n != 2):  # Reshape-1 has its shape as an attribute
        return reshape_algorithms(in_shapes[0], out_shape, n, p)
    if op_type == "Concat" and n >= 1:
        return untouched_algorithms(rank, {int(attrs["axis"]) % rank}, n, 0, p)
    if op_type == "Split" and n >= 1:
        return untouched_algorithms(rank, {int(attrs.get("axis", 0)) % rank}, 1, n - 1, p)
    if op_type == "Slice" and n >= 1:
        axes = _slice_axes(attrs, in_shapes, consts)
        return None if axes is None else untouched_algorithms(rank, {a % rank for a in axes}, 1, n - 1, p)
    if op_type == "Gather" and n == 2 and rank >= 1:
        return gather_algorithms(rank, len(in_shapes[1]), int(attrs.get("axis", 0)), p)
    if op_type == "GatherElements" and n == 2 and rank >= 1:
        return gather_elements_algorithms(in_shapes[0], in_shapes[1], int(attrs.get("axis", 0)), p)
    if op_type == "GatherND" and n == 2 and rank >= 1 and len(in_shapes[1]) >= 1:
        return gather_nd_algorithms(rank, in_shapes[1], int(attrs.get("batch_dims", 0)), p)
    if op_type == "ConstantOfShape" and n == 1:
        return fill_algorithms(len(out_shape), p)
    if op_type in REDUCTIONS and n in (1, 2) and rank >= 1:
        axes = attrs.get("axes") if n == 1 else consts[1]
        if n == 2 and axes is None:
            return None  # axes computed at run time: which dims are reduced is unknown
        axes = [] if axes is None else [int(a) for a in np.ravel(axes)]
        reduced = reduced_axes(rank, axes, bool(attrs.get("noop_with_empty_axes", 0)))
        return reduce_algorithms(op_type, rank, reduced, bool(attrs.get("keepdims", 1)), n, p)
    if op_type in ("ArgMax", "ArgMin") and n == 1 and rank >= 1:
        keepdims = bool(attrs.get("keepdims", 1))
        return reduce_algorithms(op_type, rank, {int(attrs.get("axis", 0)) % rank}, keepdims, 1, p)
    if op_type in ("Shape", "Size") and n == 1:
        return metadata_algorithms(rank, p)
    return None


def _padding_and_resizing_algorithms(op_type: str, attrs: Mapping, in_shapes: Sequence[Sequence[int]],
                                     out_shape: Sequence[int], p: int, by_slot: dict) -> list[Algorithm] | None:
    """Pad, Tile, Resize/Upsample and Expand (catalog_shape); ``by_slot``: node input position -> its known
    constant value, None when it is computed at run time (an omitted input has no entry)."""
    n, rank = len(in_shapes), len(in_shapes[0])
    if op_type == "Expand" and n == 2:
        return expand_algorithms(in_shapes[0], out_shape, p)
    if op_type == "Tile" and n == 2:
        return untouched_algorithms(rank, resized_dims(in_shapes[0], out_shape), 1, 1, p)
    if op_type == "Pad":
        pads = attrs.get("pads") if n == 1 else by_slot.get(1)
        if pads is None or by_slot.get(3, ()) is None:
            return None  # pads or axes computed at run time
        value = attrs.get("value", 0.0) if n == 1 else by_slot.get(2, 0.0)  # None: computed at run time
        linear = attrs.get("mode", "constant") != "constant" or (value is not None and not np.any(value))
        axes = None if 3 not in by_slot else [int(a) for a in np.ravel(by_slot[3])]
        return untouched_algorithms(rank, pad_touched(rank, np.ravel(pads), axes), 1, n - 1, p, linear)
    if op_type in ("Resize", "Upsample"):
        if attrs.get("coordinate_transformation_mode") in ("tf_crop_and_resize", "tf_half_pixel_for_nn") or (
                3 in by_slot and attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch"):
            return None
        scales = attrs.get("scales") if n == 1 else by_slot.get(1 if max(by_slot) == 1 else 2)  # Resize-10: slot 1
        if scales is None and 3 not in by_slot:
            return None  # scales computed at run time
        scales = None if scales is None else np.ravel(scales)
        return untouched_algorithms(rank, resized_dims(in_shapes[0], out_shape, attrs.get("axes"), scales), 1, n - 1, p)
    return None


def _slice_axes(attrs: Mapping, in_shapes: Sequence[Sequence[int]], consts: list) -> list[int] | None:
    """Slice's touched axes: the attribute (opset < 10), the constant ``axes`` input, or every axis
    ``starts`` names when ``axes`` is omitted; None when ``axes`` is computed at run time."""
    if len(in_shapes) == 1:
        return list(attrs.get("axes") or range(len(attrs.get("starts", ()))))
    if len(in_shapes) >= 4:
        return None if consts[3] is None else [int(a) for a in np.ravel(consts[3])]
    return list(range(int(in_shapes[1][0])))
