"""Invalid models refused at the door: once per load, before shapes are resolved or anything is costed.

A model onnx or onnxruntime would refuse must not be planned, let alone written back as stage or piece
files that fail ``onnx.checker`` (or onnxruntime) later. :func:`check_model` refuses it with one line
naming the tensor or node:

* versions: an IR version or an opset (ONNX domains) beyond what the installed onnx knows, or that
  onnxruntime refuses (asked with a model of no node at the same versions: it reads no weight);
* no graph outputs; an element type that is undefined or not an ONNX type (graph inputs, outputs,
  initializers); a graph input or output with no shape; a negative dim;
* everything ``onnx.checker.check_model`` finds by path (no protobuf size limit; external data is
  located, never read), or, for a model whose embedded weights loading left in the file
  (:mod:`onnxpart.onnx_wire`), in memory on the copy it parsed: duplicate writers of a tensor (SSA), a
  graph output nothing produces, ``raw_data`` or typed data shorter than its tensor, ops unknown to the
  default domain.

The checker's full check — strict type and shape inference, which holds every op to its schema's type
constraints (``Relu`` on complex64) and shape rules (a MatMul whose inner dims differ) — runs once the
user's dims are known, on the weightless skeleton (:func:`onnxpart.shapes.check_inference`): it costs
one ONNX inference pass (0.18 s on a 50,000-node graph), so it always runs. External data is checked
apart (:func:`onnxpart.onnx_io.check_external_data`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import onnx

from onnxpart import onnx_wire
from onnxpart.errors import UserError

#: the ONNX domains whose opset the installed onnx knows, and that version (the default domain: "")
_KNOWN_OPSETS = {"": onnx.defs.onnx_opset_version, "ai.onnx": onnx.defs.onnx_opset_version,
                 "ai.onnx.ml": onnx.defs.onnx_ml_opset_version}


def check_model(path: Path, model: onnx.ModelProto, weightless: bool = False) -> None:
    """Raise :class:`UserError` (exit 2) when ``model``, read from ``path``, is not a valid ONNX model.
    ``weightless``: ``model`` left embedded weights in the file (:mod:`onnxpart.onnx_wire`, which checked
    each one's length); the checker runs on it rather than on the file, which it would parse whole."""
    checked = onnx_wire.checkable(model) if weightless else path
    problem = _versions(model) or _declared_types(model.graph) or _checker(checked)
    if problem:
        raise UserError(f"invalid model {path.name}: {problem}")


def _versions(model: onnx.ModelProto) -> str | None:
    """The IR version and the ONNX opsets against the installed onnx, then onnxruntime."""
    from onnxpart.runtime import unsupported_versions

    if model.ir_version > onnx.IR_VERSION:
        return f"IR version {model.ir_version} is newer than the installed onnx reads ({onnx.IR_VERSION})"
    opsets = {entry.domain: entry.version for entry in model.opset_import if entry.domain in _KNOWN_OPSETS}
    for domain, version in opsets.items():
        newest = _KNOWN_OPSETS[domain]()
        if version > newest:
            return (f"opset {version} of domain {domain or 'ai.onnx'} is newer than the installed onnx knows "
                    f"({newest})")
    return unsupported_versions(model.ir_version, tuple(sorted(opsets.items())))


def _declared_types(graph: onnx.GraphProto) -> str | None:
    """No outputs; undefined or unknown element types; negative dims (the checker lets these through); graph
    inputs and outputs with no shape (the checker refuses them without naming them)."""
    if not graph.output:
        return "the graph has no outputs: nothing to compute"
    known = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for init in graph.initializer:
        if init.data_type not in known:
            return f"initializer {init.name!r} has element type {init.data_type}, which is not an ONNX type"
        if any(d < 0 for d in init.dims):
            return f"initializer {init.name!r} has negative dims {list(init.dims)}"
    for what, infos in (("graph input", graph.input), ("graph output", graph.output),
                        ("value_info of", graph.value_info)):
        problem = _value_infos(what, infos, known, typed=what != "value_info of")
        if problem:
            return problem
    return None


def _value_infos(what: str, infos: Iterable[onnx.ValueInfoProto], known: set[int], typed: bool) -> str | None:
    """The first bad element type, missing shape or negative dim of ``infos``; ``typed``: an element type and
    a shape are required (a value_info, an annotation, may leave them out)."""
    for vi in infos:
        if not vi.type.HasField("tensor_type"):
            continue  # sequences, maps, optionals: the checker's
        tt = vi.type.tensor_type
        if tt.elem_type not in known and (typed or tt.elem_type):
            kind = ("no element type (UNDEFINED)" if not tt.elem_type
                    else f"element type {tt.elem_type}, which is not an ONNX type")
            return f"{what} {vi.name!r} has {kind}"
        if typed and not tt.HasField("shape"):
            return (f"{what} {vi.name!r} declares no shape (onnx.checker requires one: its rank, with a name for "
                    "each dim that is not fixed)")
        for axis, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value < 0:
                return f"{what} {vi.name!r} has dim {dim.dim_value} on axis {axis}: a dim is a size ≥ 0 or a name"
    return None


def _checker(model: Path | onnx.ModelProto) -> str | None:
    """``onnx.checker.check_model`` by path (or of a model in memory), its message on one line (its full
    check, strict inference, runs later on the weightless skeleton at the user's dims:
    :func:`onnxpart.shapes.check_inference`)."""
    try:
        onnx.checker.check_model(model if isinstance(model, onnx.ModelProto) else str(model))
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, ValueError: all about the file
        message = " ".join(str(exc).split())[:400] or type(exc).__name__
        if "multiple hard links" in message:  # onnx's "hardlink attack" rule: say what usually made the link
            message += (" (an output written with --weights link shares this data file: delete that output, or "
                        "write it with --weights copy or reference)")
        return message
    return None
