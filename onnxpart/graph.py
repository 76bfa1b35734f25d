"""OpGraph: the one view of a model that every strategy sees.

An OpGraph holds compute ops in a topological order, the activation tensors that flow between them
(with producer, consumers and size in bytes), and the parameters each op reads. Weight generators are
not ops: initializers, ``Constant`` nodes and every node whose inputs are all constant
(``ConstantOfShape`` of a constant shape, ``Unsqueeze``/``Cast``/``Reshape`` of a weight, ...) are folded
into parameters of the ops that consume them.

Parameter attribution: a parameter read by several ops is counted once, in the ``param_bytes`` of the
first op (in topological order) that reads it — its *owner*. Every op still lists it in ``params``, so a
strategy that splits the graph can charge a copy to each part if it wants to.

This module is the data model alone; :mod:`onnxpart.graph_from_onnx` builds one from an ONNX graph
(folding, parameter attribution, shape checks), and everything else about ONNX files lives in
:mod:`onnxpart.onnx_io`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.dag import Dag


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
