"""Tiny instances and a brute-force MTPP oracle for the partition tests."""

from __future__ import annotations

import itertools

import numpy as np

from onnxpart.partition.model import Instance, _csr, bottleneck


def random_instance(n: int, seed: int, density: float = 0.35, stage_memory: float | None = None) -> Instance:
    """A random DAG on n ops (edges only from lower to higher index), several consumers per tensor."""
    rng = np.random.default_rng(seed)
    producer, consumers = [], []
    for u in range(n):
        users = [v for v in range(u + 1, n) if rng.random() < density]
        if users:
            producer.append(u)
            consumers.append(users)
    ptr, idx = _csr(consumers)
    return Instance(
        name=f"random{n}-{seed}", op_names=tuple(f"op{i}" for i in range(n)),
        members=tuple((f"op{i}",) for i in range(n)), work=rng.uniform(0.1, 1.0, n).round(3),
        params=rng.integers(0, 100, n).astype(float), tensor_names=tuple(f"t{u}" for u in producer),
        producer=np.array(producer, dtype=np.int64), cons_ptr=ptr, cons_idx=idx,
        transfer=rng.uniform(0.0, 0.8, len(producer)).round(3), bandwidth=100.0, stage_memory=stage_memory,
    )


def brute_force(inst: Instance, k: int) -> float:
    """min over every assignment of ops to k ordered blocks with no backward edge (k**n candidates)."""
    edges = inst.edges()
    best = np.inf
    for combo in itertools.product(range(k), repeat=inst.n):
        assign = np.array(combo)
        if len(edges) and (assign[edges[:, 0]] > assign[edges[:, 1]]).any():
            continue
        best = min(best, bottleneck(inst, assign, k))
    return best
