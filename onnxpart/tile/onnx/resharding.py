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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from onnxpart.tile.onnx.catalog import P, R, Layout, S, collective_time, collective_volume, reshard
from onnxpart.tile.onnx.mesh import DeviceMesh, local_shape, parts


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


@lru_cache(maxsize=1 << 12)
def price_table(layouts: tuple, shape: tuple[int, ...], nbytes: float, mesh: DeviceMesh) -> tuple[dict, np.ndarray]:
    """(layout -> index, seconds[src, dst]) of :func:`reshard_time` between every pair of ``layouts``, at once
    (what the searches read millions of times); shared by every tensor of the same shape and size."""
    index = {a: i for i, a in enumerate(layouts)}
    matrix = np.array([[reshard_time(a, b, shape, nbytes, mesh) for b in layouts] for a in layouts], dtype=float)
    matrix.setflags(write=False)
    return index, matrix


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
    """Dijkstra from ``src`` over the layouts dividing ``shape``: the cheapest steps to each (ties: fewer
    steps, then the first found, so the answer is deterministic)."""
    options = [R, P] + [S(d) for d in range(len(shape))]
    best: dict[tuple, tuple[float, int]] = {src: (0.0, 0)}
    paths = _Paths({src: ()})
    counter = itertools.count()
    heap = [(0.0, 0, next(counter), src)]
    while heap:
        cost, length, _, state = heapq.heappop(heap)
        if (cost, length) > best[state]:
            continue
        for j, after in itertools.product(range(len(state)), options):
            if after == state[j] or not allowed(state, j, after):
                continue
            new = state[:j] + (after,) + state[j + 1:]
            if local_shape(shape, new, mesh.shape) is None:
                continue
            step = _step(state, j, after, nbytes, mesh)
            key = (cost + step.seconds, length + 1)
            if new not in best or key < best[new]:
                best[new] = key
                paths[new] = paths[state] + (step,)
                heapq.heappush(heap, (*key, next(counter), new))
    return paths


def _step(state: tuple[Layout, ...], j: int, after: Layout, nbytes: float, mesh: DeviceMesh) -> Step:
    others = 1
    for l, a in enumerate(state):
        others *= mesh.shape[l] if l != j and a.kind == "S" else 1
    kind = reshard(state[j], after)
    group = nbytes / others
    seconds = 0.0 if kind is None else collective_time(kind, group, mesh.axes[j])
    return Step(j, state[j], after, kind, group, seconds)
