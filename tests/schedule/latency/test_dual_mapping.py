"""``lagrange``, the load dual's mapping list-scheduled by HEFT's order
(:mod:`onnxpart.schedule.latency.dual_mapping`): valid wherever it answers, and, where memory (3.7) binds,
near the load bound where the memory-blind list schedulers leave the cheap-to-move ops on the fast
device and the rest on the slow one (issue 30: HEFT 2.237 s, ``lagrange`` 0.729 s, bound 0.724 s on the
20,000-op DAG)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance, Options, solve
from onnxpart.schedule.latency import heuristics, load_cuts
from onnxpart.schedule.latency.simulator import validate
from onnxpart.schedule.throughput import heuristics as batch_heuristics
from onnxpart.schedule.throughput.simulator import validate as validate_batch
from tests.schedule.helpers import brute_force, instance, random_case


def memory_bound_case(seed: int, **batching) -> Instance:
    """60 ops in a banded DAG; device 0 fast and holding half the bytes, device 1 2–40× slower."""
    rng = np.random.default_rng(300 + seed)
    n = 60
    edges = [(i, j, 1.0) for i in range(n) for j in range(i + 1, min(n, i + 4)) if rng.random() < 0.3]
    time = np.column_stack([rng.uniform(0.1, 1.0, n), rng.uniform(0.1, 1.0, n) * rng.uniform(2, 40, n)])
    mem = rng.uniform(1.0, 10.0, size=n)
    return Instance(time, edges, mem=mem, capacity=[mem.sum() / 2, math.inf], latency=0.01, bandwidth=100.0,
                    **batching)


@pytest.mark.parametrize("seed", range(4))
def test_lagrange_is_near_the_load_bound_where_memory_binds(seed):
    """Fails if the memory prices are not in the mapping (it is then MET's, over-full, or HEFT's) or the
    regret order sends the wrong ops to the slow device: HEFT is 1.6–2.5× the bound on these."""
    inst = memory_bound_case(seed)
    res = heuristics.lagrange(inst)
    assert res is not None and not validate(inst, res.schedule)
    bound = load_cuts.load_cuts_bound(inst).value
    assert bound <= res.schedule.makespan <= 1.15 * bound
    assert res.schedule.makespan < 0.75 * heuristics.heft(inst).schedule.makespan


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 3), (3, 5, 3), (5, 6, 2)])
def test_lagrange_answers_only_valid_schedules(seed, n, k):
    """Forbidden devices and tight memory: no answer, or a valid one no shorter than the brute force's
    optimum — fails if an op lands where it cannot run or past a device's memory."""
    case = random_case(np.random.default_rng(seed), n, k, forbid=True, integer=False, memory=True)
    inst = instance(case)
    res = heuristics.lagrange(inst)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"], case["mem"], case["capacity"])
    assert res is None or (not validate(inst, res.schedule) and res.schedule.makespan >= opt - 1e-9)


def test_lagrange_runs_by_default_and_for_a_batch():
    """The latency default runs it (its row in the certificate); the throughput variant gives a valid
    batched schedule — fails if either registry lost it."""
    inst = memory_bound_case(0)
    found = solve(inst, Options(time_limit=5.0, methods=("met", "lagrange")))
    assert found.method == "lagrange" and "lagrange" in Options().methods
    batched = memory_bound_case(0, batch_sizes=[(1, 2)] * 2)
    res = batch_heuristics.lagrange(batched, 2)
    assert res.schedule is not None and not validate_batch(batched, res.schedule)


def test_lagrange_spreads_ops_over_identical_devices():
    """12 independent 1 s ops on 3 identical devices: the dual weighs them alike, so every op ties; the
    least-loaded tie-break gives 4 s — fails if the ties all go to the first device (12 s)."""
    inst = Instance(np.ones((12, 3)), [])
    assert heuristics.lagrange(inst).schedule.makespan == pytest.approx(4.0)
