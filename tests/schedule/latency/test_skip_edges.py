"""The skip-edge relaxation (:mod:`onnxpart.schedule.latency.skip_edges`): dropping the residual edge
around a block cuts it into smaller modules, and SPLIT's DP on what is left is a proven lower bound —
never above the brute-force optimum of the whole graph."""

from __future__ import annotations

import numpy as np

from onnxpart.schedule import Instance
from onnxpart.schedule.common.modules import cut_ops
from onnxpart.schedule.latency import skip_edges, split
from tests.schedule.helpers import brute_force


def residual_blocks(rng: np.random.Generator, blocks: int, k: int) -> dict:
    """A chain of ``blocks`` residual blocks: entry ``x → a → b → c`` and the residual ``x → c`` (``c`` the
    next block's entry, op 0 the first), random integer times and bytes on ``k`` devices: no op inside a
    block is a cut op while its residual edge is there."""
    edges, x = [], 0
    for block in range(blocks):
        a, b, c = 1 + 3 * block, 2 + 3 * block, 3 + 3 * block
        edges += [(x, a, float(rng.integers(1, 5))), (a, b, float(rng.integers(1, 5))),
                  (b, c, float(rng.integers(1, 5))), (x, c, float(rng.integers(1, 5)))]
        x = c
    return dict(time=rng.integers(1, 9, size=(1 + 3 * blocks, k)).astype(float), edges=edges,
                latency=float(rng.integers(0, 3)), bandwidth=float(rng.choice([1.0, 2.0, 4.0])))


def test_the_residual_edges_are_dropped_and_free_one_op_modules():
    """Three blocks: the three residual edges (and only they) go, and every op becomes a cut op; where the
    block's ops are parallel branches (no cut even without the residual) its edge stays — fails if every
    edge between consecutive cuts is dropped, or none."""
    case = residual_blocks(np.random.default_rng(0), blocks=3, k=2)
    inst = Instance(case["time"], case["edges"], latency=case["latency"], bandwidth=case["bandwidth"])
    assert cut_ops(inst) == [0, 3, 6, 9]
    residual = sorted(e for e, (i, j, _) in enumerate(inst.edges) if j - i == 3)
    assert sorted(skip_edges.skip_edges(inst)) == residual
    relaxed = skip_edges.relax(inst)
    assert len(relaxed.edges) == len(inst.edges) - 3 and cut_ops(relaxed) == list(range(10))
    branches = Instance(np.ones((4, 2)), [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0), (0, 3, 1.0)])
    assert skip_edges.skip_edges(branches) == [] and len(skip_edges.relax(branches).edges) == 5


def test_split_on_the_relaxation_never_exceeds_the_optimum():
    """On eight random two-block instances (2–3 devices), SPLIT's DP bound on ``G − E`` is at most the
    brute-force optimum of ``G``. The same bound with the dropped edges' cheapest transfer added (a
    dishonest relaxation that charges the residual as if it always crossed devices) exceeds the optimum on
    some of them: the instances can catch a bound that is not one."""
    dishonest_caught = False
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        case = residual_blocks(rng, blocks=2, k=int(rng.integers(2, 4)))
        inst = Instance(case["time"], case["edges"], latency=case["latency"], bandwidth=case["bandwidth"])
        optimum, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])
        dropped = skip_edges.skip_edges(inst)
        res = split.milp_split(skip_edges.relax(inst), time_limit=2.0)
        assert res.bound <= optimum + 1e-9
        cheapest = sum(min(inst.delays[e][u, v] for u in range(inst.k) for v in range(inst.k) if u != v)
                       for e in dropped)
        dishonest_caught |= res.bound + cheapest > optimum + 1e-9
    assert dishonest_caught
