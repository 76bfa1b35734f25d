"""OpGraph: the one view of a model that every strategy sees.

An OpGraph holds compute ops in a topological order, the activation tensors that flow between them
(with producer, consumers and size in bytes), and the parameters each op reads. Weight generators are
not ops: initializers, ``Constant`` nodes and every node whose inputs are all constant
(``ConstantOfShape`` of a constant shape, ``Unsqueeze``/``Cast``/``Reshape`` of a weight, ...) are folded
into parameters of the ops that consume them.

Parameter attribution: a parameter read by several ops is counted once, in the ``param_bytes`` of the
first op (in topological order) that reads it — its *owner*. Every op still lists it in ``params``, so a
strategy that splits the graph can charge a copy to each part if it wants to.

This module knows nothing of protobuf beyond :func:`from_onnx` and the dtype helpers (onnx's own tables);
everything else about ONNX files lives in :mod:`onnxpart.onnx_io`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.dag import Dag
from onnxpart.dtypes import dtype_name, tensor_bytes
from onnxpart.errors import UserError

#: ops that draw random numbers: never folded even when their inputs are constant.
_RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli"}


@dataclass(frozen=True)
class TensorInfo:
    """Type of any named value in the model (activation, parameter or internal)."""

    dtype: str
    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Node:
    """One ONNX node as a cost model needs it: plain Python, no protobuf."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tensor:
    """An activation tensor: an edge of the op graph (or a graph input)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    producer: int | None  # op index; None for a graph input
    consumers: tuple[int, ...]
    transfer: float | None = None  # seconds to move it between devices, when the graph file states it
    #                                 (dnn-partitioning edge costs); None: bytes / bandwidth


@dataclass(frozen=True)
class Param:
    """A folded weight: bytes attributed once, to ``owner`` (its first consumer)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    owner: int
    consumers: tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """A compute op: one ONNX node, or several after coarsening.

    ``work`` (seconds), ``flops`` and ``mem_bytes`` are filled by a cost model; they are 0 before costing.
    """

    index: int
    name: str
    op_type: str
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]  # activation tensors read from other ops or graph inputs
    outputs: tuple[str, ...]  # activation tensors this op produces
    params: tuple[str, ...]  # parameters read (owned or not)
    param_bytes: int  # bytes of the parameters this op owns
    const_nodes: tuple[str, ...] = ()  # folded weight-generator ONNX nodes attributed to this op
    internal_bytes: int = 0  # tensors produced and consumed inside a coarsened op
    opaque: bool = False  # control flow or unknown-domain op, kept whole
    work: float = 0.0
    flops: float = 0.0
    mem_bytes: float = 0.0

    @property
    def onnx_nodes(self) -> tuple[str, ...]:
        """Names of the ONNX compute nodes this op came from, in file order."""
        return tuple(node.name for node in self.nodes)


@dataclass(frozen=True, eq=False)
class CostTable:
    """Costs per device: ``work[op, d]`` seconds of each op on device kind ``devices[d]`` (``inf``: it
    cannot run there) and ``links[(a, b)]`` bytes/second from a to b. The single-device case every
    command had so far is the one-column table of :attr:`OpGraph.costs`; schedule reads several columns,
    tile a cost per sharding choice on top."""

    devices: tuple[str, ...]
    work: np.ndarray  # shape (ops, devices)
    links: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def column(self, device: str) -> np.ndarray:
        return self.work[:, self.devices.index(device)]

    def bandwidth(self, source: str, target: str) -> float | None:
        """Bytes/second from ``source`` to ``target`` (None: no direct link)."""
        return self.links.get((source, target))


class OpGraph:
    """Compute ops in topological order, activation tensors, parameters, graph inputs and outputs.

    Immutable by convention: :meth:`with_costs` and :func:`onnxpart.coarsen.coarsen` return new graphs.
    """

    def __init__(
        self,
        name: str,
        ops: Sequence[Op],
        tensors: Mapping[str, Tensor],
        params: Mapping[str, Param],
        inputs: Sequence[str],
        outputs: Sequence[str],
        values: Mapping[str, TensorInfo] | None = None,
        model_sha256: str | None = None,
        dead_nodes: Sequence[str] = (),
        cost_model: str | None = None,
        device: str | None = None,
        bandwidth: float | None = None,
        cost_table: CostTable | None = None,
    ):
        self.name = name
        self.ops: tuple[Op, ...] = tuple(ops)
        self.tensors: dict[str, Tensor] = dict(tensors)
        self.params: dict[str, Param] = dict(params)
        self.inputs: tuple[str, ...] = tuple(inputs)
        self.outputs: tuple[str, ...] = tuple(outputs)
        self.values: dict[str, TensorInfo] = dict(values or {})
        self.model_sha256 = model_sha256
        self.dead_nodes: tuple[str, ...] = tuple(dead_nodes)
        self.cost_model = cost_model
        self.device = device
        self.bandwidth = bandwidth
        self._cost_table = cost_table
        self._index = {op.name: op.index for op in self.ops}
        self.dag = Dag(len(self.ops), [(u, v) for u, v, _ in self.edges()])

    # ----------------------------------------------------------------------------------- structure
    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={len(self.ops)}, tensors={len(self.tensors)}, params={len(self.params)})"

    def op(self, name: str) -> Op:
        return self.ops[self._index[name]]

    def predecessors(self, index: int) -> np.ndarray:
        """The ops whose tensors op ``index`` reads, ascending (a read-only view)."""
        return self.dag.predecessors(index)

    def successors(self, index: int) -> np.ndarray:
        """The ops that read a tensor of op ``index``, ascending (a read-only view)."""
        return self.dag.successors(index)

    def edges(self) -> Iterator[tuple[int, int, str]]:
        """``(producer, consumer, tensor name)`` for every op-to-op use of a tensor."""
        for tensor in self.tensors.values():
            if tensor.producer is not None:
                for consumer in tensor.consumers:
                    yield tensor.producer, consumer, tensor.name

    def to_networkx(self):
        """A ``networkx.DiGraph`` over op indices; edge attribute ``tensors`` lists the tensor names."""
        import networkx as nx

        graph = nx.DiGraph()
        for op in self.ops:
            graph.add_node(op.index, name=op.name, op_type=op.op_type, work=op.work,
                           param_bytes=op.param_bytes)
        for u, v, name in self.edges():
            if graph.has_edge(u, v):
                graph[u][v]["tensors"].append(name)
            else:
                graph.add_edge(u, v, tensors=[name])
        return graph

    @property
    def node_count(self) -> int:
        """ONNX nodes accounted for: compute nodes, folded generators and dead constant nodes."""
        return sum(len(op.nodes) + len(op.const_nodes) for op in self.ops) + len(self.dead_nodes)

    @property
    def total_param_bytes(self) -> int:
        return sum(p.bytes for p in self.params.values())

    @property
    def total_work(self) -> float:
        return sum(op.work for op in self.ops)

    @property
    def costs(self) -> CostTable:
        """Work per (op, device): the table a multi-device cost model made, or this graph's own costs as
        its one column (device ``self.device``, the inter-stage ``bandwidth`` as its one link)."""
        if self._cost_table is not None:
            return self._cost_table
        device = self.device or "device"
        links = {(device, device): self.bandwidth} if self.bandwidth else {}
        return CostTable((device,), np.array([[op.work] for op in self.ops], dtype=float).reshape(-1, 1), links)

    def with_cost_table(self, table: CostTable, device: str, cost_model: str) -> "OpGraph":
        """A copy costed on several devices; ``Op.work`` (what single-device strategies read) is the
        column of ``device``."""
        if table.work.shape[0] != len(self.ops):
            raise ValueError(f"{table.work.shape[0]} cost rows for {len(self.ops)} ops")
        costed = self.with_costs(table.column(device), cost_model=cost_model, device=device,
                                 bandwidth=table.bandwidth(device, device) or self.bandwidth)
        return costed.replace(cost_table=table)

    def with_costs(self, work: Sequence[float], flops: Sequence[float] | None = None,
                   mem_bytes: Sequence[float] | None = None, *, cost_model: str,
                   device: str | None = None, bandwidth: float | None = None) -> "OpGraph":
        """A copy with per-op costs (``work`` in seconds) filled in."""
        if len(work) != len(self.ops):
            raise ValueError(f"{len(work)} costs for {len(self.ops)} ops")
        ops = [
            dataclasses.replace(
                op,
                work=float(work[i]),
                flops=float(flops[i]) if flops is not None else op.flops,
                mem_bytes=float(mem_bytes[i]) if mem_bytes is not None else op.mem_bytes,
            )
            for i, op in enumerate(self.ops)
        ]
        return self.replace(ops=ops, cost_model=cost_model, device=device, bandwidth=bandwidth, cost_table=None)

    def replace(self, **changes: Any) -> "OpGraph":
        fields = dict(name=self.name, ops=self.ops, tensors=self.tensors, params=self.params,
                      inputs=self.inputs, outputs=self.outputs, values=self.values,
                      model_sha256=self.model_sha256, dead_nodes=self.dead_nodes,
                      cost_model=self.cost_model, device=self.device, bandwidth=self.bandwidth,
                      cost_table=self._cost_table)
        fields.update(changes)
        return OpGraph(**fields)

    def check(self) -> None:
        """Raise ``AssertionError`` if the order is not topological or the tensor index is inconsistent."""
        for tensor in self.tensors.values():
            for consumer in tensor.consumers:
                assert tensor.producer is None or tensor.producer < consumer, (
                    f"tensor {tensor.name}: producer {tensor.producer} after consumer {consumer}")
                assert tensor.name in self.ops[consumer].inputs
            if tensor.producer is not None:
                assert tensor.name in self.ops[tensor.producer].outputs
        for op in self.ops:
            assert self.ops[op.index] is op


# --------------------------------------------------------------------------------------- from_onnx
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
