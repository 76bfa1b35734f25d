"""ONNX files in: safe loading, shape inference, a model ready for :func:`~onnxpart.onnx_graph.from_onnx`.

Loading is defensive: a missing file, random bytes, a truncated protobuf, or external data that points
outside the model's folder (an absolute path or ``..`` — a known path-traversal attack on ONNX loaders)
each give a one-line :class:`UserError`. The input file is only ever read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import external_data_helper

from onnxpart import onnx_wire, shapes
from onnxpart.errors import UserError
from onnxpart.dtypes import dtype_name, tensor_bytes
from onnxpart.graph import OpGraph
from onnxpart.onnx_graph import UnknownShapeError, from_onnx
from onnxpart.model_check import check_model
from onnxpart.shapes import ValueType
from onnxpart.units import SHAPE_DIM, parse_number

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    """A model read from disk for planning: the file's graph with unique node names and its weights left
    where they are (external data is checked, never read), plus the types shape resolution found.

    ``types`` are concrete (every symbolic dim fixed by ``dims`` or ``--input-shape``): what costing sees.
    ``emit_types`` keep the original's symbolic dims where inference can tell them: what emitted models
    declare on their inputs and outputs, so a model with a dynamic batch stays dynamic.
    """

    path: Path
    model: onnx.ModelProto
    sha256: str
    types: Mapping[str, ValueType]
    dims: Mapping[str, int]
    emit_types: Mapping[str, onnx.ValueInfoProto]
    hints: Mapping[str, Sequence[int]] = dataclasses.field(default_factory=dict)  # --input-shape

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def dynamic(self) -> bool:
        """True when a graph input has a dim that is not a fixed number."""
        weights = {init.name for init in self.model.graph.initializer}
        return any(not dim.HasField("dim_value") for vi in self.model.graph.input if vi.name not in weights
                   for dim in vi.type.tensor_type.shape.dim)

    @property
    def uses_external_data(self) -> bool:
        """True when a weight is in a data file beside the model (its embedded weights, which loading leaves
        in the model file as references to it, :mod:`onnxpart.onnx_wire`, do not count)."""
        return any(external_data_helper.uses_external_data(t) and not self.embedded(t)
                   for t in self.model.graph.initializer)

    def embedded(self, tensor: onnx.TensorProto) -> bool:
        """True for a weight stored in the model file itself, which loading left there."""
        return onnx_wire.left_in(tensor, self.path.name)

    @property
    def external_files(self) -> list[Path]:
        """The external-data files the model references (inside its folder: :func:`check_external_data`)."""
        return sorted({self.folder / external_data_helper.ExternalDataInfo(t).location
                       for t in external_data_helper._get_all_tensors(self.model)
                       if external_data_helper.uses_external_data(t)})

    @functools.cached_property
    def declared(self) -> dict[str, onnx.ValueInfoProto]:
        """The original's graph inputs and outputs that state a tensor shape, by name."""
        g = self.model.graph
        return {vi.name: vi for vi in list(g.input) + list(g.output)
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}

    @property
    def forced(self) -> bool:
        """True when ``--force-shape`` let the hints replace dims the model fixes (costing only)."""
        return shapes.forced(self.hints)

    def value_info(self, name: str, freeze: bool = False) -> onnx.ValueInfoProto:
        """How an emitted model declares ``name``: a graph input or output of the original exactly as the
        original declares it (its dim names too: symbolic inference would rename a ``total_sequence``
        ``past_sequence + sequence``); another tensor with the original's symbolic type where known, else
        the concrete one, a dim symbolic inference cannot name left unnamed. ``freeze``: the concrete
        dims. After ``--force-shape`` an inner tensor's dims are all left unnamed: the costed ones are not
        those the model runs at."""
        concrete = self.types.get(name)
        if not freeze and name in self.declared:
            return copy_proto(self.declared[name])
        if not freeze and self.forced and concrete is not None and concrete.elem_type:
            return onnx.helper.make_tensor_value_info(name, concrete.elem_type, [None] * len(concrete.dims or ()))
        symbolic = None if freeze or not self.dynamic else self.emit_types.get(name)
        if symbolic is not None and (concrete is None or concrete.dims is None
                                     or len(symbolic.type.tensor_type.shape.dim) == len(concrete.dims)):
            return copy_proto(symbolic)
        if concrete is None or not concrete.elem_type:
            raise ValueError(f"no type known for {name!r}")
        if freeze or not self.dynamic:
            return onnx.helper.make_tensor_value_info(name, concrete.elem_type, list(concrete.dims or []))
        return onnx.helper.make_tensor_value_info(name, concrete.elem_type, [None] * len(concrete.dims or ()))


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ShapeHint(tuple):
    """The dims of an ``--input-shape`` hint, with the element type if the user gave one (``:float16``),
    and ``force`` (``--force-shape``): it may replace dims the model fixes."""

    elem_type: int = 0
    force: bool = False

    def __new__(cls, dims: Iterable[int], elem_type: int = 0, force: bool = False) -> "ShapeHint":
        hint = super().__new__(cls, dims)
        hint.elem_type = elem_type
        hint.force = force
        return hint


def parse_input_shapes(specs: Iterable[str], force: bool = False) -> dict[str, ShapeHint]:
    """``["x=1x3x224x224", "mask=1x128:bool"]`` -> ``{"x": (1, 3, 224, 224), "mask": (1, 128) of bool}``.

    The element type is needed only for an internal tensor whose producer ONNX cannot type (a custom op);
    ``force`` (``--force-shape``) lets the hints replace dims the model fixes."""
    shapes_ = {}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        text, _, dtype = text.partition(":")
        elem_type = _ELEM_TYPES.get(dtype.strip().lower(), -1) if dtype else 0
        parts = text.lower().replace(",", "x").split("x") if text else []
        if not sep or not name or not all(part.strip().isdigit() for part in parts) or elem_type < 0:
            raise UserError(f"cannot read --input-shape {spec!r}: use NAME=DIMS, e.g. input_ids=1x128 "
                            "(NAME=DIMS:DTYPE, e.g. :float16, for a tensor ONNX cannot type)")
        shape = tuple(parse_number(part, f"--input-shape {name}", SHAPE_DIM) for part in parts)
        shapes_[name] = ShapeHint(shape, elem_type, force)
    return shapes_


#: ``:DTYPE`` names of ``--input-shape`` (onnxpart's dtype names: float32, float16, bool, int64, ...)
_ELEM_TYPES = {dtype_name(t): t for t in onnx.TensorProto.DataType.values() if t}


def parse_dims(specs: Iterable[str]) -> dict[str, int]:
    """``["batch=1", "sequence=128"]`` -> ``{"batch": 1, "sequence": 128}``."""
    dims = {}
    for spec in specs:
        name, sep, value = spec.rpartition("=")
        if not sep or not name or not value.strip().isdigit():
            raise UserError(f"cannot read --dim {spec!r}: use NAME=VALUE with the dim's name, e.g. batch=1")
        dims[name.strip()] = parse_number(value, f"--dim {name.strip()}", SHAPE_DIM)
    return dims


def read_model(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None,
               dims: Mapping[str, int] | None = None) -> LoadedModel:
    """Read, check and shape-resolve an ONNX file without reading its weights.

    External data is checked (inside the model's folder, the file exists, offset + length within it) but
    left on disk; shapes are resolved on a weightless skeleton (:mod:`onnxpart.shapes`), so neither time
    nor memory grows with the weights.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"model file {path} is a folder, not a file")
    if not path.exists():
        raise UserError(f"model file {path} does not exist")
    if not path.is_file():
        raise UserError(f"model file {path} is not a regular file")
    model, embedded = read_proto(path)
    if not model.graph.node and not model.graph.output:
        raise UserError(f"{path} is not an ONNX model: it has no graph (empty, truncated or another format)")
    check_external_data(model, path.parent, own=path.name)
    check_model(path, model, weightless=embedded > 0)
    _name_nodes(model.graph)
    dims = _dims_by_name(model, dict(dims or {}), input_shapes or {})
    bare = shapes.skeleton(model)
    loaded = LoadedModel(path=path, model=model, sha256=file_sha256(path), types={}, dims=dims,
                         emit_types={}, hints=dict(input_shapes or {}))
    folded = shapes.fold(bare) if loaded.dynamic else None  # one fold serves costing and emission
    types = shapes.resolve(bare, dims, loaded.hints, prefolded=None if loaded.forced else folded)
    shapes.check_inference(bare, dims, loaded.hints, types)
    emit_types = shapes.symbolic_value_infos(bare, folded[0]) if folded else {}
    return dataclasses.replace(loaded, types=types, emit_types=emit_types)


def read_proto(path: Path) -> tuple[onnx.ModelProto, int]:
    """The file's protobuf with its embedded weights left in the file (:mod:`onnxpart.onnx_wire`: each
    initializer's ``raw_data`` over :data:`~onnxpart.shapes.SMALL_CONSTANT_BYTES` becomes a reference to
    its byte range), and how many were left there. A file the wire walk cannot read is parsed whole by
    ``onnx.load``, which says what is wrong with it (so does a file that cannot be opened)."""
    try:
        read = onnx_wire.read_weightless(path, shapes.SMALL_CONSTANT_BYTES)
    except OSError:
        read = None
    if read is not None:
        return read
    try:
        return onnx.load(str(path), load_external_data=False), 0
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning, ... on corrupt files
        raise UserError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None


def load_graph(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None,
               coarsen: bool = False, dims: Mapping[str, int] | None = None) -> tuple[OpGraph, LoadedModel]:
    """File -> (OpGraph, LoadedModel). The usual first step of every command."""
    loaded = read_model(path, input_shapes, dims)
    try:
        graph = from_onnx(loaded.model, loaded.sha256, types=loaded.types)
    except UnknownShapeError as exc:
        raise UserError(unknown_shape_message(exc, loaded.model, loaded.dims)) from None
    if coarsen:
        from onnxpart.coarsen import coarsen as coarsen_graph

        graph = coarsen_graph(graph)
    return graph, loaded


def _dims_by_name(model: onnx.ModelProto, dims: dict[str, int],
                  input_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """``dims`` checked against the model's symbolic dims, plus those an ``--input-shape`` of a graph
    input fixes (``input_ids=1x64`` on ``[batch, sequence]`` means batch = 1, sequence = 64)."""
    named = shapes.symbolic_dims(model)
    unknown = sorted(set(dims) - set(named))
    if unknown:
        have = ", ".join(named) or "none: its inputs are static"
        raise UserError(f"--dim {unknown[0]}: the model has no symbolic dim of that name (its dims: {have})")
    weights = {init.name for init in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in weights}
    produced = {o for node in model.graph.node for o in node.output}
    for name, shape in input_shapes.items():
        if name not in inputs:
            if name not in produced:
                real = ", ".join(sorted(inputs)) or "none"
                raise UserError(f"--input-shape names {name!r}, which is not a graph input or a node's "
                                f"output (inputs: {real})")
            continue
        declared = inputs[name].type.tensor_type.shape.dim
        shapes.check_hint(name, [d.dim_value if d.HasField("dim_value") else -1 for d in declared] or None, shape)
        for dim, value in zip(declared, shape):
            if dim.HasField("dim_param") and dims.setdefault(dim.dim_param, int(value)) != int(value):
                raise UserError(f"--input-shape {name}: dim {dim.dim_param!r} is {value} here but "
                                f"{dims[dim.dim_param]} elsewhere")
    return dims


def unknown_shape_message(exc: UnknownShapeError, model: onnx.ModelProto, dims: Mapping[str, int]) -> str:
    """The error for tensors whose shape stayed unknown: the root one (first in topological order) with
    an example of the right rank, and the symbolic dims to fix with ``--dim``."""
    root, info = exc.unknown[0]
    more = f" and {len(exc.unknown) - 1} more after it" if len(exc.unknown) > 1 else ""
    message = f"unknown shape after shape inference: {root!r} {info}{more}"
    named = shapes.symbolic_dims(model)
    missing = {dim: inputs for dim, inputs in named.items() if dim not in dims}
    if missing:
        where = ", ".join(f"{dim} ({', '.join(inputs)})" for dim, inputs in missing.items())
        fix = " ".join(f"--dim {dim}=VALUE" for dim in missing)
        first = next(iter(missing.values()))[0]
        return (f"{message}; the model has symbolic dims {where}: pass {fix} "
                f"(or --input-shape {first}={_example_dims(model, first)})")
    known_rank = info.startswith("[") and info != "[no type]"
    example = "x".join("1" if d in ("?", "") else d for d in info.strip("[]").split(",")) if known_rank else "DIMS"
    return f"{message}; pass --input-shape {root}={example} with its real dims"


def _example_dims(model: onnx.ModelProto, name: str) -> str:
    vi = next(vi for vi in model.graph.input if vi.name == name)
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in vi.type.tensor_type.shape.dim)


def check_external_data(model: onnx.ModelProto, base_dir: Path, own: str | None = None) -> None:
    """Refuse external data outside ``base_dir`` (absolute, ``..``, or a symlink out), missing files,
    offsets and lengths that are not integers ≥ 0, and references past the end of their file. Reads file
    sizes only, never the data. References to ``own`` (the model's file name: its embedded weights, which
    loading left there, :mod:`onnxpart.onnx_wire`) are the model's own bytes, a symlinked model's too."""
    base = base_dir.resolve()
    sizes: dict[Path, int] = {}
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        if location == own:
            continue
        if not location:
            raise UserError(f"tensor {tensor.name!r} is stored as external data but names no location")
        resolved = (base / location).resolve()
        if os.path.isabs(location) or ".." in Path(location).parts or base not in resolved.parents:
            raise UserError(f"tensor {tensor.name!r} points to external data {location!r} outside the "
                            f"model's folder {base}: refused (path traversal)")
        if not resolved.is_file():
            raise UserError(f"external data file {location!r} of tensor {tensor.name!r} is missing next "
                            f"to the model in {base}")
        size = sizes.setdefault(resolved, resolved.stat().st_size)
        needed = tensor_bytes(tensor.data_type, tensor.dims)
        offset = _byte_count(entries, "offset", tensor.name) or 0
        length = _byte_count(entries, "length", tensor.name) or needed
        if length < needed or offset + length > size:
            raise UserError(f"external data of tensor {tensor.name!r} ({location}, offset {offset}, length "
                            f"{length}, needs {needed} B) runs past the end of the {size}-byte file: the "
                            f"model's data file is truncated or belongs to another model")


def _byte_count(entries: Mapping[str, str], key: str, tensor: str) -> int | None:
    """The external-data ``offset`` or ``length`` entry as an integer ≥ 0 (None when absent)."""
    text = entries.get(key)
    if text is None:
        return None
    if not text.strip().isdigit():
        raise UserError(f"external data of tensor {tensor!r} has {key} {text!r}: it must be an integer ≥ 0")
    return int(text)


def prepare(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
            dims: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """An in-memory model made ready for :func:`from_onnx`: a copy with unique node names and every
    resolved type written into its inputs and value_info (dims frozen: for analysis, not for emission)."""
    model = copy_proto(model)
    _name_nodes(model.graph)
    types = shapes.resolve(shapes.skeleton(model), dims or {}, input_shapes or {})
    g = model.graph
    declared = {vi.name: vi for vi in list(g.input) + list(g.output) + list(g.value_info)}
    for name, vt in types.items():
        if not vt.elem_type or vt.dims is None:
            continue
        vi = declared.get(name)
        if vi is None:
            vi = g.value_info.add()
            vi.name = name
        vi.type.tensor_type.elem_type = vt.elem_type
        if -1 not in vt.dims:
            shapes.apply_shape(vi, vt.dims)
    return model


def copy_proto(proto):
    """A deep copy of any protobuf message (model, node, value info...)."""
    clone = type(proto)()
    clone.CopyFrom(proto)
    return clone


def _name_nodes(graph: onnx.GraphProto) -> None:
    seen: set[str] = set()
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        candidate, k = name, 2
        while candidate in seen:
            candidate, k = f"{name}__{k}", k + 1
        node.name = candidate
        seen.add(candidate)
