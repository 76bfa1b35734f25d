"""Everything about ONNX files: safe loading, shape inference, subgraph extraction, atomic saving.

Loading is defensive: a missing file, random bytes, a truncated protobuf, or external data that points
outside the model's folder (an absolute path or ``..`` — a known path-traversal attack on ONNX loaders)
each give a one-line :class:`UserError`. The input file is only ever read.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import external_data_helper, shape_inference

from onnxpart.errors import UserError
from onnxpart.files import atomic_write_bytes
from onnxpart.graph import OpGraph, from_onnx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    """A model read from disk, with unique node names, resolved input shapes and inferred shapes."""

    path: Path
    model: onnx.ModelProto
    sha256: str


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_input_shapes(specs: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", "mask=1x128"]`` -> ``{"x": (1, 3, 224, 224), "mask": (1, 128)}``."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().replace(",", "x").split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise UserError(f"cannot read --input-shape {spec!r}: use NAME=1x3x224x224")
        shapes[name] = shape
    return shapes


def read_model(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> LoadedModel:
    """Read, check and shape-infer an ONNX file (external data included, confined to its folder)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"model file {path} does not exist")
    if not path.is_file():
        raise UserError(f"{path} is not a file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning, ... on corrupt files
        raise UserError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not model.graph.node and not model.graph.output:
        raise UserError(f"{path} is not an ONNX model: it has no graph (empty, truncated or another format)")
    _check_external_data(model, path.parent)
    # Infer shapes before the external weights are read in: inference serializes the model, which
    # protobuf caps at 2 GiB, and it needs only the weights' dims, which the references carry.
    model = prepare(model, input_shapes or {})
    _load_external_data(model, path.parent)
    return LoadedModel(path=path, model=model, sha256=file_sha256(path))


def load_graph(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None,
               coarsen: bool = False) -> tuple[OpGraph, LoadedModel]:
    """File -> (OpGraph, LoadedModel). The usual first step of every command."""
    loaded = read_model(path, input_shapes)
    graph = from_onnx(loaded.model, loaded.sha256)
    if coarsen:
        from onnxpart.coarsen import coarsen as coarsen_graph

        graph = coarsen_graph(graph)
    return graph, loaded


def _check_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    """Refuse external-data locations outside ``base_dir`` (absolute, ``..``, or a symlink out)."""
    base = base_dir.resolve()
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        location = info.location
        resolved = (base / location).resolve()
        if os.path.isabs(location) or ".." in Path(location).parts or base not in resolved.parents:
            raise UserError(f"tensor {tensor.name!r} points to external data {location!r} outside the "
                            f"model's folder {base}: refused (path traversal)")
        if not resolved.is_file():
            raise UserError(f"external data file {location!r} of tensor {tensor.name!r} is missing next "
                            f"to the model in {base}")


def _load_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    base = base_dir.resolve()
    if any(external_data_helper.uses_external_data(t) for t in external_data_helper._get_all_tensors(model)):
        try:
            external_data_helper.load_external_data_for_model(model, str(base))
        except Exception as exc:
            raise UserError(f"cannot read the model's external data: {exc}") from None


def prepare(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """Copy of ``model`` with unique node names, ``input_shapes`` applied, and shapes inferred.

    Unnamed nodes get ``<op_type>_<file index>``; a duplicate name gets ``__<k>`` appended. The names are
    deterministic, so every result maps back to the same node of the file.
    """
    model = copy_proto(model)
    _name_nodes(model.graph)
    _apply_input_shapes(model.graph, input_shapes)
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise UserError(f"ONNX shape inference failed: {str(exc).splitlines()[0][:200]}") from None
    return inferred


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


def _apply_input_shapes(graph: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Set the dims of named graph inputs (or annotate any other named value) before inference."""
    initializers = {init.name for init in graph.initializer}
    by_name = {vi.name: vi for vi in graph.input if vi.name not in initializers}
    for name, shape in input_shapes.items():
        target = by_name.get(name)
        if target is None:
            produced = {o for node in graph.node for o in node.output}
            if name not in produced:
                real = ", ".join(sorted(by_name)) or "none"
                raise UserError(f"--input-shape names {name!r}, which is not a graph input (inputs: {real})")
            target = next((vi for vi in graph.value_info if vi.name == name), None) or graph.value_info.add()
            target.name = name
            if not target.type.tensor_type.elem_type:
                target.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        dims = target.type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise UserError(f"--input-shape {name}: the model says rank {len(dims)}, got {len(shape)} dims")
        del dims[:]
        for value in shape:
            dims.add().dim_value = int(value)


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> Path:
    """Serialize atomically. Models over 2 GiB would need external data; refused with a clear error."""
    try:
        data = model.SerializeToString()
    except ValueError as exc:
        raise UserError(f"cannot serialize {path}: {exc}") from None
    return atomic_write_bytes(path, data)


# ------------------------------------------------------------------------------ subgraph extraction
def extract_subgraph(model: onnx.ModelProto, node_names: Iterable[str], inputs: Sequence[str],
                     outputs: Sequence[str], name: str | None = None) -> onnx.ModelProto:
    """A standalone model made of ``node_names`` (compute nodes), reading ``inputs`` and producing
    ``outputs``.

    Weight generators the nodes need (initializers, Constant and constant-only nodes such as
    ``ConstantOfShape``) are pulled in automatically, so this works on IR-3 models whose weights are built
    by nodes; so are those of an output no node in ``node_names`` makes (a model output that is a
    constant). The result has IR version ≥ 4 so initializers need not be listed as inputs, keeps the opset
    imports, and passes ``onnx.checker``. ``model`` must come from :func:`read_model` (shapes inferred).
    """
    g = model.graph
    wanted = set(node_names)
    value_types = {vi.name: vi for vi in list(g.value_info) + list(g.input) + list(g.output)}
    initializers = {init.name: init for init in g.initializer}
    producer = {o: node for node in g.node for o in node.output if o}
    provided = set(inputs)

    selected_names: set[str] = set()
    needed_inits: list[str] = []
    stack = [producer_node.name for producer_node in g.node if producer_node.name in wanted]
    missing = wanted - {n.name for n in g.node}
    if missing:
        raise ValueError(f"unknown node names: {sorted(missing)[:5]}")

    def need(value: str) -> None:
        """``value`` must exist in the part: provided, an initializer, or made by a (generator) node."""
        if value in provided:
            return
        if value in initializers:
            if value not in needed_inits:
                needed_inits.append(value)
        elif value in producer:
            gen = producer[value]
            if gen.name not in wanted and gen.name not in selected_names:
                stack.append(gen.name)

    # Backward closure from the wanted nodes, and from outputs no wanted node makes (a model output
    # that is a constant), through values nobody provides (i.e. weight generators).
    by_name = {node.name: node for node in g.node}
    made_by_wanted = {o for node in g.node if node.name in wanted for o in node.output}
    for value in outputs:
        if value not in made_by_wanted:
            need(value)
    while stack:
        node = by_name[stack.pop()]
        if node.name in selected_names:
            continue
        selected_names.add(node.name)
        reads = [n for n in node.input if n]
        if any(attr.type in (5, 10) for attr in node.attribute):
            from onnxpart.graph import _outer_scope_names

            reads += _outer_scope_names(node)
        for value in reads:
            need(value)
    selected = [node for node in g.node if node.name in selected_names]

    def value_info(value: str) -> onnx.ValueInfoProto:
        if value in value_types:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(value_types[value])
            return vi
        if value in initializers:
            init = initializers[value]
            return onnx.helper.make_tensor_value_info(value, init.data_type, list(init.dims))
        raise ValueError(f"no type known for {value!r}")

    graph = onnx.helper.make_graph(
        nodes=selected,
        name=name or f"{g.name or 'model'}_part",
        inputs=[value_info(v) for v in inputs],
        outputs=[value_info(v) for v in outputs],
        initializer=[initializers[v] for v in needed_inits],
    )
    produced_inside = {o for node in selected for o in node.output}
    graph.value_info.extend(value_info(v) for v in sorted(produced_inside - set(outputs)) if v in value_types)
    part = onnx.helper.make_model(graph, opset_imports=list(model.opset_import),
                                  producer_name="onnxpart")
    part.ir_version = max(model.ir_version, 4)
    for fn in model.functions:
        part.functions.append(fn)
    return part
