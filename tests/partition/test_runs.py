"""SliceGraph on runs (:mod:`onnxpart.partition.runs`): the contracted instance's segment costs are the
exact Eq. (3) costs of the unions of runs, and on long orders the slicing is a real one of the order,
never better than the dense optimum and its reported value its true bottleneck."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tests.partition.partition_helpers import random_instance

from onnxpart.partition import runs
from onnxpart.partition.model import block_costs
from onnxpart.partition.orders import Dag
from onnxpart.partition.segments import SegmentCosts, slice_order


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10_000), density=st.floats(0.0, 0.9))
def test_run_segments_cost_what_their_union_costs(n, seed, density):
    inst = random_instance(n, seed, density, stage_memory=100.0 if seed % 2 else None)
    rng = np.random.default_rng(seed)
    order = Dag(inst).kahn(rng.random(n))
    starts = np.union1d([0], rng.choice(np.arange(1, n), size=int(rng.integers(0, n)), replace=False))
    run_of_op = np.empty(n, dtype=np.int64)
    run_of_op[order] = np.searchsorted(starts, np.arange(n), side="right") - 1
    contracted = runs.contract(inst, order, starts, run_of_op)
    costs = SegmentCosts(contracted, np.arange(contracted.n))
    for lo in range(contracted.n):
        for hi in range(lo, contracted.n):
            assign = np.where((run_of_op >= lo) & (run_of_op <= hi), 0, 1)
            assert costs.query(lo, hi) == pytest.approx(block_costs(inst, assign, 2)[0].cost, abs=1e-9)


@pytest.mark.parametrize("k", [2, 5, 12])
def test_long_orders_get_a_true_slicing_near_the_dense_optimum(monkeypatch, k):
    inst = random_instance(400, seed=k, density=0.01)
    order = Dag(inst).kahn(np.random.default_rng(k).random(inst.n))
    dense = slice_order(SegmentCosts(inst, order), k)
    monkeypatch.setattr(runs, "DENSE_LIMIT", 60)  # 400 ops: runs, and refinement around the cuts
    sliced = runs.best_slicing(inst, order, k)
    blocks = sliced.assignment[order]
    assert (np.diff(blocks) >= 0).all()  # a slicing of the order: contiguous blocks in order
    assert sliced.value == pytest.approx(max(c.cost for c in block_costs(inst, sliced.assignment, k)), rel=1e-12)
    assert dense.value * (1 - 1e-12) <= sliced.value <= dense.value * 1.05
    assert runs.best_value(inst, order, k) == sliced.value
