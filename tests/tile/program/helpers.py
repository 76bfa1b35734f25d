"""Brute force for the tile tests, written from the paper's definition and independent of the numpy
evaluation in onnxpart.tile: C(X) = Σ_e w(e) · min_l (base(l) + Σ_{v∈e} c(v)·[X[v] ≠ l[v]])."""

from __future__ import annotations

import itertools

from onnxpart.tile.program.model import Instance


def brute_cost(instance: Instance, labels) -> int:
    total = 0
    for e in instance.edges:
        total += e.weight * min(
            e.base_cost(t) + sum(instance.vertex_weight[v] for j, v in enumerate(e.vertices) if labels[v] != tup[j])
            for t, tup in enumerate(e.tuples))
    return total


def brute_force(instance: Instance) -> int:
    """The optimum by trying every labeling (tiny instances only)."""
    assert instance.space_size() <= 3 ** 8, "brute force is for tiny instances"
    return min(brute_cost(instance, x) for x in itertools.product(*instance.domains))
