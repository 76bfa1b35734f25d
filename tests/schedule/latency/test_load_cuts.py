"""The load LP's Lagrangian dual by cutting planes (:mod:`onnxpart.schedule.latency.load_cuts`): a proven
bound (never above the brute-force optimum), never below the work bound it starts from, and the load LP's
own value where memory (3.7) binds — where the subgradient ascent of ``load_dual_bound`` stops short."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import bounds, load_cuts
from tests.schedule.helpers import brute_force, instance, random_case

TOL = 1e-9


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 3), (2, 6, 2), (3, 5, 3), (5, 4, 4)])
def test_load_cuts_is_a_bound_between_work_and_the_optimum(seed, n, k):
    """Fails if a point off the weights' simplex or with a negative price is evaluated, if an op is
    counted on a device it cannot run on, or if the capacities are charged on the wrong side."""
    case = random_case(np.random.default_rng(seed), n, k, forbid=True, integer=False, memory=seed % 2 == 1)
    inst = instance(case)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"], case["mem"], case["capacity"])
    cuts = load_cuts.load_cuts_bound(inst).value
    assert bounds.work_bound(inst).value - TOL <= cuts <= opt + TOL


@pytest.mark.parametrize("seed", range(4))
def test_load_cuts_reaches_the_load_lp_where_memory_binds(seed):
    """On 40-op instances whose fast device holds a third of the bytes, the cuts reach the load LP's
    optimum (HiGHS) to 1e-6 and never pass it — fails if the model's maximum is not where the next
    point is taken, or if the cuts stop early."""
    rng = np.random.default_rng(200 + seed)
    k = int(rng.integers(2, 4))
    time = rng.uniform(0.1, 1.0, size=(40, k)) * np.geomspace(1.0, 20.0, k)  # device 0 the fastest
    mem = rng.uniform(1.0, 10.0, size=40)
    inst = Instance(time, [], mem=mem, capacity=[mem.sum() / 3] + [math.inf] * (k - 1))
    lp = bounds.load_lp_bound(inst).value
    assert lp == pytest.approx(load_cuts.load_cuts_bound(inst).value, rel=1e-6)
    assert load_cuts.load_cuts_bound(inst).value <= lp * (1 + 1e-9)
