"""The MTPP instance: what the partition algorithms see, and the block cost of Eqs. (1)–(3).

Archer et al., "Practical Performance Guarantees for Pipelined DNN Inference" (ICML 2024), Section 2:
a block S pays

    f(S) = io(V∖S, S) + Σ_{v∈S} work(v) + overflow(S) + io(S, V∖S)                      (Eq. 3)

where io counts every tensor that crosses the block boundary **once per direction**, however many
consumers it has on the other side (Eq. 1), priced at ``transfer = bytes / bandwidth`` (or at the
tensor's own transfer time where the graph file states one: dnn-partitioning edge costs), and
``overflow(S) = (param_bytes(S) − M)⁺ / B`` streams the parameters that do not fit in the stage's fast
memory M (Eq. 2). Activations are assumed to have their own reserved buffer (the paper's Section 3
simplification), so M is the fast memory left for parameters; overflow is off unless M is given.

Graph inputs and outputs are free: they are not produced/consumed by an op of V, exactly as in the
paper's Eq. (1) and in the dnn-partitioning artifact (Tarnawski et al., NeurIPS 2020), so results are
comparable with that artifact's optima.

An instance comes from an :class:`~onnxpart.graph.OpGraph` (:func:`from_graph`), whatever file that was
read from (:func:`onnxpart.readers.read_graph`: ONNX, costs.json, the dnn-partitioning artifact's JSON
graphs, node-link graphs).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from onnxpart.dag import Dag
from onnxpart.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instance:
    """A costed DAG in topological order (op ``i`` only reads tensors of ops ``< i``).

    Tensors are the op outputs that some *other* op reads; ``consumers(t)`` are op indices.
    """

    name: str
    op_names: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]  # ONNX nodes (or artifact node names) behind each op
    work: np.ndarray  # (n,) seconds
    params: np.ndarray  # (n,) parameter bytes owned by each op
    tensor_names: tuple[str, ...]
    producer: np.ndarray  # (T,) op index
    cons_ptr: np.ndarray  # (T+1,) CSR pointers into cons_idx
    cons_idx: np.ndarray  # consumer op indices, sorted per tensor
    transfer: np.ndarray  # (T,) seconds to move the tensor between stages
    bandwidth: float | None = None  # bytes/s (prices overflow)
    stage_memory: float | None = None  # bytes of fast memory per stage for parameters (None: no overflow)

    @property
    def n(self) -> int:
        return len(self.work)

    @property
    def num_tensors(self) -> int:
        return len(self.producer)

    def consumers(self, t: int) -> np.ndarray:
        return self.cons_idx[self.cons_ptr[t]:self.cons_ptr[t + 1]]

    @cached_property
    def dag(self) -> Dag:
        """The op DAG (an edge u → v when v reads a tensor of u), built once per instance."""
        counts = np.diff(self.cons_ptr)
        return Dag(self.n, np.stack([np.repeat(self.producer, counts), self.cons_idx], axis=1))

    def edges(self) -> np.ndarray:
        """Distinct ``(u, v)`` op pairs joined by at least one tensor, sorted, shape (m, 2) (read-only)."""
        return self.dag.edges

    def predecessors(self) -> list[np.ndarray]:
        """Every op's predecessors, ascending (read-only views of the DAG's CSR arrays)."""
        return [self.dag.predecessors(v) for v in range(self.n)]

    def successors(self) -> list[np.ndarray]:
        """Every op's successors, ascending (read-only views of the DAG's CSR arrays)."""
        return [self.dag.successors(u) for u in range(self.n)]

    def overflow(self, param_bytes: np.ndarray | float) -> np.ndarray | float:
        """Eq. (2) without the activation peak: ``(param_bytes − M)⁺ / B`` (0 when M is not set)."""
        if self.stage_memory is None:
            return np.zeros_like(param_bytes, dtype=float) if isinstance(param_bytes, np.ndarray) else 0.0
        return np.maximum(np.asarray(param_bytes, dtype=float) - self.stage_memory, 0.0) / self.bandwidth

    def digest(self) -> str:
        """sha256 of the numbers that define the instance (work, params, tensors, M, B)."""
        h = hashlib.sha256()
        for array in (self.work, self.params, self.producer, self.cons_ptr, self.cons_idx, self.transfer):
            h.update(np.ascontiguousarray(array).tobytes())
        h.update(repr((self.op_names, self.stage_memory, self.bandwidth)).encode())
        return h.hexdigest()


@dataclass(frozen=True)
class BlockCost:
    """The terms of Eq. (3) for one block."""

    work: float
    io_in: float
    io_out: float
    overflow: float
    params: float

    @property
    def cost(self) -> float:
        return self.io_in + self.work + self.overflow + self.io_out


def block_costs(inst: Instance, assignment: Sequence[int], k: int) -> list[BlockCost]:
    """Eq. (3) for every block of ``assignment`` (op -> block in 0..k-1), computed from scratch.

    Each tensor is paid once as output by its producer's block if any consumer lies elsewhere, and once
    as input by every *other* block holding at least one of its consumers (Eq. 1).
    """
    assign = np.asarray(assignment, dtype=np.int64)
    work = np.bincount(assign, weights=inst.work, minlength=k)
    params = np.bincount(assign, weights=inst.params, minlength=k)
    io_in = np.zeros(k)
    io_out = np.zeros(k)
    for t in range(inst.num_tensors):
        home = assign[inst.producer[t]]
        blocks = set(assign[inst.consumers(t)].tolist()) - {home}
        if blocks:
            io_out[home] += inst.transfer[t]
            for b in blocks:
                io_in[b] += inst.transfer[t]
    over = inst.overflow(params)
    return [BlockCost(float(work[b]), float(io_in[b]), float(io_out[b]), float(over[b]), float(params[b]))
            for b in range(k)]


def bottleneck(inst: Instance, assignment: Sequence[int], k: int) -> float:
    return max(c.cost for c in block_costs(inst, assignment, k))


def check_assignment(inst: Instance, assignment: Sequence[int], k: int) -> None:
    """Raise ValueError unless every op is in a block of 0..k-1 and no edge goes to an earlier block
    (blocks numbered in DAG order, hence an acyclic quotient graph)."""
    assign = np.asarray(assignment, dtype=np.int64)
    if assign.shape != (inst.n,) or (inst.n and (assign.min() < 0 or assign.max() >= k)):
        raise ValueError("assignment must give every op a block in 0..k-1")
    edges = inst.edges()
    if len(edges) and (assign[edges[:, 0]] > assign[edges[:, 1]]).any():
        raise ValueError("an edge goes from a later block to an earlier one")


# ------------------------------------------------------------------------------------------ builders
def _csr(consumers: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(consumers) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(c) for c in consumers])
    idx = np.array([v for c in consumers for v in sorted(c)], dtype=np.int64)
    return ptr, idx


def from_graph(graph, bandwidth: float | None = None, stage_memory: float | None = None) -> Instance:
    """MTPP instance of a costed OpGraph: one op per OpGraph op, one tensor per op output that another
    op reads. A tensor's transfer time is its own :attr:`~onnxpart.graph.Tensor.transfer` where the graph
    file states one (dnn-partitioning edge costs), else ``bytes / bandwidth`` (``bandwidth`` overrides
    the graph's, i.e. the device spec's interconnect); the bandwidth also prices ``stage_memory`` overflow."""
    bw = bandwidth if bandwidth is not None else graph.bandwidth
    bw = float(bw) if bw and bw > 0 else None
    names, producer, consumers, transfer = [], [], [], []
    for tensor in graph.tensors.values():
        if tensor.producer is None:
            continue  # graph inputs are free (paper's convention)
        users = sorted(set(tensor.consumers) - {tensor.producer})
        if not users:
            continue  # graph outputs / unused: nothing crosses
        if tensor.transfer is None and bw is None:
            raise UserError("no interconnect bandwidth known for this graph: pass --bandwidth (e.g. 25GB/s)")
        names.append(tensor.name)
        producer.append(tensor.producer)
        consumers.append(users)
        transfer.append(tensor.transfer if tensor.transfer is not None else tensor.bytes / bw)
    if stage_memory is not None and bw is None:
        raise UserError("--stage-memory needs --bandwidth to price the overflow (this graph states transfer "
                        "times, not a bandwidth)")
    ptr, idx = _csr(consumers)
    return Instance(
        name=graph.name, op_names=tuple(op.name for op in graph.ops),
        members=tuple(op.onnx_nodes for op in graph.ops),
        work=np.array([op.work for op in graph.ops], dtype=float),
        params=np.array([op.param_bytes for op in graph.ops], dtype=float),
        tensor_names=tuple(names), producer=np.array(producer, dtype=np.int64), cons_ptr=ptr, cons_idx=idx,
        transfer=np.array(transfer, dtype=float), bandwidth=bw, stage_memory=stage_memory,
    )


def simple_lower_bound(inst: Instance, k: int) -> float:
    """Lemma 3.3, with the overflow of Eq. (2) added where ``--stage-memory`` is set.

    ``max(max_v work(v) + overflow({v}), (Σ work + (Σ params − k·M)⁺ / B) / k) ≤ OPT``: the block holding
    v costs at least its work and overflow, and the k block costs sum to at least the total work plus the
    total overflow, which by convexity of ``(·)⁺`` is at least ``(Σ params − k·M)⁺ / B``.
    """
    if inst.n == 0:
        return 0.0
    single = float(np.max(inst.work + inst.overflow(inst.params)))
    total = float(inst.work.sum())
    if inst.stage_memory is not None:
        total += max(float(inst.params.sum()) - k * inst.stage_memory, 0.0) / inst.bandwidth
    return max(single, total / k)


def work_lower_bound(inst: Instance, k: int) -> float:
    """Lemma 3.3 proper (Eq. 13): some block holds at least ``max(max work, Σ work / k)`` of work. This,
    not :func:`simple_lower_bound`, is the L of Eq. (14)."""
    return max(float(inst.work.max()), float(inst.work.sum()) / k) if inst.n else 0.0
