"""Small graphs for the remat tests, built in memory (node-link dicts and ONNX models)."""

from __future__ import annotations

import itertools
import pickle
import random

from onnxpart.readers import read_node_link
from onnxpart.remat.model import Instance, build_instance
from onnxpart.remat.sequence import InvalidSequence, simulate


def node_link(sizes, durations, edges, order=None) -> dict:
    graph = {"name": "tiny"}
    if order is not None:
        graph["order"] = list(order)
    return {"directed": True, "multigraph": False, "graph": graph,
            "nodes": [{"id": i, "name": f"n{i}", "duration": d, "out_cost": s}
                      for i, (s, d) in enumerate(zip(sizes, durations))],
            "links": [{"source": u, "target": v} for u, v in edges]}


def instance(sizes, durations, edges) -> Instance:
    return build_instance(read_node_link(node_link(sizes, durations, edges)))


def random_dag(n: int, seed: int, p: float = 0.45) -> Instance:
    """A random DAG over 0..n-1 (0 is the source, n-1 the single sink) with skip connections."""
    rng = random.Random(seed)
    edges = {(i, i + 1) for i in range(n - 1)}
    edges |= {(u, v) for u in range(n) for v in range(u + 2, n) if rng.random() < p}
    sizes = [rng.randint(1, 9) * 10 for _ in range(n)]
    durations = [rng.randint(1, 20) for _ in range(n)]
    return instance(sizes, durations, sorted(edges))


def branching_dag(n: int, seed: int):
    """A random DAG over 0..n-1 with many topological orders — each node but the first reads one or two
    earlier nodes, the last reads every node no one reads — in a random one of its orders as the file's."""
    rng = random.Random(seed)
    edges = {(u, v) for v in range(1, n - 1) for u in rng.sample(range(v), min(v, rng.choice((1, 2))))}
    edges |= {(u, n - 1) for u in range(n - 1) if all(x != u for x, _ in edges)}
    order, ready = [], [0]
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        ready += [w for w in range(n) if (v, w) in edges and all(u in order for u, x in edges if x == w)]
    sizes = [rng.randint(1, 9) * 10 for _ in range(n)]
    durations = [rng.randint(1, 20) for _ in range(n)]
    return build_instance(read_node_link(node_link(sizes, durations, sorted(edges), order)))


def spy(monkeypatch, module, name: str, seconds_of, handed: list):
    """Replace ``module.name`` by itself, recording the seconds each call was given."""
    real = getattr(module, name)

    def recorded(*args, **kwargs):
        handed.append((name, seconds_of(*args, **kwargs)))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)


#: (pickled instance, max_copies) → the (peak, duration) of every valid stage-structured sequence: the
#: tests ask one instance at several budgets, and the enumeration is 2^(n(n-1)/2) simulations.
_SEQUENCES: dict[tuple[bytes, int], list[tuple[float, float]]] = {}


def brute_force_fixed(inst: Instance, budget: float, max_copies: int) -> float | None:
    """Least duration over every stage-structured sequence (Moccasin §2.3 / Checkmate stages): stage t
    recomputes any subset of earlier ops (each op at most ``max_copies`` times overall), then computes
    op t; None if no such sequence fits the budget."""
    key = (pickle.dumps(inst), max_copies)
    if key not in _SEQUENCES:
        _SEQUENCES[key] = list(_stage_sequences(inst, max_copies))
    return min((duration for peak, duration in _SEQUENCES[key] if peak <= budget), default=None)


def _stage_sequences(inst: Instance, max_copies: int):
    """(peak, duration) of every valid stage-structured sequence with at most ``max_copies`` computations
    of each op; stages are extended one at a time, so a prefix over the limit is not continued."""
    order = inst.op_order()

    def extend(t: int, sequence: list[int], counts: list[int]):
        if t == len(order):
            try:
                profile = simulate(inst, sequence)
            except InvalidSequence:
                return
            yield profile.peak, profile.duration
            return
        for subset in itertools.product((0, 1), repeat=t):
            more = [c + s for c, s in zip(counts, subset)]
            if max(more, default=0) <= max_copies:
                stage = [order[k] for k in range(t) if subset[k]] + [order[t]]
                yield from extend(t + 1, sequence + stage, more + [1])

    yield from extend(0, [], [])
