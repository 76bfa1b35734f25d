"""Proven-optimal layouts by multi-objective bucket elimination, before (and instead of) CP-SAT.

The dominance-reduced instance (:mod:`onnxpart.tile.reduce`) is a cost network over two kinds of
variables: a tensor's layout (its kept domain) and an op's algorithm (its kept choices). The step time is
a sum of unary terms (an op's compute, work / divisor) and pairwise terms (op o's slots on tensor t: the
collective from t's layout to what the algorithm reads, or from what it writes to t's layout); with
``--device-memory`` each tensor's layout also adds its bytes per device to a second sum, bounded by M.

**Elimination.** Bucket elimination (Dechter, "Bucket elimination: a unifying framework for reasoning",
Artificial Intelligence 113, 1999) removes the variables one by one along a min-fill order: the functions
that mention v are summed and v is minimized out, leaving one function over their other variables. With
the memory sum every function maps an assignment of its scope to a *Pareto set* of (bytes, seconds)
points (Rollon & Larrosa, "Bucket elimination for multiobjective optimization problems", Journal of
Heuristics 12, 2006): summing two functions is the Minkowski sum of their sets, minimizing v out is the
union over v's values, and a point that another beats on both sums is dropped — adding the same rest to
both keeps it beaten. At the end the cheapest point within M is the optimum; each point's stored
provenance gives back the layouts. Without a memory bound every set is one point (min-sum elimination).

**Pruning** (Beasley & Christofides, "An algorithm for the resource constrained shortest path problem",
Networks 19, 1989: Lagrangian bounds on the labels of a resource-constrained dynamic program). For any
λ ≥ 0 the rest of a plan — the terms outside a function f, given f's scope assignment s — costs at least
``out_λ(s) − λ·(its bytes)``, where ``out_λ`` is the exact minimum of the rest's seconds + λ·bytes given
s: the *outside* function of a min-sum elimination of the weighted network along the same order
(computed top-down from the inside functions, as in junction-tree message passing). A plan within M
whose f-part is the point (m, c) therefore costs at least ``c + λ·m + out_λ(s) − λ·M``; the point is
dropped when that exceeds the incumbent's step time (a real plan's, so an optimum is never dropped), or
when ``m + out_bytes(s) > M`` (the least bytes the rest can take). λ = 0 and the Lagrangian dual's λ*
(bisection on the memory of the weighted optimum, the dual's supergradient) are both applied; the dual's
value max_λ L(λ) is itself a proven lower bound (:attr:`Elimination.lagrangian`).

The work is the size of the largest function, Π domain sizes over a scope, times its sets: fine when the
graph's induced width is small (transformer stacks, CNNs: 2 here), hopeless otherwise. :func:`solve`
refuses an order whose largest table exceeds ``max_table`` and gives up at ``deadline`` or past
``max_points`` stored points, returning None; CP-SAT then works alone.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from dataclasses import dataclass

import networkx as nx
import numpy as np

from onnxpart.tile.onnx_model import LayoutInstance
from onnxpart.tile.reduce import Reduced

#: Refuse an elimination order whose largest function has more assignments than this.
MAX_TABLE = 1_000_000
#: Give up once the functions hold this many Pareto points in all.
MAX_POINTS = 5_000_000
#: Pairs formed at once when summing two functions (bounds the temporary arrays to ~100 MB).
CHUNK = 2_000_000
#: At most this many min-sum eliminations while searching the Lagrange multiplier (bracketing by factors
#: of 4, then bisection in log λ down to a ratio of 1.02).
LAGRANGE_RUNS = 72


class _GiveUp(Exception):
    pass


@dataclass
class _Function:
    """Pareto sets for every assignment of ``scope`` (row-major over the variables' domains), padded to
    one width: ``mem``/``cost`` [assignment, point], bytes ascending, seconds strictly descending, unused
    slots ``inf``. ``prov`` [assignment, point, 1 + len(sources)]: the eliminated variable's value, then the
    point's index in each summed function (None for an original term)."""

    scope: tuple[int, ...]
    mem: np.ndarray
    cost: np.ndarray
    prov: np.ndarray | None = None
    eliminated: int | None = None  # the variable minimized out to make it (None: an original term)
    sources: tuple["_Function", ...] = ()


@dataclass
class Elimination:
    """What :func:`solve` found. ``status``: ``optimal`` (``layouts`` is an optimum, ``seconds`` its step
    time), ``refused`` (the order's largest function is over ``max_table``: nothing computed) or
    ``gave_up`` (deadline or ``max_points``). ``lagrangian``: the dual bound max_λ L(λ), a proven lower
    bound (None when the memory does not bind or it was not reached); ``plan``: the cheapest weighted
    optimum within M met on the way (a plan, to warm-start another solver), with its step time ``plan_seconds``."""

    status: str
    elapsed: float
    layouts: dict | None = None
    seconds: float | None = None
    lagrangian: float | None = None
    plan: dict | None = None
    plan_seconds: float | None = None


def solve(inst: LayoutInstance, reduced: Reduced, incumbent: float | None = None, deadline: float | None = None,
          max_table: int | None = None, max_points: int | None = None) -> Elimination:
    """The optimal layouts of ``inst`` within ``--device-memory`` and their step time (module docstring), or
    why not. ``incumbent``: a real plan's step time, for pruning; ``deadline``: ``time.perf_counter()`` seconds;
    ``max_table`` / ``max_points``: default :data:`MAX_TABLE` / :data:`MAX_POINTS`."""
    start = time.perf_counter()
    network = _Network(inst, reduced)
    dual = None
    try:
        order = network.order(max_table or MAX_TABLE, deadline)
        if order is None:
            return Elimination("refused", time.perf_counter() - start)
        free = network.weighted(order, 0.0, deadline)
        if inst.memory is None or network.bytes(free.values) <= inst.memory * (1 + 1e-12):
            return Elimination("optimal", time.perf_counter() - start, network.layouts(free.values), free.value)
        limit = inst.memory * (1 + 1e-12)
        dual = _dual(network, order, limit, free, deadline)
        guides = [free, dual.run]
        room = network.weighted(order, None, deadline)  # least bytes of the rest
        bound = min(math.inf if incumbent is None else incumbent, dual.plan_cost) * (1 + 1e-9)
        prune = _Pruning(guides, (0.0, dual.lam), room, limit, bound)
        last = _Eliminator(network.grids, deadline, max_points or MAX_POINTS, prune).run(order, network.leaves(1.0, 0.0, True))[-1]
    except _GiveUp:
        return _given_up(network, dual, start)
    if not np.isfinite(last.cost[0, 0]):  # nothing within M beats the bound: the fitting weighted optimum
        return _given_up(network, dual, start)  # is optimal only up to the 1e-9 slack; say no more
    best = int(np.argmin(last.cost[0]))  # every point fits (pruned): the cheapest is the optimum
    values = _traceback(last, best, network.sizes)
    return Elimination("optimal", time.perf_counter() - start, network.layouts(values), float(last.cost[0, best]),
                       dual.bound, *_fallback(network, dual))


def _given_up(network: "_Network", dual: "_Dual | None", start: float) -> Elimination:
    return Elimination("gave_up", time.perf_counter() - start, None, None, dual.bound if dual else None,
                       *_fallback(network, dual))


def _fallback(network: "_Network", dual: "_Dual | None") -> tuple[dict | None, float | None]:
    if dual is None or dual.plan is None:
        return None, None
    return network.layouts(dual.plan), dual.plan_cost


@dataclass
class _Weighted:
    """One min-sum elimination of seconds + λ·bytes: its inside functions, optimum and (on demand, for
    pruning) outside tables."""

    created: list[_Function]
    grids: "_Grids"
    values: dict[int, int]
    value: float

    @functools.cached_property
    def outside(self) -> list[np.ndarray]:
        return _outside(self.created, self.grids)


def _dual(network: "_Network", order: list[int], limit: float, free: _Weighted, deadline) -> _Dual:
    """Bisection (in log λ) for the multiplier where the weighted optimum's bytes cross M;
    L(λ) = min (seconds + λ·bytes) − λ·M is a lower bound for every λ ≥ 0, the best seen is kept, and so
    is the cheapest weighted optimum that fits (a plan, hence an upper bound)."""
    best = _Dual(0.0, free.value, free)
    low, high = 0.0, None
    lam = free.value / limit  # one step time per M bytes: the scale of λ
    for _ in range(LAGRANGE_RUNS):
        run = network.weighted(order, lam, deadline)
        used = network.bytes(run.values)
        if run.value - lam * limit > best.bound:
            best.lam, best.bound, best.run = lam, run.value - lam * limit, run
        if used <= limit and run.value - lam * used < best.plan_cost:
            best.plan, best.plan_cost = run.values, run.value - lam * used
        low, high = (lam, high) if used > limit else (low, lam)
        if high is None:
            lam *= 4.0
        elif low == 0.0:
            lam /= 4.0
            if lam < 1e-9 * free.value / limit:
                break
        elif high / low < 1.02:
            break
        else:
            lam = math.sqrt(low * high)
    return best


@dataclass
class _Dual:
    lam: float
    bound: float  # L(lam)
    run: _Weighted  # the elimination at lam
    plan: dict[int, int] | None = None  # the cheapest weighted optimum within M
    plan_cost: float = math.inf


class _Network:
    """The reduced instance as variables (tensors first, then ops) and original terms (module docstring)."""

    def __init__(self, inst: LayoutInstance, reduced: Reduced):
        self.inst, self.reduced = inst, reduced
        domains = [reduced.domains[t.name] for t in inst.tensors]
        self.sizes = [len(d) for d in domains] + [len(k) for k in reduced.choices]
        self.grids = _Grids(self.sizes)
        unary = [np.zeros(s) for s in self.sizes]
        mem = [np.zeros(s) for s in self.sizes]
        for v, t in enumerate(inst.tensors):
            mem[v] = np.array([float(t.per_device(a, inst.mesh)) for a in domains[v]])
            unary[v] += [inst.final_time(t.name, a) for a in domains[v]]  # a graph output's final gather
        pairs: dict[tuple[int, int], np.ndarray] = {}
        for i, op in enumerate(inst.ops):
            kept, var = reduced.choices[i], len(inst.tensors) + i
            unary[var] += [op.choices[k].seconds for k in kept]
            for j, t in enumerate(op.inputs + op.outputs):
                v = inst.index[t]
                slot = [(op.choices[k].inputs + op.choices[k].outputs)[j] for k in kept]
                table = inst.slot_seconds(t, domains[v], slot, j < len(op.inputs))  # [layout, choice]
                if len(kept) == 1:  # a fixed side makes the term unary: no edge, no clique on elimination
                    unary[v] += table[:, 0]
                elif len(domains[v]) == 1:
                    unary[var] += table[0]
                else:
                    pairs[(v, var)] = pairs.get((v, var), 0) + table
        self.memory = mem
        self.terms = [((v,), mem[v], unary[v]) for v in range(len(self.sizes))]
        self.terms += [(key, np.zeros(table.size), table.ravel()) for key, table in sorted(pairs.items())]

    def leaves(self, seconds: float, per_byte: float, keep_bytes: bool) -> list[_Function]:
        """The original terms as functions of seconds·cost + per_byte·bytes, with their bytes as the
        second sum (``keep_bytes``) or none."""
        return [_Function(scope, (mem if keep_bytes else np.zeros_like(mem))[:, None].astype(float),
                          (seconds * cost + per_byte * mem)[:, None].astype(float)) for scope, mem, cost in self.terms]

    def weighted(self, order: list[int], lam: float | None, deadline) -> _Weighted:
        """Min-sum elimination of seconds + λ·bytes (``lam`` None: of bytes alone)."""
        leaves = self.leaves(0.0, 1.0, False) if lam is None else self.leaves(1.0, lam, False)
        created = _Eliminator(self.grids, deadline).run(order, leaves)
        values = _traceback(created[-1], 0, self.sizes)
        return _Weighted(created, self.grids, values, float(created[-1].cost[0, 0]))

    def bytes(self, values: dict[int, int]) -> float:
        return sum(float(self.memory[v][values[v]]) for v in range(len(self.inst.tensors)))

    def layouts(self, values: dict[int, int]) -> dict:
        return {t.name: self.reduced.domains[t.name][values[v]] for v, t in enumerate(self.inst.tensors)}

    def order(self, max_table: int, deadline: float | None = None) -> list[int] | None:
        """A min-fill elimination order (ties: fewest neighbours, then lowest index) among the variables
        whose function would have at most ``max_table`` assignments; None when none is left to eliminate
        that way; _GiveUp past ``deadline``. Keys live in a heap and are recomputed only around the eliminated variable (the only
        place they change); a variable over the limit is not scored (its fill would cost O(degree²))."""
        graph = nx.Graph()
        graph.add_nodes_from(range(len(self.sizes)))
        for scope, _, _ in self.terms:
            graph.add_edges_from(itertools.combinations(scope, 2))
        key = {n: self._key(graph, n, max_table) for n in graph.nodes}
        heap = [(k, n) for n, k in key.items()]
        heapq.heapify(heap)
        order = []
        while heap:
            k, v = heapq.heappop(heap)
            if key.get(v) != k:
                continue  # stale
            if deadline is not None and time.perf_counter() > deadline:
                raise _GiveUp
            if k[0] == math.inf:
                return None
            neighbours = list(graph[v])
            graph.add_edges_from(itertools.combinations(neighbours, 2))
            graph.remove_node(v)
            del key[v]
            order.append(v)
            for n in {m for u in neighbours for m in graph[u]} | set(neighbours):
                key[n] = self._key(graph, n, max_table)
                heapq.heappush(heap, (key[n], n))
        return order

    def _key(self, graph: nx.Graph, n: int, max_table: int) -> tuple:
        if math.prod(self.sizes[m] for m in graph[n]) * self.sizes[n] > max_table:
            return (math.inf, graph.degree(n), n)
        return (_fill(graph, n), graph.degree(n), n)


def _fill(graph: nx.Graph, n: int) -> int:
    neighbours = list(graph[n])
    return sum(1 for a, b in itertools.combinations(neighbours, 2) if not graph.has_edge(a, b))


class _Grids:
    """Where each function's rows sit in a bucket's grid (every assignment of the bucket's variables, the
    eliminated one varying fastest), kept across the passes: they all share one order."""

    def __init__(self, sizes: list[int]):
        self.sizes, self.cache, self.last = sizes, {}, (None, None)

    def count(self, axes: tuple) -> int:
        return math.prod(self.sizes[u] for u in axes)

    def rows(self, axes: tuple, scope: tuple) -> np.ndarray:
        """The row of a function over ``scope`` for each grid row over ``axes``."""
        key = (axes, scope)
        if key not in self.cache:
            if scope:
                if self.last[0] != axes:
                    shape = tuple(self.sizes[u] for u in axes)
                    self.last = (axes, np.indices(shape).reshape(len(shape), -1))
                grid = self.last[1]
                self.cache[key] = np.ravel_multi_index(tuple(grid[[axes.index(u) for u in scope]]),
                                                       tuple(self.sizes[u] for u in scope))
            else:
                self.cache[key] = np.zeros(self.count(axes), dtype=np.int64)
        return self.cache[key]


def _axes(scope: tuple, v: int | None) -> tuple:
    return scope + ((v,) if v is not None else ())


def _outside(created: list[_Function], grids: _Grids) -> list[np.ndarray]:
    """Per created function f, out(s) = min over the rest of the network given f's scope s (module
    docstring), top-down: for f a source of g (made by minimizing v out), out_f = min over g's grid rows
    matching s of out_g + the other sources of g. Single-objective functions (one point per row)."""
    index = {id(f): k for k, f in enumerate(created)}
    outside: list[np.ndarray | None] = [None] * len(created)
    outside[-1] = np.zeros(1)
    for k in range(len(created) - 1, -1, -1):
        g = created[k]
        axes = _axes(g.scope, g.eliminated)
        rows = [grids.rows(axes, f.scope) for f in g.sources]
        inside = [f.cost[r, 0] for f, r in zip(g.sources, rows)]
        total = outside[k][grids.rows(axes, g.scope)] + np.sum(inside, axis=0)
        for f, r, own in zip(g.sources, rows, inside):
            if id(f) in index:
                out = np.full(len(f.cost), np.inf)
                np.minimum.at(out, r, total - own)
                outside[index[id(f)]] = out
    return outside


@dataclass
class _Pruning:
    """Drop a point of the k-th created function when no plan within M through it beats ``bound``."""

    guides: list[_Weighted]
    lambdas: tuple[float, ...]
    room: _Weighted
    limit: float
    bound: float

    def __call__(self, k: int, rows: np.ndarray, mem: np.ndarray, cost: np.ndarray, rest: list) -> np.ndarray:
        """``mem``/``cost``: partial sums of the bucket at grid rows whose scope rows are ``rows``; ``rest``:
        the (bytes, seconds) sets still to be added there, bounded below by their least values."""
        least_mem = sum((m[:, 0] for m, _ in rest), np.zeros(len(rows)))  # bytes ascending: column 0 is least
        keep = mem + (least_mem + self.room.outside[k][rows])[:, None] <= self.limit
        for guide, lam in zip(self.guides, self.lambdas):
            least = sum(((c + lam * m if lam else c).min(axis=1) for m, c in rest), np.zeros(len(rows)))
            outside = least + guide.outside[k][rows] - lam * self.limit
            keep &= (cost + lam * mem if lam else cost) + outside[:, None] <= self.bound  # inf bytes: gone above
        return np.where(keep, cost, np.inf)


class _Eliminator:
    def __init__(self, grids: _Grids, deadline: float | None, max_points: int = MAX_POINTS, prune=None):
        self.grids, self.sizes = grids, grids.sizes
        self.deadline, self.max_points, self.prune, self.points = deadline, max_points, prune, 0

    def run(self, order: list[int], leaves: list[_Function]) -> list[_Function]:
        """Eliminate along ``order``; every function made, the last one over no variable."""
        mentions: dict[int, dict[int, _Function]] = {}  # variable -> the active functions over it
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

    def eliminate(self, v: int | None, bucket: list[_Function], k: int) -> _Function:
        """Sum the bucket over every assignment of its scope and v's values, then minimize v out."""
        scope = tuple(sorted({u for f in bucket for u in f.scope} - {v}))
        axes = _axes(scope, v)
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
        if self.points > self.max_points or (self.deadline is not None and time.perf_counter() > self.deadline):
            raise _GiveUp
        return _Function(scope, mem, cost, prov, v, tuple(bucket))

    def _min_sum(self, v, bucket, scope, axes) -> _Function:
        """:meth:`eliminate` when every set is one point with no bytes: a sum and a minimum over v."""
        entries = [self.grids.rows(axes, f.scope) for f in bucket]
        total = np.sum([f.cost[r, 0] for f, r in zip(bucket, entries)], axis=0) if bucket else np.zeros(1)
        total = total.reshape(-1, self.sizes[v] if v is not None else 1)
        best = np.argmin(total, axis=1)
        prov = np.zeros((len(best), 1, 1 + len(bucket)), dtype=np.int64)  # each source's one point: index 0
        prov[:, 0, 0] = best
        cost = np.take_along_axis(total, best[:, None], 1)
        return _Function(scope, np.zeros_like(cost), cost, prov, v, tuple(bucket))


def _minkowski(mem, cost, prov, mem2, cost2):
    """Row by row, the Pareto set of every sum of a point of (mem, cost) and one of (mem2, cost2); prov
    gains a column with the second point's index. Rows are done in chunks of ``CHUNK`` pairs."""
    rows, w1, w2 = mem.shape[0], mem.shape[1], mem2.shape[1]
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


def _traceback(last: _Function, point: int, sizes: list[int]) -> dict[int, int]:
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
        for source, index in zip(f.sources, prov[1:]):
            stack.append((source, {u: assignment[u] for u in source.scope}, int(index)))
    return values
