"""Resharding on an n-D device mesh priced by the index sets it moves: the cheapest sequence of per-axis
collectives that turns every device's piece of a tensor in layout ``src`` into its piece in ``dst``.

**Index sets.** In a mesh layout (:mod:`onnxpart.tile.onnx.mesh`) device (i_0, ..., i_{k-1}) holds, along each
tensor dim d, the block numbered by its coordinates on the mesh axes whose component is ``S(d)``, read
in axis order with the first axis major: on a 2x4 mesh ``S(0)S(0)`` gives device (i, j) block 4i + j of
8, ``RS(0)`` block j of 4. A ``P`` component on axis j means the group of devices along j holds addends
of that block.

**Steps.** One step changes one axis j's component, inside every group of devices along j, by that
axis's 1-D collective (:func:`onnxpart.tile.onnx.catalog.reshard`). It moves exactly the right index sets only
when axis j is the *minor* (last) mesh axis among those splitting the dim it touches, before the step
for a dim it un-splits and after it for a dim it splits: gathering the minor digit of a block number
joins whole neighbouring blocks, gathering a major one would join blocks p_minor apart (strided pieces).
So a step is allowed when

* ``S(d) -> R`` (all-gather), ``S(d) -> P`` (free: the shard embedded in zeros): no later axis splits d;
* ``R -> S(e)`` (free: a slice), ``P -> S(e)`` (reduce-scatter): no later axis splits e;
* ``S(d) -> S(e)`` (all-to-all): both;
* ``P -> R`` (all-reduce), ``R -> P`` (free: one device keeps the value, the others zeros): always;

and every layout on the way must divide the tensor's shape. On a 1-D mesh every step is allowed and the
cheapest sequences are the catalog's single collectives. On a 2x4 mesh ``S(d)S(d) -> RS(d)`` is not
one all-gather along x (that joins blocks 4 apart): the cheapest path all-gathers along y, then along x,
and slices along y.

**Price.** A step on axis j runs its ring collective (:func:`onnxpart.tile.onnx.catalog.collective_time`, on
(a_j, B_j)) over the bytes one group holds, n / Π_{l≠j} f_l with f_l = p_l for an ``S`` component on
axis l and 1 otherwise. :func:`plan` is Dijkstra's algorithm over the layouts of the tensor (at most
(rank + 2)^axes of them), so the price is the least over every such sequence, and the steps it returns
are those :mod:`onnxpart.tile.onnx.exchange` executes under ``--verify``: what is priced is what runs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from onnxpart.tile.onnx.catalog import (P, R, Layout, S, collective_time, collective_times, collective_volume,
                                        reshard)
from onnxpart.tile.onnx.mesh import DeviceMesh, divisibility, local_shape, parts


@dataclass(frozen=True)
class Step:
    """One per-axis step: on mesh ``axis``, every group along it turns component ``before`` into ``after``
    by ``collective`` (None: local, no data moves), on ``group_bytes`` (the bytes one group holds)."""

    axis: int
    before: Layout
    after: Layout
    collective: str | None
    group_bytes: float
    seconds: float

    def volume(self, p: int) -> float:
        """Bytes each device of the group (``p`` devices) receives."""
        return 0.0 if self.collective is None else collective_volume(self.collective, self.group_bytes, p)


def allowed(components: Sequence[Layout], axis: int, after: Layout) -> bool:
    """Whether changing ``components[axis]`` into ``after`` moves exactly the right index sets (module
    docstring): the dim it un-splits or splits is split by no later mesh axis."""
    later = {a.dim for a in components[axis + 1:] if a.kind == "S"}
    before = components[axis]
    return not (before.kind == "S" and before.dim in later) and not (after.kind == "S" and after.dim in later)


def plan(src, dst, shape: Sequence[int], nbytes: float, mesh: DeviceMesh) -> tuple[Step, ...]:
    """The cheapest allowed steps turning ``src`` into ``dst`` (module docstring); () when they are equal.
    ValueError when ``dst`` cannot be reached (a layout that does not divide ``shape``)."""
    return _paths(parts(src), tuple(int(s) for s in shape), float(nbytes), mesh)[parts(dst)] if src != dst else ()


def reshard_time(src, dst, shape: Sequence[int], nbytes: float, mesh: DeviceMesh) -> float:
    """Seconds of :func:`plan` (0 when nothing moves)."""
    return sum(step.seconds for step in plan(src, dst, shape, nbytes, mesh))


def price_tables(tensors: Sequence[tuple[tuple, Sequence[int], float]], mesh: DeviceMesh) -> list[tuple[dict, np.ndarray]]:
    """For each (layouts, shape, bytes) of ``tensors``: (layout -> index, seconds[src, dst]) of
    :func:`reshard_time` between every pair of its layouts — what the searches read millions of times.
    Tensors of the same divisibility share their :func:`_transitions` and are priced together by
    :func:`_distances`, which returns the very sums :func:`plan`'s Dijkstra does; tensors that also agree on
    their bytes and layouts (an LLM's layers) share one table, the same objects. ValueError when a layout
    cannot be reached."""
    groups: dict[tuple[int, ...], dict[float, list[int]]] = {}
    divides: dict[tuple, tuple[int, ...]] = {}  # per shape
    for i, (_, shape, nbytes) in enumerate(tensors):
        if tuple(shape) not in divides:
            divides[tuple(shape)] = divisibility(shape, mesh.devices)
        groups.setdefault(divides[tuple(shape)], {}).setdefault(float(nbytes), []).append(i)
    tables: list = [None] * len(tensors)
    for key, by_bytes in groups.items():
        graph = _transitions(key, mesh)
        sizes = list(by_bytes)
        chunk = max(1, _CHUNK // len(graph.layouts) ** 2)
        for first in range(0, len(sizes), chunk):
            part = sizes[first:first + chunk]
            seconds = _distances(graph, np.array(part), mesh)
            for k, nbytes in enumerate(part):
                shared: dict = {}  # by identity: the layouts tuples are shared, and hashing one hashes every layout
                for i in by_bytes[nbytes]:
                    layouts = tensors[i][0]
                    if id(layouts) not in shared:
                        shared[id(layouts)] = _table(graph, layouts, seconds[:, k, :])
                    tables[i] = shared[id(layouts)]
    return tables


#: Floats of one :func:`_distances` call (sources × tensors × targets): 32 MB.
_CHUNK = 1 << 22


def _table(graph: "_Transitions", layouts: tuple, seconds: np.ndarray) -> tuple[dict, np.ndarray]:
    """One tensor's (layout -> index, seconds[src, dst]) from its seconds between all of ``graph``'s layouts."""
    rows = [graph.states.get(parts(a)) for a in layouts]
    if None in rows:
        raise ValueError(f"no allowed resharding reaches {layouts[rows.index(None)]}")
    matrix = seconds[np.ix_(rows, rows)]
    if not np.isfinite(matrix).all():
        src, dst = np.argwhere(~np.isfinite(matrix))[0]
        raise ValueError(f"no allowed resharding reaches {layouts[dst]} from {layouts[src]}")
    matrix.setflags(write=False)
    return {a: i for i, a in enumerate(layouts)}, matrix


def _distances(graph: "_Transitions", nbytes: np.ndarray, mesh: DeviceMesh) -> np.ndarray:
    """seconds[src, tensor, dst] of the cheapest steps between every two layouts of ``graph``, for tensors of
    ``nbytes`` at once (inf: unreached): Bellman-Ford relaxations until nothing changes. Each value is the
    least, over the step sequences, of their seconds summed in order — what :func:`_dijkstra` returns too (a
    float sum grows with its first term, so both keep the least prefix)."""
    n = len(graph.layouts)
    dist = np.full((n, len(nbytes), n), np.inf)
    for state in range(n):
        dist[state, :, state] = 0.0
    edges = [(state, new, _step_seconds(kind, nbytes / others, mesh.axes[j]))
             for state, out in enumerate(graph.edges) for j, _, new, kind, others in out]
    for _ in range(n):
        changed = False
        for state, new, seconds in edges:
            through = dist[:, :, state] + seconds
            better = through < dist[:, :, new]
            if better.any():
                dist[:, :, new] = np.where(better, through, dist[:, :, new])
                changed = True
        if not changed:
            break
    return dist


def collective_name(steps: Sequence[Step], mesh: DeviceMesh) -> str | None:
    """``all-gather`` on a 1-D mesh; ``all-gather@y+all-gather@x`` on an n-D one; None when no data moves."""
    moving = [s for s in steps if s.collective is not None]
    if not moving:
        return None
    if len(mesh.shape) == 1:
        return "+".join(s.collective for s in moving)
    return "+".join(f"{s.collective}@{mesh.names[s.axis]}" for s in moving)


class _Paths(dict):
    def __missing__(self, key):
        raise ValueError(f"no allowed resharding reaches {''.join(map(str, key))}")


@lru_cache(maxsize=1 << 14)
def _paths(src: tuple[Layout, ...], shape: tuple[int, ...], nbytes: float, mesh: DeviceMesh) -> _Paths:
    """The cheapest steps from ``src`` to every layout dividing ``shape`` (:func:`_dijkstra`; ties: fewer
    steps, then the first found, so the answer is deterministic)."""
    graph = _transitions(divisibility(shape, mesh.devices), mesh)
    start = graph.states[src]
    _, parent = _dijkstra(graph, start, nbytes, mesh)
    paths = _Paths({src: ()})
    for target, layout in enumerate(graph.layouts):
        if target in parent:
            steps, state = [], target
            while state != start:
                before, j, after = parent[state]
                steps.append(_step(graph.layouts[before], j, after, nbytes, mesh))
                state = before
            paths[layout] = tuple(reversed(steps))
    return paths


@dataclass(frozen=True)
class _Transitions:
    """The per-axis steps between the mesh layouts dividing a shape: ``layouts`` (index -> components),
    ``states`` (components -> index), and per layout its ``edges`` (axis j, component after, next index,
    collective, the product of the other axes' S sizes) in the order Dijkstra tries them."""

    layouts: tuple[tuple[Layout, ...], ...]
    states: dict
    edges: tuple[tuple[tuple[int, Layout, int, str | None, int], ...], ...]

    def reached(self, layout: tuple[Layout, ...], cost: list) -> int:
        """The index of ``layout``; ValueError when no allowed resharding reaches it."""
        index = self.states.get(layout)
        if index is None or cost[index] is None:
            raise ValueError(f"no allowed resharding reaches {''.join(map(str, layout))}")
        return index


@lru_cache(maxsize=1 << 10)
def _transitions(shape: tuple[int, ...], mesh: DeviceMesh) -> _Transitions:
    """Every layout of ``shape`` on ``mesh`` (each axis R, P or S(d) with the layout dividing the shape) and
    the allowed steps (:func:`allowed`) between them."""
    options = [R, P] + [S(d) for d in range(len(shape))]
    layouts = [c for c in itertools.product(options, repeat=len(mesh.shape))
               if local_shape(shape, c, mesh.shape) is not None]
    states = {c: i for i, c in enumerate(layouts)}
    edges = []
    for state in layouts:
        out = []
        for j, after in itertools.product(range(len(state)), options):
            new = state[:j] + (after,) + state[j + 1:]
            if after != state[j] and allowed(state, j, after) and new in states:
                others = math.prod(mesh.shape[l] for l, a in enumerate(state) if l != j and a.kind == "S")
                out.append((j, after, states[new], reshard(state[j], after), others))
        edges.append(tuple(out))
    return _Transitions(tuple(layouts), states, tuple(edges))


def _dijkstra(graph: _Transitions, start: int, nbytes: float, mesh: DeviceMesh) -> tuple[list, dict]:
    """Dijkstra from layout ``start`` over ``graph`` for a tensor of ``nbytes``: (seconds to each layout,
    None where unreached; layout -> (the one before, axis, component after) on its cheapest path, ties
    broken by fewer steps, then the first found)."""
    best: list = [None] * len(graph.layouts)
    best[start] = (0.0, 0)
    parent: dict = {start: None}
    counter = itertools.count()
    heap = [(0.0, 0, next(counter), start)]
    while heap:
        cost, length, _, state = heapq.heappop(heap)
        if (cost, length) > best[state]:
            continue
        for j, after, new, kind, others in graph.edges[state]:
            key = (cost + _seconds(kind, nbytes / others, mesh.axes[j]), length + 1)
            if best[new] is None or key < best[new]:
                best[new] = key
                parent[new] = (state, j, after)
                heapq.heappush(heap, (*key, next(counter), new))
    return [None if b is None else b[0] for b in best], parent


def _seconds(kind: str | None, group_bytes: float, axis) -> float:
    """One step's seconds: its collective on the axis's ring over the bytes one group holds (0: local)."""
    return 0.0 if kind is None else collective_time(kind, group_bytes, axis)


def _step_seconds(kind: str | None, group_bytes: np.ndarray, axis) -> np.ndarray:
    """:func:`_seconds` of many tensors' steps at once (:func:`onnxpart.tile.onnx.catalog.collective_times`)."""
    return np.zeros_like(group_bytes) if kind is None else collective_times(kind, group_bytes, axis)


def _step(state: tuple[Layout, ...], j: int, after: Layout, nbytes: float, mesh: DeviceMesh) -> Step:
    others = 1
    for l, a in enumerate(state):
        others *= mesh.shape[l] if l != j and a.kind == "S" else 1
    kind = reshard(state[j], after)
    group = nbytes / others
    return Step(j, state[j], after, kind, group, _seconds(kind, group, mesh.axes[j]))
