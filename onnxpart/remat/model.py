"""The rematerialization instance: what the solvers see of a graph, and the budget rule. Graphs come from
:func:`onnxpart.readers.read_graph` (ONNX, costs.json, dnn-partitioning, networkx node-link).

An :class:`Instance` is an OpGraph reduced to the numbers of the Moccasin formulation (§2): for every
node a duration ``w_v`` and the tensors it outputs, for every tensor (a *value*) its size ``m`` in bytes,
producer and consumers, and an input topological order.

Memory model (the retention-interval model of the Moccasin paper, Eq. 4; the same rules as
:func:`onnxpart.memory.memory_profile`): a tensor occupies its bytes from the compute event of its
producer up to and including the compute event of its last reader; graph outputs stay to the end;
an op's *internal* bytes (coarsened ops) count at its own event only. Each output tensor of a
multi-output op has its own retention interval (they start together, at the op's event, and end at
their own last readers) — for a single-output op this is exactly the paper's ``m_v``.

Graph inputs become *input nodes*: zero-duration nodes placed first in the order that may not be
recomputed, so a graph input is resident from the start until its last use — also when that last use is
a recomputation late in the sequence. Ops that produce a graph output are computed exactly once: their
output is retained to the end anyway, so recomputing them can never help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from onnxpart import strategy
from onnxpart.certificate import LowerBound
from onnxpart.dag import Dag
from onnxpart.errors import UserError
from onnxpart.graph import OpGraph
from onnxpart.solvers import to_integers


@dataclass(frozen=True)
class Instance:
    """Numbers of one rematerialization problem. Node ids ``0..n_ops-1`` are the graph's op indices;
    ids ``n_ops..`` are input nodes (one per used graph input)."""

    name: str
    n_ops: int
    node_names: tuple[str, ...]
    durations: tuple[float, ...]  # w_v (seconds, or the unit of the graph file); 0 for input nodes
    internal: tuple[int, ...]  # bytes resident only during the node's own compute event
    node_inputs: tuple[tuple[int, ...], ...]  # value ids read
    node_outputs: tuple[tuple[int, ...], ...]  # value ids written
    value_names: tuple[str, ...]
    value_sizes: tuple[int, ...]  # m (bytes)
    value_producer: tuple[int, ...]  # node id
    value_consumers: tuple[tuple[int, ...], ...]  # node ids
    value_to_end: tuple[bool, ...]  # graph outputs: retained to the end of the sequence
    order: tuple[int, ...]  # input topological order over all nodes; input nodes first
    constant_bytes: int = 0  # added to every event (parameters with --include-params)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def input_nodes(self) -> tuple[int, ...]:
        return tuple(range(self.n_ops, self.n_nodes))

    def recomputable(self, node: int) -> bool:
        """Input nodes and producers of graph outputs are computed exactly once."""
        return node < self.n_ops and not any(self.value_to_end[x] for x in self.node_outputs[node])

    @cached_property
    def dag(self) -> Dag:
        """The node DAG (u → v when v reads a value u produces), built once per instance."""
        return Dag(self.n_nodes, [(self.value_producer[x], v) for v in range(self.n_nodes)
                                  for x in self.node_inputs[v]])

    def predecessors(self, node: int) -> np.ndarray:
        """The producers of the values ``node`` reads, ascending (a read-only view)."""
        return self.dag.predecessors(node)

    @property
    def base_duration(self) -> float:
        """Total duration without recomputation (every op once)."""
        return float(sum(self.durations[: self.n_ops]))

    def op_order(self) -> tuple[int, ...]:
        """The input order without the input nodes (what a no-recompute sequence is)."""
        return tuple(v for v in self.order if v < self.n_ops)

    def with_order(self, op_order: Sequence[int]) -> "Instance":
        """The same instance with another topological order of the ops (input nodes stay first)."""
        order = tuple(self.input_nodes) + tuple(op_order)
        if sorted(order) != list(range(self.n_nodes)):
            raise ValueError("op_order must be a permutation of the ops")
        position = {v: p for p, v in enumerate(order)}
        for v, preds in enumerate(self.dag.pred_lists):
            for u in preds:
                if position[u] >= position[v]:
                    raise ValueError(f"order is not topological: {self.node_names[u]} after {self.node_names[v]}")
        return _replace(self, order=order)

    def op_floor_bytes(self, node: int) -> int:
        """Bytes resident at any compute event of ``node``: its inputs, its outputs and internal bytes."""
        values = set(self.node_inputs[node]) | set(self.node_outputs[node])
        return sum(self.value_sizes[x] for x in values) + self.internal[node] + self.constant_bytes

    def min_budget(self) -> tuple[int, str]:
        """A restriction-free lower bound on the peak of *any* valid sequence, and why.

        Every op's inputs, outputs and internal bytes are resident at its compute event, and every graph
        output is resident at the last event."""
        best, why = 0, "nothing"
        for v in range(self.n_ops):
            need = self.op_floor_bytes(v)
            if need > best:
                best, why = need, f"op {self.node_names[v]!r} needs its inputs and outputs resident at once"
        outputs = sum(s for s, end in zip(self.value_sizes, self.value_to_end) if end) + self.constant_bytes
        if outputs > best:
            best, why = outputs, "the graph outputs are all resident at the end"
        return best, why


def _replace(instance: Instance, **changes: Any) -> Instance:
    import dataclasses

    return dataclasses.replace(instance, **changes)


def build_instance(graph: OpGraph, include_params: bool = False) -> Instance:
    """The instance of ``graph`` in its own (file) order."""
    n_ops = len(graph.ops)
    outputs = set(graph.outputs)
    used_inputs = [name for name in graph.inputs if name in graph.tensors
                   and (graph.tensors[name].consumers or name in outputs)]
    value_names = list(used_inputs) + [t for op in graph.ops for t in op.outputs if t in graph.tensors]
    value_id = {name: i for i, name in enumerate(value_names)}
    input_node = {name: n_ops + k for k, name in enumerate(used_inputs)}
    producer = [input_node[name] if name in input_node else graph.tensors[name].producer for name in value_names]
    consumers = [tuple(graph.tensors[name].consumers) for name in value_names]
    node_inputs = [tuple(value_id[t] for t in op.inputs if t in value_id) for op in graph.ops]
    node_inputs += [() for _ in used_inputs]
    node_outputs = [tuple(value_id[t] for t in op.outputs if t in value_id) for op in graph.ops]
    node_outputs += [(value_id[name],) for name in used_inputs]
    return Instance(
        name=graph.name,
        n_ops=n_ops,
        node_names=tuple(op.name for op in graph.ops) + tuple(used_inputs),
        durations=tuple(float(op.work) for op in graph.ops) + (0.0,) * len(used_inputs),
        internal=tuple(int(op.internal_bytes) for op in graph.ops) + (0,) * len(used_inputs),
        node_inputs=tuple(node_inputs),
        node_outputs=tuple(node_outputs),
        value_names=tuple(value_names),
        value_sizes=tuple(int(graph.tensors[name].bytes) for name in value_names),
        value_producer=tuple(int(p) for p in producer),
        value_consumers=tuple(consumers),
        value_to_end=tuple(name in outputs for name in value_names),
        order=tuple(input_node[name] for name in used_inputs) + tuple(range(n_ops)),
        constant_bytes=int(graph.total_param_bytes) if include_params else 0,
    )


# ------------------------------------------------------------------------------------------ budget
def resolve_budget(kind: str, value: float, baseline_peak: float) -> int:
    """Budget in whole bytes: ``floor(fraction × baseline peak)`` for a fraction, ``floor(bytes)`` else.

    The floor reproduces the Moccasin paper's budgets exactly (G1: peak 46,319 → 41,687 at 90% and
    37,055 at 80%, Table 3) and never exceeds the requested fraction."""
    if kind == "fraction":
        return int(math.floor(value * baseline_peak * (1 + 1e-12)))
    if value <= 0:
        raise UserError(f"the budget must be positive, got {value:g} bytes")
    return int(math.floor(value))


# ------------------------------------------------------------------------------ solver-side numbers
@dataclass(frozen=True)
class Scale:
    """Integer units for the solvers. Memory: sizes divided by their gcd (exact). Durations: floored to
    a quantum ``q`` (exact when all durations are integers), so ``q × (integer objective)`` never exceeds
    the true duration and a solver's proven bound stays a proven bound after scaling back."""

    memory_unit: int
    sizes: tuple[int, ...]  # value sizes in memory units
    internal: tuple[int, ...]
    quantum: float
    weights: tuple[int, ...]  # durations in quanta (floored)

    def budget_units(self, budget: float, constant_bytes: int) -> int:
        return int(math.floor((budget - constant_bytes) / self.memory_unit + 1e-9))


def scale(instance: Instance) -> Scale:
    """The solvers' integer units for ``instance`` (see :class:`Scale`): the gcd of the sizes, and a
    quantum of max(duration)/10⁶ (1 for integer durations) with the durations rounded down to it."""
    nonzero = [s for s in instance.value_sizes + instance.internal if s > 0]
    unit = math.gcd(*nonzero) if nonzero else 1
    durations = instance.durations
    if all(float(d).is_integer() for d in durations) and max(durations, default=0) < 2**40:
        quantum = 1.0
    else:
        quantum = max(max(durations, default=0.0) / 1e6, 1e-300)
    weights = tuple(to_integers(durations, rounding="down", unit=quantum)[0].tolist())
    return Scale(unit, tuple(s // unit for s in instance.value_sizes), tuple(s // unit for s in instance.internal),
                 quantum, weights)


@dataclass(kw_only=True)
class MethodResult(strategy.MethodResult):
    """What one method found on one instance: a sequence (None if none was found) and ``bound``, the proven
    lower bound on the duration under ``restriction`` (same unit as the durations). ``status``: optimal |
    time_limit | infeasible | over_budget | no_solution | heuristic | rounded; ``value`` is set to the
    sequence's simulated duration once :func:`onnxpart.remat.solve` has checked it fits."""

    sequence: tuple[int, ...] | None
    bound_status: str  # optimal | time_limit | infeasible | none
    time_to_best: float | None
    restriction: str
    solver: str
    notes: dict[str, Any] | None = None
    extra_bounds: list[LowerBound] = field(default_factory=list)  # further proven bounds, each its own entry
    profile: Any = None  # the SequenceProfile of ``sequence``, once simulated

    @property
    def feasible(self) -> bool:
        """A sequence that was simulated within the budget."""
        return self.profile is not None and self.status != "over_budget"

    @property
    def best_bound(self) -> float | None:
        """The strongest proven duration bound: ``bound`` or one of ``extra_bounds``."""
        values = [b.value for b in self.extra_bounds if b.value is not None]
        return max(values + ([self.bound] if self.bound is not None else []), default=None)
