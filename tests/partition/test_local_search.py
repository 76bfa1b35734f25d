"""Local search on partitions: incremental Eq. (3) costs, validity, never worse, local optimality."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.partition import Options, solve
from onnxpart.partition.local_search import _State, descend, improve, iterated, kick, lex_lower
from onnxpart.partition.model import block_costs, bottleneck, check_assignment
from onnxpart.partition.orders import BrkgaOptions
from tests.partition.partition_helpers import brute_force, random_instance


def random_partition(inst, k: int, seed: int) -> np.ndarray:
    """A random valid partition: each op in a random block no earlier than its predecessors'."""
    rng = np.random.default_rng(seed)
    preds = inst.predecessors()
    block = np.zeros(inst.n, dtype=np.int64)
    for v in range(inst.n):
        lo = int(block[preds[v]].max(initial=0))
        block[v] = rng.integers(lo, k)
    return block


def costs(inst, assignment, k) -> np.ndarray:
    return np.array([c.cost for c in block_costs(inst, assignment, k)])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), k=st.integers(1, 5), seed=st.integers(0, 10_000), memory=st.booleans())
def test_incremental_costs_match_eq3(n, k, seed, memory):
    inst = random_instance(n, seed, stage_memory=60.0 if memory else None)
    state = _State(inst, random_partition(inst, k, seed), k)
    rng = np.random.default_rng(seed)
    for _ in range(30):
        v = int(rng.integers(n))
        lo, hi = state.range_of(v)
        target = int(rng.integers(lo, hi + 1))
        if target == state.block[v]:
            continue
        terms = state.try_move(v, target)
        moved = state.block.copy()
        moved[v] = target
        assert (terms is not None) == lex_lower(costs(inst, moved, k), state.cost)
        if terms is not None:
            state.apply(v, target, terms)
            np.testing.assert_allclose(state.cost, costs(inst, state.block, k), rtol=1e-9, atol=1e-9)
    check_assignment(inst, state.block, k)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 16), k=st.integers(2, 5), seed=st.integers(0, 10_000), memory=st.booleans())
def test_group_moves_price_like_eq3_and_stay_valid(n, k, seed, memory):
    inst = random_instance(n, seed, stage_memory=60.0 if memory else None)
    state = _State(inst, random_partition(inst, k, seed), k)
    rng = np.random.default_rng(seed)
    for _ in range(30):
        v, forward = int(rng.integers(n)), bool(rng.integers(2))
        target = int(state.block[v]) + (1 if forward else -1)
        if not 0 <= target < k:
            continue
        group = state.closure(v, forward)
        moved = state.block.copy()
        moved[group] = target
        check_assignment(inst, moved, k)  # a group move never breaks an edge
        terms = state.try_group(group, target)
        assert (terms is not None) == lex_lower(costs(inst, moved, k), state.cost)
        if terms is not None:
            state.apply_group(group, target, terms)
            np.testing.assert_allclose(state.cost, costs(inst, state.block, k), rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 16), k=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_never_worse_and_valid(n, k, seed):
    inst = random_instance(n, seed)
    start = random_partition(inst, k, seed)
    check_assignment(inst, kick(inst, start, k, np.random.default_rng(seed), 3), k)
    for result in (improve(inst, start, k, seed), iterated(inst, start, k, seed, lambda _: False, kicks=5)):
        check_assignment(inst, result.assignment, k)
        assert result.value == pytest.approx(bottleneck(inst, result.assignment, k), rel=1e-9)
        assert result.value <= bottleneck(inst, start, k) * (1 + 1e-9)


@pytest.mark.parametrize("n,k,seed", [(5, 2, 0), (6, 3, 1), (6, 2, 2), (7, 3, 3), (5, 3, 4), (7, 2, 5)])
def test_tiny_graphs_against_brute_force(n, k, seed):
    """Never below the optimum; the descent ends where no valid single move lowers the sorted costs
    (checked from scratch); with kicks it reaches the brute-force optimum on these tiny graphs."""
    inst = random_instance(n, seed)
    optimum = brute_force(inst, k)
    start = random_partition(inst, k, seed)
    local, _ = descend(inst, start, k, np.random.default_rng(seed))
    edges = inst.edges()
    here = costs(inst, local, k)
    for v in range(n):
        for b in range(k):
            moved = local.copy()
            moved[v] = b
            if b != local[v] and not (len(edges) and (moved[edges[:, 0]] > moved[edges[:, 1]]).any()):
                assert not lex_lower(costs(inst, moved, k), here)
    result = iterated(inst, start, k, seed, lambda _: False, kicks=100)
    assert result.value >= optimum * (1 - 1e-9)
    assert result.value == pytest.approx(optimum, rel=1e-9)


def test_deterministic_with_seed():
    inst = random_instance(30, 7, density=0.15)
    start = random_partition(inst, 4, 7)
    runs = [iterated(inst, start, 4, 3, lambda _: False, kicks=20) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].assignment, runs[1].assignment)


def test_solve_is_no_worse_than_its_order_search():
    inst = random_instance(40, 11, density=0.12)
    options = dict(k=4, time_limit=20, bounds=(), ideal_limit=0, random_orders=5)
    solution = solve(inst, Options(**options))
    check_assignment(inst, solution.assignment, 4)
    assert solution.value == pytest.approx(bottleneck(inst, solution.assignment, 4), rel=1e-12)
    assert solution.method in ("slicegraph", "local-search", "window-search")
    # With no bound job, the search ends on its own (all BRKGA generations, then a fixed number of
    # local-search kicks), not at the time limit.
    assert solution.search["generations"] == BrkgaOptions().generations and "local_search_moves" in solution.search
