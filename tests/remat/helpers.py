"""Small graphs for the remat tests, built in memory (node-link dicts and ONNX models)."""

from __future__ import annotations

import itertools
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


def brute_force_fixed(inst: Instance, budget: float, max_copies: int) -> float | None:
    """Least duration over every stage-structured sequence (Moccasin §2.3 / Checkmate stages): stage t
    recomputes any subset of earlier ops (each op at most ``max_copies`` times overall), then computes
    op t; None if no such sequence fits the budget."""
    order = inst.op_order()
    best = None
    choices = [list(itertools.product((0, 1), repeat=t)) for t in range(len(order))]
    for pick in itertools.product(*choices):
        sequence = []
        for t, subset in enumerate(pick):
            sequence += [order[k] for k in range(t) if subset[k]] + [order[t]]
        if max(sequence.count(v) for v in set(sequence)) > max_copies:
            continue
        try:
            profile = simulate(inst, sequence)
        except InvalidSequence:
            continue
        if profile.peak <= budget and (best is None or profile.duration < best):
            best = profile.duration
    return best
