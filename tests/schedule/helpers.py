"""Tiny instances and an independent brute force for the schedule tests.

The brute force does not use the package's simulator or delay tables: it recomputes every transfer
from the raw latency/bandwidth arrays with the semantics stated in onnxpart/schedule/common/instance.py
(contention-free links, ``latency + bytes/bandwidth`` across devices, free on one device, static
memory (3.7)) and takes the best append list schedule over all mappings × all topological orders —
which is the optimum (see onnxpart/schedule/latency/simulator.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from onnxpart.schedule import Instance
from onnxpart.schedule.common import ticks


def topological_orders(n: int, edges) -> list[tuple[int, ...]]:
    preds = [set() for _ in range(n)]
    for i, j, _ in edges:
        preds[j].add(i)
    out: list[tuple[int, ...]] = []

    def walk(prefix: list[int], placed: set[int]) -> None:
        if len(prefix) == n:
            out.append(tuple(prefix))
            return
        for v in range(n):
            if v not in placed and preds[v] <= placed:
                prefix.append(v)
                placed.add(v)
                walk(prefix, placed)
                placed.discard(v)
                prefix.pop()

    walk([], set())
    return out


def brute_force(time, edges, latency, bandwidth, mem=None, capacity=None) -> tuple[float, tuple[int, ...]]:
    """(optimal makespan, an optimal mapping); (inf, ()) if no mapping is feasible. Every mapping, and for
    each every topological order appended in turn (depth first; a prefix that already ends no earlier
    than the best makespan found is not extended: appending never ends anything earlier)."""
    time = np.asarray(time, dtype=float)
    n, k = time.shape
    lat = np.broadcast_to(np.asarray(latency, dtype=float), (k, k))
    bw = np.broadcast_to(np.asarray(bandwidth, dtype=float), (k, k))
    mem = np.zeros(n) if mem is None else np.asarray(mem, dtype=float)
    cap = np.full(k, math.inf) if capacity is None else np.asarray(capacity, dtype=float)
    incoming = [[(i, b) for i, jj, b in edges if jj == j] for j in range(n)]
    best, best_map = math.inf, ()
    for mapping in itertools.product(range(k), repeat=n):
        if any(not math.isfinite(time[i, mapping[i]]) for i in range(n)):
            continue
        if any(sum(mem[i] for i in range(n) if mapping[i] == u) > cap[u] for u in range(k)):
            continue
        found = _best_order(time, incoming, mapping, lat, bw, best)
        if found < best:
            best, best_map = found, mapping
    return best, best_map


def _best_order(time, incoming, mapping, lat, bw, best: float) -> float:
    """The least makespan below ``best`` over the topological orders of one mapping (``best`` if none)."""
    n = len(mapping)
    end, free, placed = [0.0] * n, [0.0] * time.shape[1], [False] * n

    def extend(count: int, makespan: float) -> None:
        nonlocal best
        if makespan >= best:
            return
        if count == n:
            best = makespan
            return
        for j in range(n):
            if placed[j] or any(not placed[i] for i, _ in incoming[j]):
                continue
            v = mapping[j]
            ready = free[v]
            for i, b in incoming[j]:
                u = mapping[i]
                ready = max(ready, end[i] + (0.0 if u == v else lat[u, v] + b / bw[u, v]))
            was = free[v]
            end[j] = free[v] = ready + time[j, v]
            placed[j] = True
            extend(count + 1, max(makespan, end[j]))
            placed[j], free[v] = False, was

    extend(0, 0.0)
    return best


def random_case(rng: np.random.Generator, n: int, k: int, p_edge: float = 0.4, integer: bool = True,
                memory: bool = False, forbid: bool = False):
    """Random DAG on n ops (edges i → j, i < j), times on k devices, uniform link latency/bandwidth."""
    edges = [(i, j, float(rng.integers(1, 5))) for i in range(n) for j in range(i + 1, n) if rng.random() < p_edge]
    if integer:
        time = rng.integers(1, 9, size=(n, k)).astype(float)
    else:
        time = rng.uniform(0.1, 5.0, size=(n, k))
    if forbid:
        for i in range(n):
            u = int(rng.integers(k))
            if rng.random() < 0.3 and np.isfinite(np.delete(time[i], u)).any():
                time[i, u] = math.inf
    latency = float(rng.integers(0, 3))
    bandwidth = float(rng.choice([1.0, 2.0, 4.0]))
    mem = cap = None
    if memory:
        mem = rng.integers(1, 5, size=n).astype(float)
        cap = np.full(k, max(float(mem.max()), float(mem.sum()) / 2))
    return dict(time=time, edges=edges, latency=latency, bandwidth=bandwidth, mem=mem, capacity=cap)


def instance(case) -> Instance:
    return Instance(case["time"], case["edges"], mem=case["mem"], capacity=case["capacity"],
                    latency=case["latency"], bandwidth=case["bandwidth"])


def chain_of_modules(rng: np.random.Generator, modules: int, size: int, k: int) -> Instance:
    """Random single-entry single-exit modules joined op to op (1-channel modules)."""
    edges, n = [], 1  # op 0 is the input op
    entry = 0
    for _ in range(modules):
        ops = list(range(n, n + size))
        exit_ = n + size
        for a in ops:
            edges.append((entry, a, float(rng.integers(1, 5))))
            edges.append((a, exit_, float(rng.integers(1, 5))))
        for a in ops:
            for b in ops:
                if a < b and rng.random() < 0.4:
                    edges.append((a, b, float(rng.integers(1, 5))))
        entry, n = exit_, exit_ + 1
    time = rng.integers(1, 9, size=(n, k)).astype(float)
    return Instance(time, edges, latency=0.5, bandwidth=2.0)


def budgets_not_clock(monkeypatch, time_limit: float, factor: float = 50.0) -> float:
    """A time limit ``factor`` times ``time_limit`` with CP-SAT's deterministic seconds per wall second
    (:data:`onnxpart.schedule.common.ticks.DET_PER_SECOND`) divided by ``factor``: SPLIT's deterministic
    budgets are those of ``time_limit``, and its wall-clock deadlines ``factor`` times further away, so the
    budgets — not the machine's load — end every module solve (the answer is reproducible)."""
    monkeypatch.setattr(ticks, "DET_PER_SECOND", ticks.DET_PER_SECOND / factor)
    return time_limit * factor
