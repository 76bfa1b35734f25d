"""The small numeric constants of an ONNX model that decide which axes a node touches (Slice's ``axes``,
a reduction's ``axes``, Pad's ``pads``, Resize's ``scales``) and whether it is linear (Pad's constant
value): read from initializers stored in the file and from ``Constant`` nodes. External
data is never read (onnxruntime reads it; onnxpart does not), and only tensors of at most
:data:`LIMIT` elements are kept."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

LIMIT = 64
_NUMERIC = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
            onnx.TensorProto.FLOAT16}


def small_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """{value name: array} for the model's small numeric initializers and Constant outputs."""
    out = {}
    for init in model.graph.initializer:
        if _small(init):
            out[init.name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for attr in node.attribute:
            if attr.name == "value" and _small(attr.t):
                out[node.output[0]] = numpy_helper.to_array(attr.t)
            elif attr.name in ("value_ints", "value_int"):
                out[node.output[0]] = np.array(attr.ints if attr.name == "value_ints" else attr.i, dtype=np.int64)
            elif attr.name in ("value_floats", "value_float"):
                out[node.output[0]] = np.array(attr.floats if attr.name == "value_floats" else attr.f, np.float32)
    return out


def _small(tensor: onnx.TensorProto) -> bool:
    return (tensor.data_type in _NUMERIC and tensor.data_location != onnx.TensorProto.EXTERNAL
            and int(np.prod(tensor.dims, dtype=np.int64)) <= LIMIT)
