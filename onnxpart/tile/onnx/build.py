"""A costed OpGraph on a device mesh -> its :class:`~onnxpart.tile.onnx.model.LayoutInstance` (the model
module's docstring says what the instance holds and costs).

* every tensor's candidate layouts (:func:`candidate_layouts`): the tuples of per-axis components R, S(d), P
  whose sharded dims divide by their axes' sizes, P only on an activation whose producer makes partial
  sums, and for each layout left out the reason (plan.json lists them);
* every op's algorithms: the catalog's (:func:`onnxpart.tile.onnx.op_catalog.op_algorithms`) composed over
  the mesh axes (:func:`onnxpart.tile.onnx.mesh.compose_algorithms`), each priced per device
  (:mod:`onnxpart.tile.onnx.compute`), or "replicated only";
* ``--pin`` (:func:`parse_pins`, :func:`pin`) and the ``--device-memory`` check against the least memory any
  layout needs.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Mapping, Sequence

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.onnx_constants import LIMIT
from onnxpart.tile.onnx import mesh as meshes
from onnxpart.tile.onnx.catalog import P, R, Layout, S
from onnxpart.tile.onnx.compute import DeviceRoofline
from onnxpart.tile.onnx.mesh import DeviceMesh, compose, parts
from onnxpart.tile.onnx.model import Choice, LayoutInstance, OpVar, TensorVar
from onnxpart.tile.onnx.op_catalog import CONSTANT_FREE, OPTIONAL_GAPS, op_algorithms


def parse_layout(text: str, axes: int = 1) -> Layout:
    """``R``, ``P``, ``S(d)`` (or ``S[d]``, the onnxruntime form) per mesh axis -> a mesh layout
    (:func:`onnxpart.tile.onnx.mesh.parse_mesh_layout`); UserError otherwise."""
    return meshes.parse_mesh_layout(text, axes)


_PARTIAL_WHY = {"output": "a graph output is never left as partial sums",
                "activation": "no algorithm of its producer makes partial sums"}


def candidate_layouts(shape: Sequence[int], mesh: DeviceMesh, partial: Sequence[bool],
                      kind: str = "activation") -> tuple[tuple[Layout, ...], tuple[tuple[str, str], ...]]:
    """(domain, excluded with reasons): every tuple of per-axis components (R, S(d), P; axis-0 major)
    whose sharded dims divide by the product of their axes' sizes; P on axis j only when the producer
    makes partial sums there (``partial[j]``) and it is an activation (never a graph output, input or
    weight). Axes of size 1 take R only. Worked out once per divisibility (:func:`onnxpart.tile.onnx.mesh.
    divisibility`: tensors whose dims divide alike have the same layouts), the reasons then told with the
    tensor's own sizes, once per shape (tensors of one shape share both tuples)."""
    return _told(tuple(int(s) for s in shape), mesh, tuple(partial), kind)


@functools.lru_cache(maxsize=1 << 12)
def _told(shape: tuple[int, ...], mesh: DeviceMesh, partial: tuple[bool, ...], kind: str):
    """:func:`candidate_layouts` of one shape."""
    domain, excluded = _candidates(meshes.divisibility(shape, mesh.devices), mesh, partial, kind)
    return domain, tuple((text, why if d is None else f"{why[0]}{shape[d]}{why[1]}") for text, d, why in excluded)


@functools.lru_cache(maxsize=1 << 12)
def _candidates(shape: tuple[int, ...], mesh: DeviceMesh, partial: tuple[bool, ...], kind: str):
    """(domain, excluded as (layout text, the dim whose size the reason names or None, the reason: its text,
    or the text before and after that size))."""
    domain, excluded = [], []
    for combo in _combos(len(shape), mesh.shape):
        why = _why_not(shape, combo, mesh, partial, kind)
        if why is None:
            domain.append(compose(combo))
        else:
            excluded.append((_text(combo), *why))
    return tuple(domain), tuple(excluded)


@functools.lru_cache(maxsize=1 << 8)
def _combos(rank: int, sizes: tuple[int, ...]) -> tuple[tuple[Layout, ...], ...]:
    """Every tuple of per-axis components of a rank-``rank`` tensor (R, S(d), P; R only on an axis of size 1)."""
    options = [[R] if p == 1 else [R] + [S(d) for d in range(rank)] + [P] for p in sizes]
    return tuple(itertools.product(*options))


@functools.lru_cache(maxsize=1 << 10)
def _text(combo: tuple[Layout, ...]) -> str:
    """How plan.json writes the layout of per-axis components ``combo`` (the same few on every tensor)."""
    return str(compose(combo))


def _why_not(shape, combo, mesh: DeviceMesh, partial: Sequence[bool], kind: str) -> tuple | None:
    """Why the per-axis components ``combo`` are not a layout of the tensor (None: they are), as
    (None, the reason) or (dim d, (the reason before d's size, after it))."""
    where = (lambda j: "") if len(mesh.shape) == 1 else (lambda j: f" (mesh axis {mesh.names[j]})")
    for j, a in enumerate(combo):
        if a.kind == "P" and not (partial[j] and kind == "activation"):
            return None, _PARTIAL_WHY.get(kind, f"a {kind} arrives whole, never as partial sums") + where(j)
    for d, axes, pieces in _splits(combo, mesh):
        size = shape[d]
        if size % pieces or size < pieces:
            names = "" if len(mesh.shape) == 1 else f" (mesh axes {', '.join(mesh.names[j] for j in axes)})"
            return d, (f"dim {d} of size ", f" does not divide by {pieces} devices{names}")
    return None


@functools.lru_cache(maxsize=1 << 12)
def _splits(combo: tuple[Layout, ...], mesh: DeviceMesh) -> tuple[tuple[int, tuple[int, ...], int], ...]:
    """The dims ``combo`` shards, in order: (dim, the mesh axes that split it, the pieces they make)."""
    dims = sorted({a.dim for a in combo if a.kind == "S"})
    out = []
    for d in dims:
        axes = tuple(j for j, a in enumerate(combo) if a.kind == "S" and a.dim == d)
        out.append((d, axes, math.prod(mesh.shape[j] for j in axes)))
    return tuple(out)


def build_layout_instance(graph, devices: int | Sequence[int], bandwidth: float | Sequence[float] | None = None,
                          latency: float | Sequence[float] = 5e-6, memory: float | None = None,
                          pins: Mapping[str, Layout] | None = None, constants: Mapping | None = None,
                          axis_names: Sequence[str] | None = None, device=None,
                          sharded_outputs: bool = False) -> LayoutInstance:
    """The layout instance of a costed OpGraph on a mesh (module docstring): ``devices`` is D (a ring)
    or the mesh shape (2, 4); ``bandwidth`` and ``latency`` one value or one per axis, the bandwidth
    defaulting to the graph's interconnect (the device spec's); ``pins`` fix tensors' layouts; ``constants``
    (:func:`onnxpart.onnx_constants.small_constants`) tell the catalog which axes Slice, Pad, Resize and
    the reductions touch when those come as inputs (without them such ops are replicated only); ``device``
    (a :class:`~onnxpart.cost_models.device.DeviceSpec`, default the built-in spec the graph was costed on)
    prices each device's part of an op (:mod:`onnxpart.tile.onnx.compute`); ``sharded_outputs`` leaves the graph
    outputs in their layouts instead of gathering them."""
    shape = (devices,) if isinstance(devices, int) else tuple(devices)
    if any(p < 1 for p in shape):
        raise UserError(f"--devices must be at least 1, got {devices}")
    bandwidth = bandwidth or graph.bandwidth
    if not bandwidth:
        raise UserError("no interconnect bandwidth known for this graph: pass --mesh-bandwidth (e.g. 300GB/s)")
    mesh = meshes.make_mesh(shape, axis_names, _values(latency), _values(bandwidth))
    roofline = DeviceRoofline.of(device if device is not None else _costed_on(graph))
    memo: dict = {}  # compositions and priced choices per op signature: an LLM's layers repeat theirs
    ops = tuple(_op_var(graph, op, mesh, constants or {}, roofline, memo) for op in graph.ops)
    partial: dict[str, tuple[bool, ...]] = {}
    for op in ops:
        makes = _partial_axes(op.choices, len(shape), memo)
        for t in op.outputs:
            partial[t] = tuple(a or b for a, b in zip(partial.get(t, makes), makes))
    used = list(dict.fromkeys(t for op in ops for t in op.inputs + op.outputs))
    tensors = tuple(_tensor_var(graph, name, mesh, partial.get(name, (False,) * len(shape))) for name in used)
    inst = LayoutInstance(graph.name, mesh, tensors, ops, memory, {t.name: i for i, t in enumerate(tensors)},
                          sharded_outputs=sharded_outputs)
    if pins:
        inst = pin(inst, pins)
    if memory is not None and inst.min_memory() > memory:
        from onnxpart.units import format_bytes

        raise InfeasibleError(f"--device-memory {format_bytes(memory)} is below the smallest memory any layout "
                              f"needs per device: {format_bytes(inst.min_memory())} (every tensor in its "
                              "smallest layout)")
    return inst


def _costed_on(graph):
    """The built-in device spec the graph's analytic costs came from; UserError when it has none."""
    from onnxpart.cost_models import load_device

    try:
        return load_device(graph.device or "")
    except UserError:
        raise UserError(f"the graph's costs name no built-in device ({graph.device!r}): pass --device to price "
                        "each device's launch overhead and roofline") from None


def _values(value: float | Sequence[float]) -> tuple[float, ...]:
    return (float(value),) if isinstance(value, (int, float)) else tuple(float(v) for v in value)


def _op_var(graph, op, mesh: DeviceMesh, constants: Mapping, roofline: DeviceRoofline, memo: dict) -> OpVar:
    """One op with its catalog algorithms composed over the mesh axes (:func:`onnxpart.tile.onnx.mesh.
    compose_algorithms`), or "replicated only" (not in the catalog, coarsened, opaque, an omitted optional
    input before a given one, several outputs other than Split's, or one device). Every output of an
    algorithm takes its one output layout. ``memo``: compositions by :func:`_signature` (what the catalog
    reads of the op), and their priced choices by the signature and the op's costs, shared by ops that agree
    on them — each of an LLM's 80 layers has the same ones, and one tuple of choices serves them all."""
    raw = op.nodes[0].inputs if len(op.nodes) == 1 else op.inputs
    names = [n for n in raw if n]
    inputs = tuple(n for n in names if n in graph.tensors or n in graph.params)
    outputs = tuple(op.outputs)
    present = [i for i, n in enumerate(raw) if n]
    gap = bool(present) and "" in tuple(raw)[:present[-1]] and op.op_type not in OPTIONAL_GAPS  # slots would shift
    if (len(op.nodes) != 1 or op.opaque or len(inputs) != len(names) or gap or mesh.devices == 1
            or (len(outputs) != 1 and op.op_type != "Split")):
        return _replicated_op(graph, op, mesh, inputs, outputs)
    attrs, consts = op.nodes[0].attrs, [constants.get(n) for n in inputs]

    def per_axis(in_shapes, out_shape, p):
        algs = op_algorithms(op.op_type, attrs, in_shapes, out_shape, p, consts, present)
        if algs is None or p > 1:
            return algs
        return [a for a in algs if a.output == R and all(x == R for x in a.inputs)]  # an axis of size 1

    in_shapes, out_shapes = [_shape(graph, n) for n in inputs], [_shape(graph, t) for t in outputs]
    read = None if op.op_type in CONSTANT_FREE else _signature(consts)  # the constants the catalog reads
    key = (op.op_type, _signature(attrs), read, tuple(present), tuple(in_shapes), tuple(out_shapes))
    if key not in memo:
        memo[key] = meshes.compose_algorithms(per_axis, in_shapes, out_shapes, mesh.shape)
    if memo[key] is None:
        return _replicated_op(graph, op, mesh, inputs, outputs)
    whole = tuple(_bytes(graph, n) for n in inputs + outputs)
    dtype = _item(graph, outputs[0]).dtype
    priced = ("priced", key, whole, dtype, op.work, op.flops, op.mem_bytes)
    if priced not in memo:
        memo[priced] = _priced(memo[key], op, whole, dtype, len(outputs), mesh, roofline)
    choices = memo[priced] or _replicated_op(graph, op, mesh, inputs, outputs).choices
    return OpVar(op.name, op.op_type, inputs, outputs, choices, op.work, True)


def _replicated_op(graph, op, mesh: DeviceMesh, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> OpVar:
    """``op`` run replicated only: its one choice reads and writes every slot whole, in its one-device time."""
    rep = compose((R,) * len(mesh.shape))
    replicated = Choice("replicated", (rep,) * len(inputs), (rep,) * len(outputs), 1, op.work)
    return OpVar(op.name, op.op_type, inputs, outputs, (replicated,), op.work, False,
                 shape_computation(graph, inputs + outputs))


def _priced(composed, op, whole: tuple[int, ...], dtype: str, outputs: int, mesh: DeviceMesh,
            roofline: DeviceRoofline) -> tuple[Choice, ...]:
    """The composed algorithms (name, input layouts, output layout, divisor) as choices, each priced per device
    (:mod:`onnxpart.tile.onnx.compute`) for an op of ``op``'s costs on slots of ``whole`` bytes."""
    def seconds(ins, out, div):
        local = [mesh.per_device(b, a) for b, a in zip(whole, ins + (out,) * outputs)]
        return roofline.seconds(op, dtype, whole, local, div)

    return tuple(Choice(name, ins, (out,) * outputs, div, seconds(ins, out, div)) for name, ins, out, div in composed)


def _partial_axes(choices: tuple[Choice, ...], axes: int, memo: dict) -> tuple[bool, ...]:
    """Per mesh axis, whether some choice writes its outputs as partial sums there (each choice writes every
    output in one layout); ``memo``: answers by the choices' identity (ops that share their choices)."""
    key = ("partial", id(choices))
    if key not in memo:
        memo[key] = (choices, tuple(any(parts(c.outputs[0])[j] == P for c in choices if c.outputs)
                                    for j in range(axes)))
    return memo[key][1]


def _signature(value):
    """A hashable stand-in for node attributes (a mapping of numbers, strings and tuples) or small constants
    (numpy arrays, None): equal exactly when the values are."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _signature(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    if hasattr(value, "tobytes"):  # a numpy array or scalar
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return value


def shape_computation(graph, names: Sequence[str]) -> bool:
    """Whether every tensor an op reads and writes is an integer or boolean tensor of at most
    :data:`onnxpart.onnx_constants.LIMIT` elements — the shape arithmetic of exports (Range, Equal,
    Where, an integer ConstantOfShape): nothing worth sharding, replicated at no real cost."""
    items = [graph.tensors.get(n) or graph.params[n] for n in names]
    return bool(items) and all(item.dtype.startswith(("int", "uint", "bool")) and math.prod(item.shape) <= LIMIT
                               for item in items)


def _item(graph, name: str):
    return graph.tensors.get(name) or graph.params[name]


def _shape(graph, name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _item(graph, name).shape)


def _bytes(graph, name: str) -> int:
    return int(_item(graph, name).bytes)


def _tensor_var(graph, name: str, mesh: DeviceMesh, partial: Sequence[bool]) -> TensorVar:
    if name in graph.params:
        item, kind = graph.params[name], "weight"
    else:
        item = graph.tensors[name]
        kind = "output" if name in graph.outputs else "input" if item.producer is None else "activation"
    domain, excluded = candidate_layouts(item.shape, mesh, partial, kind)
    return TensorVar(name, tuple(item.shape), int(item.bytes), kind, domain, excluded)


def pin(inst: LayoutInstance, pins: Mapping[str, Layout]) -> LayoutInstance:
    """``inst`` with each pinned tensor's domain reduced to its pin; UserError naming the conflict."""
    tensors = list(inst.tensors)
    for name, layout in pins.items():
        if name not in inst.index:
            raise UserError(f"--pin {name}={layout}: no tensor {name!r} in the model's ops")
        t = tensors[inst.index[name]]
        if len(parts(layout)) != len(inst.mesh.shape):
            raise UserError(f"--pin {name}={layout}: give one component per mesh axis ({len(inst.mesh.shape)})")
        if layout not in t.domain:
            why = dict(t.excluded).get(str(layout), f"it is not a layout of this {len(t.shape)}-D tensor")
            raise UserError(f"--pin {name}={layout} conflicts with the tensor: {why} "
                            f"(candidates: {', '.join(map(str, t.domain))})")
        tensors[inst.index[name]] = TensorVar(t.name, t.shape, t.bytes, t.kind, (layout,), t.excluded)
    return dataclasses.replace(inst, tensors=tuple(tensors), memo={})


def parse_pins(specs: Sequence[str], axes: int = 1) -> dict[str, Layout]:
    """``--pin tensor=layout`` values -> {tensor: mesh layout} on a mesh of ``axes`` axes."""
    out = {}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        if not sep or not name:
            raise UserError(f"--pin {spec!r}: use TENSOR=LAYOUT, e.g. w_q=S(1) (S(0)R on a 2-D mesh)")
        out[name] = parse_layout(text, axes)
    return out
