"""Proven-optimal layouts by multi-objective bucket elimination, before (and instead of) CP-SAT.

The dominance-reduced instance (:mod:`onnxpart.tile.onnx.reduce`) is a cost network over two kinds of
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
from typing import TYPE_CHECKING

import numpy as np

from onnxpart.tile.onnx import pareto
from onnxpart.tile.onnx.model import LayoutInstance
from onnxpart.tile.onnx.reduce import Reduced

if TYPE_CHECKING:
    import networkx as nx

#: Refuse an elimination order whose largest function has more assignments than this.
MAX_TABLE = 1_000_000
#: At most this many min-sum eliminations while searching the Lagrange multiplier (bracketing by factors
#: of 4, then bisection in log λ down to a ratio of 1.02).
LAGRANGE_RUNS = 72


@dataclass
class Elimination:
    """What :func:`solve` found. ``status``: ``optimal`` (``layouts`` is an optimum, ``seconds`` its step
    time), ``refused`` (the order's largest function is over ``max_table``: nothing computed) or
    ``gave_up`` (deadline or ``max_points``). ``lagrangian``: the dual bound max_λ L(λ), a proven lower
    bound (None when the memory does not bind or it was not reached); ``plan``: the cheapest weighted
    optimum within M met on the way (a plan, to warm-start another solver), with its step time ``plan_seconds``;
    ``network``: the network refused (for :mod:`onnxpart.tile.onnx.minibucket`'s bound on it)."""

    status: str
    elapsed: float
    layouts: dict | None = None
    seconds: float | None = None
    lagrangian: float | None = None
    plan: dict | None = None
    plan_seconds: float | None = None
    network: "Network | None" = None


def solve(inst: LayoutInstance, reduced: Reduced, incumbent: float | None = None, deadline: float | None = None,
          max_table: int | None = None, max_points: int | None = None) -> Elimination:
    """The optimal layouts of ``inst`` within ``--device-memory`` and their step time (module docstring), or
    why not. ``incumbent``: a real plan's step time, for pruning; ``deadline``: ``time.monotonic()`` seconds;
    ``max_table`` / ``max_points``: default :data:`MAX_TABLE` / :data:`~onnxpart.tile.onnx.pareto.MAX_POINTS`."""
    start = time.monotonic()
    network = Network(inst, reduced)
    dual = None
    try:
        order = network.order(max_table or MAX_TABLE, deadline)
        if order is None:
            return Elimination("refused", time.monotonic() - start, network=network)
        free = network.weighted(order, 0.0, deadline)
        if inst.memory is None or network.bytes(free.values) <= inst.memory * (1 + 1e-12):
            return Elimination("optimal", time.monotonic() - start, network.layouts(free.values), free.value)
        limit = inst.memory * (1 + 1e-12)
        dual = _dual(network, order, limit, free, deadline)
        guides = [free, dual.run]
        room = network.weighted(order, None, deadline)  # least bytes of the rest
        bound = min(math.inf if incumbent is None else incumbent, dual.plan_cost) * (1 + 1e-9)
        prune = _Pruning(guides, (0.0, dual.lam), room, limit, bound)
        eliminator = pareto.Eliminator(network.grids, deadline, max_points or pareto.MAX_POINTS, prune)
        last = eliminator.run(order, network.leaves(1.0, 0.0, True))[-1]
    except pareto.GiveUp:
        return _given_up(network, dual, start)
    if not np.isfinite(last.cost[0, 0]):  # nothing within M beats the bound: the fitting weighted optimum
        return _given_up(network, dual, start)  # is optimal only up to the 1e-9 slack; say no more
    best = int(np.argmin(last.cost[0]))  # every point fits (pruned): the cheapest is the optimum
    values = pareto.traceback(last, best, network.sizes)
    return Elimination("optimal", time.monotonic() - start, network.layouts(values), float(last.cost[0, best]),
                       dual.bound, *_fallback(network, dual))


def _given_up(network: "Network", dual: "_Dual | None", start: float) -> Elimination:
    return Elimination("gave_up", time.monotonic() - start, None, None, dual.bound if dual else None,
                       *_fallback(network, dual))


def _fallback(network: "Network", dual: "_Dual | None") -> tuple[dict | None, float | None]:
    if dual is None or dual.plan is None:
        return None, None
    return network.layouts(dual.plan), dual.plan_cost


@dataclass
class _Weighted:
    """One min-sum elimination of seconds + λ·bytes: its inside functions, optimum and (on demand, for
    pruning) outside tables."""

    created: list[pareto.Function]
    grids: pareto.Grids
    values: dict[int, int]
    value: float

    @functools.cached_property
    def outside(self) -> list[np.ndarray]:
        return pareto.outside(self.created, self.grids)


def _dual(network: "Network", order: list[int], limit: float, free: _Weighted, deadline) -> _Dual:
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


class Network:
    """The reduced instance as variables (tensors first, then ops) and original terms (module docstring)."""

    def __init__(self, inst: LayoutInstance, reduced: Reduced):
        self.inst, self.reduced = inst, reduced
        domains = [reduced.domains[t.name] for t in inst.tensors]
        self.sizes = [len(d) for d in domains] + [len(k) for k in reduced.choices]
        self.grids = pareto.Grids(self.sizes)
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
        self.orders: dict[tuple, list[int] | None] = {}
        self.terms = [((v,), mem[v], unary[v]) for v in range(len(self.sizes))]
        self.terms += [(key, np.zeros(table.size), table.ravel()) for key, table in sorted(pairs.items())]

    def leaves(self, seconds: float, per_byte: float, keep_bytes: bool) -> list[pareto.Function]:
        """The original terms as functions of seconds·cost + per_byte·bytes, with their bytes as the
        second sum (``keep_bytes``) or none."""
        return [pareto.Function(scope, (mem if keep_bytes else np.zeros_like(mem))[:, None].astype(float),
                          (seconds * cost + per_byte * mem)[:, None].astype(float)) for scope, mem, cost in self.terms]

    def weighted(self, order: list[int], lam: float | None, deadline) -> _Weighted:
        """Min-sum elimination of seconds + λ·bytes (``lam`` None: of bytes alone)."""
        leaves = self.leaves(0.0, 1.0, False) if lam is None else self.leaves(1.0, lam, False)
        created = pareto.Eliminator(self.grids, deadline).run(order, leaves)
        values = pareto.traceback(created[-1], 0, self.sizes)
        return _Weighted(created, self.grids, values, float(created[-1].cost[0, 0]))

    def bytes(self, values: dict[int, int]) -> float:
        return sum(float(self.memory[v][values[v]]) for v in range(len(self.inst.tensors)))

    def layouts(self, values: dict[int, int]) -> dict:
        return {t.name: self.reduced.domains[t.name][values[v]] for v, t in enumerate(self.inst.tensors)}

    def order(self, max_table: float, deadline: float | None = None,
              last: frozenset[int] = frozenset()) -> list[int] | None:
        """A min-fill elimination order (ties: fewest neighbours, then lowest index) among the variables
        whose function would have at most ``max_table`` assignments, those in ``last`` never eliminated (left
        out of the order); None when a variable not in ``last`` is left that cannot be eliminated that way;
        :class:`~onnxpart.tile.onnx.pareto.GiveUp` past ``deadline``. Keys live in a heap and are
        recomputed only around the eliminated variable (the only place they change); a variable over the limit
        is not scored (its fill would cost O(degree²)). networkx is imported here, when an order is wanted: a
        solve whose exact method is skipped does not pay for loading it. Kept per (``max_table``, ``last``): a
        refused network asked again (mini-buckets after elimination) answers at once."""
        key = (max_table, last)
        if key not in self.orders:
            self.orders[key] = self._order(max_table, deadline, last)
        return self.orders[key]

    def _order(self, max_table: float, deadline: float | None, last: frozenset[int]) -> list[int] | None:
        import networkx as nx

        graph = nx.Graph()
        graph.add_nodes_from(range(len(self.sizes)))
        for scope, _, _ in self.terms:
            graph.add_edges_from(itertools.combinations(scope, 2))
        key = {n: self._key(graph, n, max_table, last) for n in graph.nodes}
        heap = [(k, n) for n, k in key.items()]
        heapq.heapify(heap)
        order = []
        while heap:
            k, v = heapq.heappop(heap)
            if key.get(v) != k:
                continue  # stale
            if deadline is not None and time.monotonic() > deadline:
                raise pareto.GiveUp
            if k[0] == math.inf:
                return order if key.keys() <= last else None
            neighbours = list(graph[v])
            graph.add_edges_from(itertools.combinations(neighbours, 2))
            graph.remove_node(v)
            del key[v]
            order.append(v)
            for n in {m for u in neighbours for m in graph[u]} | set(neighbours):
                key[n] = self._key(graph, n, max_table, last)
                heapq.heappush(heap, (key[n], n))
        return order

    def _key(self, graph: nx.Graph, n: int, max_table: float, last: frozenset[int]) -> tuple:
        if n in last or math.prod(self.sizes[m] for m in graph[n]) * self.sizes[n] > max_table:
            return (math.inf, graph.degree(n), n)
        return (_fill(graph, n), graph.degree(n), n)


def _fill(graph: nx.Graph, n: int) -> int:
    neighbours = list(graph[n])
    return sum(1 for a, b in itertools.combinations(neighbours, 2) if not graph.has_edge(a, b))




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


