"""The window search: a window's CP-SAT model is the exact problem on its ops (brute force), a re-partition
leaves the other blocks' costs alone, and the search is valid and never worse than its start."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.partition import Options, solve
from onnxpart.partition.model import block_costs, check_assignment
from onnxpart.partition.window_lns import applies, repartition, window_search
from tests.partition.partition_helpers import random_instance
from tests.partition.test_local_search import random_partition


def costs(inst, assignment, k) -> np.ndarray:
    return np.array([c.cost for c in block_costs(inst, assignment, k)])


def window_optimum(inst, assignment, k, first, width) -> float:
    """min over every valid re-assignment of the window's ops to its blocks of the window's bottleneck."""
    ops = np.flatnonzero((assignment >= first) & (assignment < first + width))
    edges = inst.edges()
    best = np.inf
    for combo in itertools.product(range(first, first + width), repeat=len(ops)):
        trial = assignment.copy()
        trial[ops] = combo
        if len(edges) and (trial[edges[:, 0]] > trial[edges[:, 1]]).any():
            continue
        best = min(best, costs(inst, trial, k)[first:first + width].max())
    return best


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), k=st.integers(2, 4), seed=st.integers(0, 10_000), memory=st.booleans(),
       data=st.data())
def test_window_model_is_exact_and_leaves_other_blocks_alone(n, k, seed, memory, data):
    inst = random_instance(n, seed, stage_memory=60.0 if memory else None)
    start = random_partition(inst, k, seed)
    width = data.draw(st.integers(2, k))
    first = data.draw(st.integers(0, k - width))
    found = repartition(inst, start, first, width, time_limit=30.0, seed=seed)
    assert found is not None  # the start itself is a solution
    check_assignment(inst, found, k)
    outside = np.r_[0:first, first + width:k]
    inside = (start >= first) & (start < first + width)
    np.testing.assert_array_equal(found[~inside], start[~inside])
    np.testing.assert_allclose(costs(inst, found, k)[outside], costs(inst, start, k)[outside], rtol=1e-12)
    optimum = window_optimum(inst, start, k, first, width)
    assert costs(inst, found, k)[first:first + width].max() == pytest.approx(optimum, rel=1e-5, abs=1e-9)


def test_window_search_is_valid_and_never_worse():
    inst = random_instance(30, 0, density=0.1)
    k = 5
    start = random_partition(inst, k, 0)
    found = window_search(inst, start, k, 0, lambda _: False, deadline=time.monotonic() + 5)
    check_assignment(inst, found.assignment, k)
    assert found.value == pytest.approx(costs(inst, found.assignment, k).max(), rel=1e-12)
    assert found.value < costs(inst, start, k).max()  # a random partition is far from window-optimal
    assert found.improvements >= 1 and found.windows >= found.improvements


def test_window_search_stops_at_its_deadline_and_on_stop():
    inst = random_instance(60, 3, density=0.1)
    start = random_partition(inst, 6, 3)
    stopped = window_search(inst, start, 6, 0, lambda _: True)
    assert stopped.windows == 0 and np.array_equal(stopped.assignment, start)
    late = window_search(inst, start, 6, 0, lambda _: False, deadline=time.monotonic() - 1)
    assert late.windows == 0 and np.array_equal(late.assignment, start)


def test_window_search_runs_in_solve_and_is_reported():
    inst = random_instance(40, 11, density=0.12)
    solution = solve(inst, Options(k=4, time_limit=5, bounds=(), ideal_limit=0, random_orders=5))
    assert applies(inst, 4)
    assert solution.search["window_search"]["windows"] >= 1
    check_assignment(inst, solution.assignment, 4)


def test_window_search_is_off_where_two_blocks_are_too_large():
    inst = random_instance(30, 1, density=0.1)
    assert applies(inst, 2) and not applies(inst, 1)
    big = random_instance(500, 1, density=0.004)
    assert not applies(big, 2) and applies(big, 4)
