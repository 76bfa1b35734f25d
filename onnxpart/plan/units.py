"""The units of the plan family: the model's ops, in its topological order, cut into at most ``max_units``
consecutive runs; a stage is a run of consecutive units.

Where the model has more ops than units, the cuts go where the fewest activation bytes cross (tensors made
before the position and read at or after it; weights and graph inputs excluded). The *natural* cuts are the
positions at the least crossing level (within :data:`NEAR`) that is reached in at least :data:`NATURAL` of the
``max_units`` equal-work spans (:func:`_natural_cuts`) — a transformer's layer boundaries, where only the
residual stream and the tables every layer reads cross. When there are natural cuts they are the cuts (the
ones nearest the equal-work targets when there are more); else cut ``k`` lies within half a unit's ops of the
position where the work before it is ``k / L`` of the whole, at the least crossing there, the nearest to the
target among equals. Cuts where little crosses keep the units' bounds tight: a unit prices its own
reshardings, not those across its edges. With ``max_units`` at least the op count every op is a unit and the
family holds every cut of the order.

The certificate's family is "stages are runs of these units": its bound covers exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxpart.graph import OpGraph

#: The default number of units: cuts at 64 places let a pipeline of up to 64 stages balance within a unit.
MAX_UNITS = 64
#: In how many equal-work spans the least crossing level must be reached for its positions to be the cuts.
NATURAL = 8
#: Crossings within this relative margin of the least tie with it (an exporter's shape scalars, 8 bytes each,
#: cross some layer boundaries and not others).
NEAR = 0.01


@dataclass(frozen=True)
class Units:
    """``bounds[u] .. bounds[u + 1]`` are the op indices of unit ``u``; ``crossing[p]`` the activation bytes
    crossing cut position ``p`` (0 .. ops)."""

    bounds: tuple[int, ...]
    crossing: np.ndarray
    needed: np.ndarray  # per unit: bytes a stage starting there receives (:func:`needed_bytes`)

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
        return Units(tuple(range(n + 1)), crossing, needed_bytes(graph, tuple(range(n + 1))))
    work = np.cumsum([0.0] + [max(op.work, 0.0) for op in graph.ops])
    if work[-1] <= 0:
        work = np.arange(n + 1, dtype=float)
    targets = [int(np.searchsorted(work, work[-1] * k / count)) for k in range(1, count)]
    natural = _natural_cuts(crossing, work, count)
    if len(natural) >= NATURAL:
        chosen = natural if len(natural) < count else \
            np.unique([natural[np.abs(natural - t).argmin()] for t in targets])
        bounds = (0, *map(int, chosen), n)
    else:
        bounds = _windowed(crossing, targets, n, count)
    return Units(bounds, crossing, needed_bytes(graph, bounds))


def _natural_cuts(crossing: np.ndarray, work: np.ndarray, count: int) -> np.ndarray:
    """The positions crossed by the fewest activation bytes (within :data:`NEAR`) at the least level reached
    across :data:`NATURAL` of the ``count`` equal-work spans, among positions with at least half a span's
    work on either side (cutting elsewhere balances nothing). A transformer's layer boundaries: before the
    first layer and after the last, the rotary and mask tables every layer reads do not cross, so a handful of
    positions there cross less, but all within one or two spans."""
    span = work[-1] / count
    positions = np.arange(1, len(crossing) - 1)
    eligible = positions[(work[positions] >= span / 2) & (work[-1] - work[positions] >= span / 2)]
    spans: set[int] = set()
    for p in eligible[np.argsort(crossing[eligible], kind="stable")]:
        spans.add(int(work[p] // span))
        if len(spans) >= NATURAL:
            return eligible[crossing[eligible] <= crossing[p] * (1 + NEAR)]
    return eligible[:0]


def _windowed(crossing: np.ndarray, targets: list[int], n: int, count: int) -> tuple[int, ...]:
    """Cut ``k`` at the least crossing within half a unit's ops of its target (module docstring)."""
    window = max(1, n // (2 * count))
    bounds = [0]
    for k, target in enumerate(targets, start=1):
        low = max(bounds[-1] + 1, target - window)
        high = min(n - (count - k), target + window)
        if low > high:
            low = high = max(bounds[-1] + 1, min(target, n - (count - k)))
        candidates = np.arange(low, high + 1)
        bounds.append(int(candidates[np.lexsort((np.abs(candidates - target), crossing[candidates]))[0]]))
    return (*bounds, n)


def needed_bytes(graph: OpGraph, bounds: tuple[int, ...]) -> np.ndarray:
    """Per unit, the bytes of the activations made before it that its ops read: what a stage starting there
    must receive (every one arrives whole at least once among its devices)."""
    unit_of = np.searchsorted(np.asarray(bounds), np.arange(len(graph.ops)), side="right") - 1
    need = np.zeros(len(bounds) - 1)
    for tensor in graph.tensors.values():
        if tensor.producer is None:
            continue
        home = unit_of[tensor.producer]
        for u in {int(unit_of[c]) for c in tensor.consumers if unit_of[c] > home}:
            need[u] += tensor.bytes
    return need
