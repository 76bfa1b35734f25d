"""An :class:`~onnxpart.graph.OpGraph` from an ONNX graph (:func:`from_onnx`): weight generators folded
into parameters, each parameter attributed to its first reader, activation tensors with their producer
and consumers, every shape checked static, and the helpers that walk nodes' subgraphs.

This module knows nothing of protobuf beyond the node and graph fields it reads and the dtype helpers
(onnx's own tables); files are :mod:`onnxpart.onnx_io`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onnxpart.dag import Dag
from onnxpart.dtypes import dtype_name, tensor_bytes
from onnxpart.errors import UserError
from onnxpart.graph import Node, Op, OpGraph, Param, Tensor, TensorInfo

#: ops that draw random numbers: never folded even when their inputs are constant.
_RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli"}

def from_onnx(model, model_sha256: str | None = None, types: Mapping[str, Any] | None = None) -> OpGraph:
    """Build an OpGraph from an ``onnx.ModelProto`` whose nodes all have unique names.

    ``types`` (name -> :class:`onnxpart.shapes.ValueType`) are the resolved types of its values; without
    them the types the model itself states are used (a model from :func:`onnxpart.onnx_io.prepare`).
    Use :func:`onnxpart.onnx_io.load_graph` for files: it checks the file, names unnamed nodes, resolves
    ``--dim``/``--input-shape`` and every shape first.

    Raises :class:`UnknownShapeError` when a tensor's shape is still unknown, and :class:`UserError` when
    a node reads a value nothing defines.
    """
    from onnxpart.shapes import read_types

    g = model.graph
    values = _tensor_infos(types if types is not None else read_types(model))
    initializer_names = {init.name for init in g.initializer}
    graph_inputs = [vi.name for vi in g.input if vi.name not in initializer_names]
    nodes = _toposort_nodes(g.node, set(graph_inputs) | initializer_names)
    folded = _fold_generators(nodes, initializer_names)
    reads = _op_reads(folded.compute_nodes, folded.constant, graph_inputs)
    outputs = [vi.name for vi in g.output]
    tensors, kept_outputs = _activation_tensors(folded.compute_nodes, reads, values, graph_inputs, outputs)
    params, owned_bytes = _op_params(reads.params, values, len(folded.compute_nodes))
    owned_const_nodes, dead = _attribute_generators(nodes, folded, params)

    ops = []
    for index, node in enumerate(folded.compute_nodes):
        opaque = bool(subgraphs(node)) or node.domain not in ("", "ai.onnx")
        ops.append(Op(
            index=index, name=node.name, op_type=node.op_type,
            nodes=(_node_info(node),),
            inputs=tuple(reads.inputs[index]),
            outputs=tuple(kept_outputs[index]),
            params=tuple(reads.params[index]),
            param_bytes=owned_bytes[index],
            const_nodes=tuple(owned_const_nodes[index]),
            opaque=opaque,
        ))
    return OpGraph(
        name=g.name or "model", ops=ops, tensors=tensors, params=params, inputs=graph_inputs,
        outputs=outputs, values=values, model_sha256=model_sha256, dead_nodes=dead,
    )


@dataclass
class _Folded:
    """The weight generators of a model folded away (:func:`_fold_generators`)."""

    constant: set[str]  # every constant value: initializers and the outputs of generator nodes
    producer: dict[str, str]  # constant value -> generator node name
    node_inputs: dict[str, tuple[str, ...]]  # generator node name -> the values it reads
    compute_nodes: list  # the other nodes, in topological order: one op each


def _fold_generators(nodes: Sequence, initializer_names: set[str]) -> _Folded:
    """Step 1 of :func:`from_onnx`: fold weight generators. A node (of ``nodes``, in topological order)
    is constant when it has no subgraph, draws no random numbers and every input it reads is constant
    (initializers and Constant nodes start the closure)."""
    folded = _Folded(set(initializer_names), {}, {}, [])
    for node in nodes:
        has_subgraph = bool(subgraphs(node))
        real_inputs = [name for name in node.input if name]
        if (not has_subgraph and node.op_type not in _RANDOM_OPS and node.domain in ("", "ai.onnx")
                and all(name in folded.constant for name in real_inputs)):
            folded.constant.update(o for o in node.output if o)
            for out in node.output:
                if out:
                    folded.producer[out] = node.name
            folded.node_inputs[node.name] = tuple(real_inputs)
        else:
            folded.compute_nodes.append(node)
    return folded


@dataclass
class _Reads:
    """What each op reads (:func:`_op_reads`), by op index."""

    producer: dict[str, int]  # activation tensor -> the index of the op that computes it
    inputs: list[list[str]]  # the activation tensors (and graph inputs) each op reads
    params: list[list[str]]  # the constant values each op reads


def _op_reads(compute_nodes: Sequence, constant: set[str], graph_inputs: Sequence[str]) -> _Reads:
    """Step 2 of :func:`from_onnx`: one op per compute node, in topological order, with the activations
    and parameters it reads (a node with subgraphs also reads the outer-scope names they use).

    Raises :class:`UserError` when a node reads a value that nothing defines."""
    reads = _Reads({}, [], [])
    for index, node in enumerate(compute_nodes):
        names = [name for name in node.input if name]
        if subgraphs(node):
            names += [name for name in _outer_scope_names(node) if name not in names]
        acts, prms = [], []
        for name in names:
            if name in constant:
                if name not in prms:
                    prms.append(name)
            elif name in reads.producer or name in graph_inputs:
                if name not in acts:
                    acts.append(name)
            else:
                raise UserError(f"node {node.name!r} ({node.op_type}) reads {name!r}, which no node, "
                                "initializer or graph input defines: the model is invalid")
        reads.inputs.append(acts)
        reads.params.append(prms)
        for out in node.output:
            if out:
                reads.producer[out] = index
    return reads


def _activation_tensors(compute_nodes: Sequence, reads: _Reads, values: Mapping[str, TensorInfo],
                        graph_inputs: Sequence[str], outputs: Sequence[str]
                        ) -> tuple[dict[str, Tensor], list[list[str]]]:
    """Step 3 of :func:`from_onnx`: the graph inputs and activation tensors, with their shapes, producer
    and consumers, and the outputs each op keeps. Unknown dims are an error, never a zero; an output
    nobody reads (e.g. Dropout's mask) may stay untyped, and is then left out.

    Raises :class:`UnknownShapeError` when a needed tensor's shape is still unknown."""
    consumers: dict[str, list[int]] = {}
    for index, acts in enumerate(reads.inputs):
        for name in acts:
            consumers.setdefault(name, []).append(index)
    used = set(consumers) | set(outputs)
    needed = set(graph_inputs) | {p for prms in reads.params for p in prms} | (set(reads.producer) & used)
    _require_static_shapes(needed, values, graph_inputs, compute_nodes)
    kept_outputs = [[o for o in node.output if o and (o in used or _is_static(values.get(o)))]
                    for node in compute_nodes]
    tensors = {}
    for name in list(graph_inputs) + [o for outs in kept_outputs for o in outs]:
        info = values[name]
        tensors[name] = Tensor(name, info.dtype, info.shape, info.bytes, reads.producer.get(name),
                               tuple(consumers.get(name, ())))
    return tensors, kept_outputs


def _op_params(op_params: Sequence[Sequence[str]], values: Mapping[str, TensorInfo], n_ops: int
               ) -> tuple[dict[str, Param], list[int]]:
    """The parameters, each owned by the first op that reads it, and the bytes each op owns."""
    param_consumers: dict[str, list[int]] = {}
    for index, prms in enumerate(op_params):
        for name in prms:
            param_consumers.setdefault(name, []).append(index)
    params = {}
    owned_bytes = [0] * n_ops
    for name, users in param_consumers.items():
        info = values[name]
        params[name] = Param(name, info.dtype, info.shape, info.bytes, users[0], tuple(users))
        owned_bytes[users[0]] += info.bytes
    return params, owned_bytes


def _attribute_generators(nodes: Sequence, folded: _Folded, params: Mapping[str, Param]
                          ) -> tuple[list[list[str]], list[str]]:
    """Step 4 of :func:`from_onnx`: attribute each folded generator node to the owner of the first
    parameter (in owner order) that needs it. Returns the generator nodes each op owns, and the dead
    generator nodes that no parameter needs (both in the order of ``nodes``)."""
    const_owner: dict[str, int] = {}
    for name in sorted(params, key=lambda p: params[p].owner):
        stack = [name]
        while stack:
            value = stack.pop()
            gen = folded.producer.get(value)
            if gen is None or gen in const_owner:
                continue
            const_owner[gen] = params[name].owner
            stack.extend(folded.node_inputs[gen])
    owned_const_nodes: list[list[str]] = [[] for _ in folded.compute_nodes]
    dead = []
    for node in nodes:
        if node.name in folded.node_inputs:
            if node.name in const_owner:
                owned_const_nodes[const_owner[node.name]].append(node.name)
            else:
                dead.append(node.name)
    return owned_const_nodes, dead


def _tensor_infos(types: Mapping[str, Any]) -> dict[str, TensorInfo]:
    """``ValueType`` per name -> ``TensorInfo``; an unknown dim is -1 (and the size 0)."""
    values = {}
    for name, vt in types.items():
        shape = tuple(vt.dims) if vt.dims is not None else (-1,)
        size = tensor_bytes(vt.elem_type, shape) if -1 not in shape else 0
        values[name] = TensorInfo(dtype_name(vt.elem_type) if vt.elem_type else "unknown", shape, size)
    return values


class UnknownShapeError(UserError):
    """Tensors whose shape stayed unknown; ``unknown`` lists ``(name, "[?,3,…]")`` in topological order
    (the first is the root: the others may follow from it); ``dims`` are the symbolic dims fixed."""

    def __init__(self, unknown: list[tuple[str, str]], dims: Mapping[str, int] | None = None):
        self.unknown = unknown
        self.dims = dict(dims or {})
        shown = ", ".join(f"{name!r} {info}" for name, info in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        super().__init__(f"unknown shape after shape inference: {shown}{more}; pass --input-shape "
                         f"{unknown[0][0]}=DIMS with its real dims")


def _require_static_shapes(names: set[str], values: Mapping[str, TensorInfo], graph_inputs: Sequence[str],
                           nodes: Sequence[Any]) -> None:
    """Raise :class:`UnknownShapeError` listing the unknown ``names`` in topological order."""
    order = list(graph_inputs) + [name for node in nodes for name in list(node.input) + list(node.output) if name]
    seen: set[str] = set()
    unknown = []
    for name in order:
        if name in names and name not in seen and (name not in values or -1 in values[name].shape):
            unknown.append((name, _shape_text(values.get(name))))
        seen.add(name)
    if unknown:
        raise UnknownShapeError(unknown)


def _is_static(info: TensorInfo | None) -> bool:
    return info is not None and -1 not in info.shape


def _shape_text(info: TensorInfo | None) -> str:
    if info is None:
        return "[no type]"
    return "[" + ",".join("?" if d < 0 else str(d) for d in info.shape) + "]"


def _toposort_nodes(nodes, available: set[str]):
    """Nodes in a topological order, as close to the file's order as possible. Valid ONNX files are
    already sorted; this makes unsorted ones work too."""
    nodes = list(nodes)
    produced_by = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                produced_by[out] = i
    edges = []
    for i, node in enumerate(nodes):
        reads = [n for n in node.input if n]
        if subgraphs(node):
            reads += _outer_scope_names(node)
        edges += [(produced_by[n], i) for n in reads if n in produced_by and n not in available]
    if all(u < v for u, v in edges):
        return nodes
    try:
        return [nodes[i] for i in Dag(len(nodes), edges).topological_order().tolist()]
    except ValueError:
        raise UserError("the model's graph has a cycle: it is not a valid ONNX model") from None


def _outer_scope_names(node) -> list[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies, recursively) read from the enclosing scope."""
    names: list[str] = []

    def visit(graph, defined: set[str]) -> None:
        local = set(defined) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
        for inner in graph.node:
            for name in inner.input:
                if name and name not in local and name not in names:
                    names.append(name)
            for sub in subgraphs(inner):
                visit(sub, local)
            local.update(o for o in inner.output if o)

    for sub in subgraphs(node):
        visit(sub, set())
    return names


def subgraphs(node) -> list:
    """The graphs ``node`` holds as attributes (If branches, Loop/Scan bodies), not the ones nested in them."""
    bodies = []
    for attr in node.attribute:
        if attr.type == 5:  # GRAPH
            bodies.append(attr.g)
        elif attr.type == 10:  # GRAPHS
            bodies.extend(attr.graphs)
    return bodies


def _node_info(node) -> Node:
    from onnx import helper

    attrs = {}
    for attr in node.attribute:
        if attr.type in (5, 10):  # subgraphs stay in the file; cost models see only their presence
            attrs[attr.name] = "<graph>"
            continue
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, list):
            value = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
            value = tuple(v if isinstance(v, (int, float, str)) else repr(v) for v in value)
        elif not isinstance(value, (int, float, str)):
            value = repr(value)[:64]
        attrs[attr.name] = value
    return Node(node.name, node.op_type, node.domain or "", tuple(node.input), tuple(o for o in node.output), attrs)
