"""The Pareto-set machinery of bucket elimination (:mod:`onnxpart.tile.onnx.elimination`, whose docstring
gives the method and its references): functions that map every assignment of their scope to a Pareto set of
(bytes, seconds) points, the grids that line them up in a bucket, their Minkowski sums and minimization
(:class:`Eliminator`), the outside functions that pruning reads, and the traceback of a plan."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

#: Give up once the functions hold this many Pareto points in all.
MAX_POINTS = 5_000_000
#: The most bytes of grid rows :class:`Grids` keeps (a wide elimination's took 2 GB).
CACHE_BYTES = 256 * 2**20
#: Pairs formed at once when summing two functions (bounds the temporary arrays to ~100 MB).
CHUNK = 2_000_000


class GiveUp(Exception):
    pass


@dataclass
class Function:
    """Pareto sets for every assignment of ``scope`` (row-major over the variables' domains), padded to
    one width: ``mem``/``cost`` [assignment, point], bytes ascending, seconds strictly descending, unused
    slots ``inf``. ``prov`` [assignment, point, 1 + len(sources)]: the eliminated variable's value, then the
    point's index in each summed function (None for an original term; only the value where every summed set is
    one point: their index is 0)."""

    scope: tuple[int, ...]
    mem: np.ndarray
    cost: np.ndarray
    prov: np.ndarray | None = None
    eliminated: int | None = None  # the variable minimized out to make it (None: an original term)
    sources: tuple["Function", ...] = ()



class Grids:
    """Where each function's rows sit in a bucket's grid (every assignment of the bucket's variables, the
    eliminated one varying fastest), kept across the passes (they all share one order) up to
    :data:`CACHE_BYTES`; past that, computed again when asked."""

    def __init__(self, sizes: list[int]):
        self.sizes, self.cache, self.last, self.held = sizes, {}, (None, None), 0

    def count(self, axes: tuple) -> int:
        return math.prod(self.sizes[u] for u in axes)

    def rows(self, axes: tuple, scope: tuple) -> np.ndarray:
        """The row of a function over ``scope`` for each grid row over ``axes``."""
        key = (axes, scope)
        if key in self.cache:
            return self.cache[key]
        if scope:
            if self.last[0] != axes:
                shape = tuple(self.sizes[u] for u in axes)
                self.last = (axes, np.indices(shape).reshape(len(shape), -1))
            grid = self.last[1]
            found = np.ravel_multi_index(tuple(grid[[axes.index(u) for u in scope]]),
                                         tuple(self.sizes[u] for u in scope))
        else:
            found = np.zeros(self.count(axes), dtype=np.int64)
        if self.held + found.nbytes <= CACHE_BYTES:
            self.cache[key], self.held = found, self.held + found.nbytes
        return found


def axes_of(scope: tuple, v: int | None) -> tuple:
    return scope + ((v,) if v is not None else ())


def outside(created: list[Function], grids: Grids) -> list[np.ndarray]:
    """Per created function f, out(s) = min over the rest of the network given f's scope s (module
    docstring), top-down: for f a source of g (made by minimizing v out), out_f = min over g's grid rows
    matching s of out_g + the other sources of g. Single-objective functions (one point per row)."""
    index = {id(f): k for k, f in enumerate(created)}
    outside: list[np.ndarray | None] = [None] * len(created)
    outside[-1] = np.zeros(1)
    for k in range(len(created) - 1, -1, -1):
        g = created[k]
        axes = axes_of(g.scope, g.eliminated)
        rows = [grids.rows(axes, f.scope) for f in g.sources]
        inside = [f.cost[r, 0] for f, r in zip(g.sources, rows)]
        total = outside[k][grids.rows(axes, g.scope)] + np.sum(inside, axis=0)
        for f, r, own in zip(g.sources, rows, inside):
            if id(f) in index:
                out = np.full(len(f.cost), np.inf)
                np.minimum.at(out, r, total - own)
                outside[index[id(f)]] = out
    return outside




class Eliminator:
    def __init__(self, grids: Grids, deadline: float | None, max_points: int = MAX_POINTS, prune=None):
        self.grids, self.sizes = grids, grids.sizes
        self.deadline, self.max_points, self.prune, self.points = deadline, max_points, prune, 0

    def run(self, order: list[int], leaves: list[Function]) -> list[Function]:
        """Eliminate along ``order``; every function made, the last one over no variable."""
        mentions: dict[int, dict[int, Function]] = {}  # variable -> the active functions over it
        for f in leaves:
            for u in f.scope:
                mentions.setdefault(u, {})[id(f)] = f
        created, rest = [], [f for f in leaves if not f.scope]
        for v in order:
            bucket = list(mentions.pop(v, {}).values())
            made = self.eliminate(v, bucket, len(created))
            created.append(made)
            for f in bucket:
                for u in f.scope:
                    if u != v:
                        mentions[u].pop(id(f), None)
            for u in made.scope:
                mentions[u][id(made)] = made
            if not made.scope:
                rest.append(made)
        created.append(self.eliminate(None, rest, len(created)))  # independent parts of the graph
        return created

    def eliminate(self, v: int | None, bucket: list[Function], k: int) -> Function:
        """Sum the bucket over every assignment of its scope and v's values, then minimize v out."""
        scope = tuple(sorted({u for f in bucket for u in f.scope} - {v}))
        axes = axes_of(scope, v)
        rows, count = self.grids.count(axes), (self.sizes[v] if v is not None else 1)
        if self.prune is None and all(f.cost.shape[1] == 1 and not f.mem.any() for f in bucket):
            return self._min_sum(v, bucket, scope, axes)
        bucket = sorted(bucket, key=lambda f: f.cost.shape[1])  # narrow sets first: fewer pairs early on
        entries = [self.grids.rows(axes, f.scope) for f in bucket]
        alive = np.arange(rows)  # the grid rows that still have a point
        mem, cost = np.zeros((rows, 1)), np.zeros((rows, 1))
        prov = (alive % count)[:, None, None]  # v's value: it varies fastest
        for i, (f, entry) in enumerate(zip(bucket, entries)):
            mem, cost, prov = _minkowski(mem, cost, prov, f.mem[entry[alive]], f.cost[entry[alive]])
            if self.prune is not None:
                cost = self.prune(k, alive // count, mem, cost, [(g.mem[e[alive]], g.cost[e[alive]])
                                                                for g, e in zip(bucket[i + 1:], entries[i + 1:])])
                live = np.isfinite(cost).any(axis=1)
                alive, mem, cost, prov = alive[live], mem[live], cost[live], prov[live]
        width = mem.shape[1]  # back onto the whole grid, then minimize v out
        full_mem, full_cost = np.full((rows, width), np.inf), np.full((rows, width), np.inf)
        full_prov = np.zeros((rows, width, prov.shape[2]), dtype=np.int64)
        full_mem[alive], full_cost[alive], full_prov[alive] = mem, cost, prov
        mem, cost = full_mem.reshape(-1, count * width), full_cost.reshape(-1, count * width)
        index, valid = _pareto(mem, cost)
        prov = np.take_along_axis(full_prov.reshape(-1, count * width, prov.shape[2]), index[..., None], 1)
        mem, cost = _select(mem, cost, index, valid)
        self.points += int(np.isfinite(cost).sum())
        if self.points > self.max_points or (self.deadline is not None and time.monotonic() > self.deadline):
            raise GiveUp
        return Function(scope, mem, cost, prov, v, tuple(bucket))

    def _min_sum(self, v, bucket, scope, axes) -> Function:
        """:meth:`eliminate` when every set is one point with no bytes: a sum and a minimum over v."""
        entries = [self.grids.rows(axes, f.scope) for f in bucket]
        total = np.sum([f.cost[r, 0] for f, r in zip(bucket, entries)], axis=0) if bucket else np.zeros(1)
        total = total.reshape(-1, self.sizes[v] if v is not None else 1)
        best = np.argmin(total, axis=1)
        cost = np.take_along_axis(total, best[:, None], 1)
        # v's value alone (each source's one point is its index 0), and no bytes as a view: a table of 10⁶ rows
        # keeps 16 MB, not 8·(3 + sources) MB
        return Function(scope, np.broadcast_to(0.0, cost.shape), cost, best[:, None, None], v, tuple(bucket))


def _minkowski(mem, cost, prov, mem2, cost2):
    """Row by row, the Pareto set of every sum of a point of (mem, cost) and one of (mem2, cost2); prov
    gains a column with the second point's index. Rows are done in chunks of ``CHUNK`` pairs."""
    rows, w1, w2 = mem.shape[0], mem.shape[1], mem2.shape[1]
    if rows == 0:  # no row (a scope whose grid is empty): nothing to combine
        return np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1, prov.shape[2] + 1), dtype=np.int64)
    step = max(1, CHUNK // (w1 * w2))
    parts = []
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        m = (mem[lo:hi, :, None] + mem2[lo:hi, None, :]).reshape(hi - lo, -1)
        c = (cost[lo:hi, :, None] + cost2[lo:hi, None, :]).reshape(hi - lo, -1)
        index, valid = _pareto(m, c)
        first, second = index // w2, index % w2
        p = np.concatenate([np.take_along_axis(prov[lo:hi], first[..., None], 1), second[..., None]], axis=2)
        parts.append((*_select(m, c, index, valid), p))
    width = max(part[0].shape[1] for part in parts)
    return tuple(np.concatenate([_pad(part[k], width) for part in parts]) for k in range(3))


def _pad(array: np.ndarray, width: int) -> np.ndarray:
    if array.shape[1] == width:
        return array
    extra = [(0, 0), (0, width - array.shape[1])] + [(0, 0)] * (array.ndim - 2)
    return np.pad(array, extra, constant_values=np.inf if array.dtype.kind == "f" else 0)


def _pareto(mem: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (column indices, valid): the non-dominated finite points first, bytes ascending (ties: the
    cheaper, then the first), padded to the widest row (at least one column) with ``valid`` False."""
    if mem.shape[1] == 1:
        return np.zeros(mem.shape, dtype=np.int64), np.isfinite(cost)
    order = np.lexsort((cost, mem), axis=1)
    sorted_cost = np.take_along_axis(cost, order, 1)
    before = np.minimum.accumulate(np.concatenate([np.full((len(cost), 1), np.inf), sorted_cost[:, :-1]], 1), 1)
    kept = (sorted_cost < before) & np.isfinite(sorted_cost)
    width = max(int(kept.sum(1).max(initial=0)), 1)
    first = np.argsort(~kept, axis=1, kind="stable")[:, :width]  # kept columns first, in bytes order
    return np.take_along_axis(order, first, 1), np.take_along_axis(kept, first, 1)


def _select(mem, cost, index, valid):
    """The points at ``index`` per row; invalid ones become (inf, inf)."""
    mem = np.where(valid, np.take_along_axis(mem, index, 1), np.inf)
    return mem, np.where(valid, np.take_along_axis(cost, index, 1), np.inf)


def traceback(last: Function, point: int, sizes: list[int]) -> dict[int, int]:
    """Every variable's value in the plan behind ``point`` of the final function (explicit stack)."""
    values: dict[int, int] = {}
    stack = [(last, {}, point)]
    while stack:
        f, assignment, p = stack.pop()
        if f.prov is None:
            continue  # an original term
        row = np.ravel_multi_index(tuple(assignment[u] for u in f.scope), tuple(sizes[u] for u in f.scope)) \
            if f.scope else 0
        prov = f.prov[row, p]
        if f.eliminated is not None:
            values[f.eliminated] = int(prov[0])
            assignment = {**assignment, f.eliminated: int(prov[0])}
        for k, source in enumerate(f.sources, start=1):
            stack.append((source, {u: assignment[u] for u in source.scope}, int(prov[k]) if k < len(prov) else 0))
    return values
