"""SA and the biased (1+1) EA, written once (:mod:`onnxpart.schedule.common.search`) and used by both
objectives: seeded, a fixed number of fitness evaluations, the EA never worse than its parent, and each
objective's searches are this one search over its own choices."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance
from onnxpart.schedule.common import search as shared
from onnxpart.schedule.latency import heuristics as latency_heuristics
from onnxpart.schedule.throughput import heuristics as throughput_heuristics

CHOICES = [[0, 1, 2, 3]] * 6 + [[5]]  # the last op has one choice: never moved


def distance(state: list) -> float:
    """Separable toy fitness with its optimum at (3, 0, 3, 0, 3, 0, 5)."""
    return float(sum(abs(x - (3 if i % 2 == 0 else 0)) for i, x in enumerate(state[:6])))


@pytest.mark.parametrize("method", ["sa", "ea"])
def test_same_seed_same_answer_and_a_fixed_number_of_evaluations(method):
    runs = [shared.search(method, distance, [1] * 6 + [5], CHOICES, iterations=300, seed=7) for _ in range(2)]
    assert runs[0].best == runs[1].best and runs[0].last == runs[1].last
    assert runs[0].evaluations == 301  # the start, then one per iteration
    assert runs[0].best[6] == 5  # an op with one choice is never moved


@pytest.mark.parametrize("method", ["sa", "ea"])
def test_the_search_reaches_the_optimum_of_a_separable_fitness(method):
    found = shared.search(method, distance, [1] * 6 + [5], CHOICES, iterations=2000, seed=1)
    assert distance(found.best) == 0.0


def test_the_ea_accepts_no_worse_child_so_its_last_parent_is_a_best_state():
    seen = []

    def fitness(state):
        seen.append(distance(state))
        return seen[-1]

    found = shared.search("ea", fitness, [1] * 6 + [5], CHOICES, iterations=200, seed=3)
    assert distance(found.last) == distance(found.best) == min(seen)


def test_nothing_to_move_is_one_evaluation():
    found = shared.search("sa", distance, [5], [[5]], iterations=100, seed=0)
    assert found.evaluations == 1 and found.best == [5]


def test_an_infeasible_start_is_left_for_a_feasible_state():
    """``inf`` fitness: SA only moves to finite states by the acceptance rule, never back."""
    found = shared.search("sa", lambda s: math.inf if s[0] == 0 else float(s[0]), [0, 0], [[0, 1, 2], [0]],
                          iterations=50, seed=0)
    assert found.best[0] == 1


@pytest.mark.parametrize("method", ["sa", "ea"])
def test_both_objectives_run_this_search(method, monkeypatch):
    """Latency's and throughput's SA/EA are the shared search over each op's devices or splits."""
    calls = []
    real = shared.search

    def spy(name, fitness, init, choices, *args):
        calls.append((name, [len(c) for c in choices]))
        return real(name, fitness, init, choices, *args)

    monkeypatch.setattr(latency_heuristics, "search", spy)
    monkeypatch.setattr(throughput_heuristics, "search", spy)
    rng = np.random.default_rng(0)
    inst = Instance(rng.integers(1, 9, size=(4, 2)).astype(float), [(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0)],
                    latency=0.5, bandwidth=2.0, batch_sizes=[(1, 2), (1, 2)])
    run = {"sa": "simulated_annealing", "ea": "one_plus_one_ea"}[method]
    getattr(latency_heuristics, run)(inst, [0, 0, 0, 0], iterations=20, seed=1)
    start = throughput_heuristics.met(inst, 2).schedule.splits
    getattr(throughput_heuristics, run)(inst, 2, start, iterations=20, seed=1)
    assert [name for name, _ in calls] == [method, method]
    splits = throughput_heuristics.op_splits(inst, 2)
    assert calls[0][1] == [2] * 4 and calls[1][1] == [len(s) for s in splits]
