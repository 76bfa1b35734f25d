"""Random layered graphs like the Moccasin paper's G1–G4 (networkx node-link JSON, same attributes).

Recipe, inferred from the four published graphs (../shared/benchmarks/moccasin-graphs): a source and a
target node of duration 0; layers whose mean width is m = 2·w·√n (w is the width parameter, 0.27–0.43 in
the published file names), each width drawn from U[(1−0.75)m, (1+0.75)m]; between adjacent layers first
max(nₗ, nₗ₊₁) covering edges (every node of both layers gets one), then every other pair with probability
0.2; skip edges spanning ≥ 2 layers making up about 14% of all edges; durations uniform integers 1–999;
output sizes gamma-distributed (mean ≈ 2000, median ≈ 1500, rounded to 10, within 10–8180). The graph
attribute ``order`` is a random topological order (the input order whose peak sets the budget).

    python scripts/gen_layered_graphs.py -n 250 -w 0.4 --seed 1 -o graph.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path


def layered_graph(n: int, width: float = 0.35, seed: int = 0, edge_prob: float = 0.2, skip_share: float = 0.14,
                  variation: float = 0.75) -> dict:
    rng = random.Random(seed)
    mean = 2 * width * math.sqrt(n)
    layers: list[list[int]] = []
    next_id = 2
    while next_id < n:
        size = max(1, round(rng.uniform((1 - variation) * mean, (1 + variation) * mean)))
        size = min(size, n - next_id)
        layers.append(list(range(next_id, next_id + size)))
        next_id += size
    edges: set[tuple[int, int]] = {(0, v) for v in layers[0]} | {(v, 1) for v in layers[-1]}
    adjacent = 0
    for upper, lower in zip(layers, layers[1:]):
        for i in range(max(len(upper), len(lower))):  # covering edges
            edges.add((upper[i % len(upper)] if len(upper) >= len(lower) else rng.choice(upper),
                       lower[i % len(lower)] if len(lower) >= len(upper) else rng.choice(lower)))
        for u in upper:
            for v in lower:
                if rng.random() < edge_prob:
                    edges.add((u, v))
        adjacent = len(edges)
    skips = round(skip_share / (1 - skip_share) * adjacent) if len(layers) > 2 else 0
    for _ in range(skips):
        a = rng.randrange(len(layers) - 2)
        b = rng.randrange(a + 2, len(layers))
        edges.add((rng.choice(layers[a]), rng.choice(layers[b])))
    nodes = []
    for v in range(n):
        size = min(8180, max(10, 10 * round(rng.gammavariate(1.5, 1333.0) / 10)))
        nodes.append({"out_cost": size, "param_cost": 0, "duration": 0 if v < 2 else rng.randint(1, 999), "name": v})
    return {"directed": True, "multigraph": False,
            "graph": {"name": f"layered_n{n}_w{width}_s{seed}", "source_node": 0, "target_node": 1,
                      "order": _random_topological_order(n, edges, rng)},
            "nodes": nodes, "links": [{"source": u, "target": v} for u, v in sorted(edges)]}


def _random_topological_order(n: int, edges: set[tuple[int, int]], rng: random.Random) -> list[int]:
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for u, v in sorted(edges):
        succ[u].append(v)
        indegree[v] += 1
    ready = [v for v in range(n) if indegree[v] == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for w in succ[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                ready.append(w)
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("-w", "--width", type=float, default=0.35)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    args.output.write_text(json.dumps(layered_graph(args.n, args.width, args.seed)) + "\n")


if __name__ == "__main__":
    main()
