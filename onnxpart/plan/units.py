"""The units of the plan family: the model's ops, in its topological order, cut into at most ``max_units``
consecutive runs; a stage is a run of consecutive units.

Where the model has more ops than units, the cuts follow the work and the tensors: cut ``k`` lies within half a
unit's ops of the position where the work before it is ``k / L`` of the whole, at the position there whose
crossing activations (tensors made before it and read at or after it, weights and graph inputs excluded) weigh
the fewest bytes, the nearest to the target among equals. On a transformer the cuts land between layers, where
only the residual stream (and the tables every layer reads) cross. With ``max_units`` at least the op count
every op is a unit and the family holds every cut of the order.

The certificate's family is "stages are runs of these units": its bound covers exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxpart.graph import OpGraph

#: The default number of units: cuts at 64 places let a pipeline of up to 64 stages balance within a unit.
MAX_UNITS = 64


@dataclass(frozen=True)
class Units:
    """``bounds[u] .. bounds[u + 1]`` are the op indices of unit ``u``; ``crossing[p]`` the activation bytes
    crossing cut position ``p`` (0 .. ops)."""

    bounds: tuple[int, ...]
    crossing: np.ndarray

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    def ops(self, first: int, last: int) -> range:
        """The op indices of units ``first .. last - 1``."""
        return range(self.bounds[first], self.bounds[last])

    def cut_bytes(self, unit: int) -> float:
        """The activation bytes crossing the cut before unit ``unit``."""
        return float(self.crossing[self.bounds[unit]])


def crossing_bytes(graph: OpGraph) -> np.ndarray:
    """Bytes of the activations crossing each cut position of the graph's op order (module docstring)."""
    n = len(graph.ops)
    delta = np.zeros(n + 2)
    for tensor in graph.tensors.values():
        if tensor.producer is None or not tensor.consumers:
            continue
        last = max(tensor.consumers)
        if last > tensor.producer:
            delta[tensor.producer + 1] += tensor.bytes
            delta[last + 1] -= tensor.bytes
    return np.cumsum(delta)[:n + 1]


def make_units(graph: OpGraph, max_units: int = MAX_UNITS) -> Units:
    """The units of ``graph`` (module docstring)."""
    n = len(graph.ops)
    crossing = crossing_bytes(graph)
    count = max(1, min(n, max_units))
    if count == n:
        return Units(tuple(range(n + 1)), crossing)
    work = np.cumsum([0.0] + [max(op.work, 0.0) for op in graph.ops])
    if work[-1] <= 0:
        work = np.arange(n + 1, dtype=float)
    window = max(1, n // (2 * count))
    bounds = [0]
    for k in range(1, count):
        target = int(np.searchsorted(work, work[-1] * k / count))
        low = max(bounds[-1] + 1, target - window)
        high = min(n - (count - k), target + window)
        if low > high:
            low = high = max(bounds[-1] + 1, min(target, n - (count - k)))
        candidates = np.arange(low, high + 1)
        best = candidates[np.lexsort((np.abs(candidates - target), crossing[candidates]))[0]]
        bounds.append(int(best))
    bounds.append(n)
    return Units(tuple(bounds), crossing)
