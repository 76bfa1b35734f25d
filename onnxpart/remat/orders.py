"""Memory-minimizing topological order without recomputation (``--order minmem``).

This is the *memory occupancy problem* of Kumar et al., "Matrix tiling by hypergraph labeling" §7:
choose a linear extension of the DAG that minimizes the largest set of simultaneously retained tensors
(here weighted by bytes, with the retention rules of :mod:`onnxpart.remat.sequence`). It is NP-hard by
reduction from cut-width (their Theorem 7), so: a greedy list schedule for every size, then CP-SAT
(positions all different, one retention interval per tensor from its producer to its last reader, a
cumulative whose capacity is the minimized peak) warm-started from the best order so far — exact when it
finishes, and always with a proven lower bound.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

from ortools.sat.python import cp_model

from onnxpart.remat.model import Instance, scale
from onnxpart.remat.sequence import simulate
from onnxpart.solvers import solve_cpsat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrderResult:
    order: tuple[int, ...]  # op ids
    peak: float
    lower_bound: float | None  # proven bound on the smallest peak of any topological order
    status: str  # optimal | time_limit | heuristic
    method: str


def greedy_order(instance: Instance) -> tuple[int, ...]:
    """List scheduling: among ready ops, run the one whose event leaves the least memory behind (outputs
    allocated minus inputs it frees), ties to the smaller event peak, then to the input order. The ready ops
    wait in a heap. An op's key reads, of each tensor it reads, only whether one reader is left, so after an
    op runs only the readers of the tensors where that changed are keyed again (stale entries are skipped):
    O((ops + edges) log ops), where scanning every ready op at every step is O(ops × ready ops)."""
    n = instance.n_ops
    position = {v: p for p, v in enumerate(instance.order)}
    remaining = [len(instance.value_consumers[x]) for x in range(len(instance.value_sizes))]
    dag = instance.dag
    missing = [sum(1 for u in dag.pred_lists[v] if u < n) for v in range(n)]  # ops still to run first

    def key(v: int) -> tuple[float, float, int]:
        freed = sum(instance.value_sizes[x] for x in set(instance.node_inputs[v])
                    if remaining[x] == 1 and not instance.value_to_end[x])
        out = sum(instance.value_sizes[x] for x in instance.node_outputs[v])
        return out - freed, out + instance.internal[v], position[v]

    current = {v: key(v) for v in range(n) if missing[v] == 0}  # each ready op's key
    heap = [(k, v) for v, k in current.items()]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        k, v = heapq.heappop(heap)
        if current.get(v) != k:
            continue
        del current[v]
        order.append(v)
        last_before = {x: remaining[x] == 1 for x in instance.node_inputs[v]}
        for x in instance.node_inputs[v]:
            remaining[x] -= 1
        touched = {w for x, last in last_before.items() if last != (remaining[x] == 1)
                   for w in instance.value_consumers[x]}
        for w in dag.succ_lists[v]:
            missing[w] -= 1
            if missing[w] == 0:
                current[w] = None  # ready: keyed below
                touched.add(w)
        for w in touched & current.keys():
            if current[w] != (k_w := key(w)):
                current[w] = k_w
                heapq.heappush(heap, (k_w, w))
    if len(order) != n:
        raise AssertionError("greedy order missed ops: the graph is not a DAG")
    return tuple(order)


def exact_order(instance: Instance, hint: tuple[int, ...], time_limit: float, workers: int = 2,
                seed: int = 0) -> tuple[tuple[int, ...] | None, float | None, str]:
    """CP-SAT over positions (the memory occupancy problem as a cumulative); returns the best order found,
    the proven lower bound on the peak (bytes) and the solver status."""
    sc = scale(instance)
    n, k = instance.n_nodes, len(instance.input_nodes)
    model = cp_model.CpModel()
    pos = [model.new_int_var(0, n - 1, f"p_{v}") for v in range(n)]
    for j, v in enumerate(instance.input_nodes):
        model.add(pos[v] == j)
    for v in range(instance.n_ops):
        model.add(pos[v] >= k)
        for u in instance.dag.pred_lists[v]:
            model.add(pos[u] < pos[v])  # a linear extension
    model.add_all_different(pos)
    intervals, demands = [], []
    for x, size in enumerate(sc.sizes):
        u = instance.value_producer[x]
        if instance.value_to_end[x]:
            end = n
        elif instance.value_consumers[x]:
            end = model.new_int_var(1, n, f"e_{x}")
            model.add_max_equality(end, [pos[c] + 1 for c in instance.value_consumers[x]])
        else:
            end = pos[u] + 1
        length = model.new_int_var(1, n, f"l_{x}")
        intervals.append(model.new_interval_var(pos[u], length, end, f"r_{x}"))
        demands.append(size)
    for v in range(instance.n_ops):
        if sc.internal[v]:
            intervals.append(model.new_fixed_size_interval_var(pos[v], 1, f"w_{v}"))
            demands.append(sc.internal[v])
    peak = model.new_int_var(0, sum(sc.sizes) + sum(sc.internal), "peak")
    model.add_cumulative(intervals, demands, peak)
    model.minimize(peak)
    for p, v in enumerate(tuple(instance.input_nodes) + tuple(hint)):
        model.add_hint(pos[v], p)
    result, solver = solve_cpsat(model, time_limit, workers=workers, seed=seed)
    to_bytes = lambda units: units * sc.memory_unit + instance.constant_bytes  # noqa: E731
    bound = to_bytes(result.bound) if result.bound > -1e300 and result.status != "infeasible" else None
    if not result.has_solution:
        return None, bound, result.status
    order = tuple(sorted(range(instance.n_ops), key=lambda v: solver.value(pos[v])))
    return order, bound, result.status


def minmem_order(instance: Instance, time_limit: float = 10.0, workers: int = 2, seed: int = 0) -> OrderResult:
    """The best of the input order, the greedy order and CP-SAT (warm-started from the better one)."""
    candidates = [(simulate(instance, instance.op_order()).peak, instance.op_order(), "input order"),
                  (simulate(instance, greedy_order(instance)).peak, greedy_order(instance), "greedy")]
    peak, order, method = min(candidates, key=lambda c: c[0])
    bound, status = None, "heuristic"
    if time_limit > 0:
        exact, bound, status = exact_order(instance, order, time_limit, workers, seed)
        if exact is not None:
            exact_peak = simulate(instance, exact).peak
            if exact_peak < peak:
                peak, order, method = exact_peak, exact, "cp-sat"
    log.info("minmem order: peak %.0f by %s (bound %s, %s)", peak, method, bound, status)
    return OrderResult(order, peak, bound, status, method)
