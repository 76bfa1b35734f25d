"""Segment costs (2-D difference arrays) and SliceGraph (Algorithm 1) against direct computation."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tests.partition.partition_helpers import random_instance

from onnxpart.partition.model import block_costs, bottleneck
from onnxpart.partition.orders import Dag, keys_of_order
from onnxpart.partition.segments import SegmentCosts, slice_order, slice_value


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 10_000), density=st.floats(0.0, 0.9))
def test_every_segment_cost_matches_eq3(n, seed, density):
    inst = random_instance(n, seed, density, stage_memory=100.0 if seed % 2 else None)
    order = Dag(inst).kahn(np.random.default_rng(seed).random(n))
    costs = SegmentCosts(inst, order)
    for lo in range(n):
        for hi in range(lo, n):
            assign = np.ones(n, dtype=np.int64)
            assign[order[lo:hi + 1]] = 0
            assert costs.query(lo, hi) == pytest.approx(block_costs(inst, assign, 2)[0].cost, abs=1e-9)
    assert costs.query(3, 2) == 0.0


def _best_slicing_brute(inst, order, k):
    n = inst.n
    best = np.inf
    for cuts in itertools.combinations_with_replacement(range(n + 1), k - 1):
        bounds = (0,) + cuts + (n,)
        assign = np.empty(n, dtype=np.int64)
        for b in range(k):
            assign[order[bounds[b]:bounds[b + 1]]] = b
        best = min(best, bottleneck(inst, assign, k))
    return best


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), k=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_slicegraph_is_the_optimal_slicing_of_the_order(n, k, seed):
    inst = random_instance(n, seed)
    order = Dag(inst).kahn(np.random.default_rng(seed + 1).random(n))
    costs = SegmentCosts(inst, order)
    sliced = slice_order(costs, k)
    assert sliced.value == pytest.approx(_best_slicing_brute(inst, order, k), abs=1e-9)
    assert slice_value(costs, k) == pytest.approx(sliced.value)
    assert bottleneck(inst, sliced.assignment, k) == pytest.approx(sliced.value, abs=1e-9)
    assert sliced.assignment.max() < k


def test_kahn_reproduces_an_order_from_its_keys():
    inst = random_instance(12, 3)
    dag = Dag(inst)
    for seed in range(5):
        order = dag.kahn(np.random.default_rng(seed).random(inst.n))
        assert (dag.kahn(keys_of_order(order)) == order).all()
        position = np.empty(inst.n, dtype=int)
        position[order] = np.arange(inst.n)
        assert all(position[u] < position[v] for u, v in inst.edges())
    dfs = dag.dfs_order()
    assert sorted(dfs.tolist()) == list(range(inst.n))
