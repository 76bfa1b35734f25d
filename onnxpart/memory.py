"""Activation memory of an execution order (the retention-interval model of the Moccasin paper, Eq. 4).

A tensor is retained from the event of the op that produces it up to and including the event of its last
consumer. Graph inputs are retained from the first event until their last use; graph outputs until the
end. At the compute event of op ``v`` memory is the sum of the sizes of every retained tensor — including
``v``'s inputs and ``v``'s new outputs. Parameters are excluded unless ``include_params`` (then all
parameter bytes are added to every event: they are resident for the whole run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.graph import OpGraph


@dataclass(frozen=True)
class MemoryProfile:
    order: tuple[int, ...]  # op indices in execution order
    memory: tuple[float, ...]  # bytes retained at each event
    peak: float
    peak_event: int  # position in ``order`` where the peak is reached


def memory_profile(graph: OpGraph, order: Sequence[int] | None = None, include_params: bool = False) -> MemoryProfile:
    """Memory at each compute event of ``order`` (default: the graph's own topological order)."""
    order = tuple(range(len(graph.ops))) if order is None else tuple(order)
    n = len(order)
    if n == 0:
        return MemoryProfile((), (), 0.0, 0)
    position = np.full(len(graph.ops), -1, dtype=np.int64)
    position[list(order)] = np.arange(n)
    if (position < 0).any() or len(set(order)) != n:
        raise ValueError("order must be a permutation of the graph's ops")
    delta = np.zeros(n + 1)
    outputs = set(graph.outputs)
    for tensor in graph.tensors.values():
        start = 0 if tensor.producer is None else int(position[tensor.producer])
        uses = [int(position[c]) for c in tensor.consumers]
        end = n - 1 if tensor.name in outputs else max(uses, default=start)
        if tensor.producer is None and not uses and tensor.name not in outputs:
            continue  # an unused graph input occupies nothing we schedule
        delta[start] += tensor.bytes
        delta[end + 1] -= tensor.bytes
    memory = np.cumsum(delta[:n])
    internal = np.array([graph.ops[i].internal_bytes for i in order], dtype=float)
    memory = memory + internal
    if include_params:
        memory = memory + graph.total_param_bytes
    peak_event = int(np.argmax(memory))
    return MemoryProfile(order, tuple(float(m) for m in memory), float(memory[peak_event]), peak_event)
