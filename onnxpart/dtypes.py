"""ONNX element types (``TensorProto.DataType``): onnxpart's name of each, and the bytes a dense tensor of
one takes. A leaf module: the graph (:mod:`onnxpart.graph`) and shape resolution (:mod:`onnxpart.shapes`)
both name types with it."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

#: ONNX's names (``TensorProto.DataType``, lowercased) that onnxpart writes differently, as numpy does.
_RENAMED = {"float": "float32", "double": "float64"}


@functools.lru_cache(maxsize=None)
def dtype_name(elem_type: int) -> str:
    """onnxpart's name of a ``TensorProto.DataType`` value: ONNX's, lowercased (``int64``, ``bfloat16``,
    ``float8e4m3fn``), with ``float32`` and ``float64`` for FLOAT and DOUBLE; ``dtype<N>`` if unknown."""
    from onnx import helper

    try:
        name = helper.tensor_dtype_to_string(elem_type).rpartition(".")[2].lower()  # "TensorProto.FLOAT"
    except KeyError:
        return f"dtype{elem_type}"
    return _RENAMED.get(name, name)


@functools.lru_cache(maxsize=None)
def _dtype_bits(elem_type: int) -> int:
    """Bits per element: the numpy item size of onnx's dtype mapping, except for the sub-byte types, which
    numpy stores in a byte each but ONNX packs (onnx has no helper for this: ``onnx.helper.make_tensor``
    spells out the same widths); 32 for an unknown type."""
    from onnx import TensorProto, helper

    packed = {TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.UINT2: 2,
              TensorProto.INT2: 2, TensorProto.FLOAT6E2M3: 6, TensorProto.FLOAT6E3M2: 6}
    if elem_type in packed:
        return packed[elem_type]
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).itemsize * 8  # STRING: 64 (numpy object)
    except KeyError:
        return 32


def tensor_bytes(elem_type: int, shape: Sequence[int]) -> int:
    """Size in bytes of a dense tensor (``ceil(numel * bits / 8)``: sub-byte types packed, per tensor)."""
    return -(-math.prod(shape) * _dtype_bits(elem_type) // 8)
