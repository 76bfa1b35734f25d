"""The load LP's Lagrangian dual (:func:`onnxpart.schedule.latency.bounds.load_dual_bound`), the load bound
that runs at every size: never above the brute-force optimum nor the load LP, never below the work
bound (its first weighting), near the LP where the LP is solved, and raised by its memory prices where
memory (3.7) binds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import bounds, load_cuts
from tests.schedule.helpers import brute_force, instance, random_case

TOL = 1e-9


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 3), (2, 7, 2), (3, 5, 3), (4, 6, 2), (5, 4, 4)])
def test_load_dual_is_a_bound_between_work_and_the_optimum(seed, n, k):
    """Both maximizations of the dual, by subgradient steps and by cutting planes (:mod:`.load_cuts`).
    Fails if a weighting may exceed the optimum (weights off the simplex, a negative price, a max for the
    min, an op counted on a device it cannot run on, capacities charged on the wrong side) or if the
    uniform start is lost."""
    case = random_case(np.random.default_rng(seed), n, k, forbid=True, integer=False, memory=seed % 2 == 1)
    inst = instance(case)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"], case["mem"], case["capacity"])
    for bound in (bounds.load_dual_bound(inst), load_cuts.load_cuts_bound(inst)):
        assert bounds.work_bound(inst).value - TOL <= bound.value <= opt + TOL, bound


@pytest.mark.parametrize("seed", range(8))
def test_load_dual_reaches_the_load_lp_without_exceeding_it(seed):
    """On 30-op instances with forbidden devices (no memory: the dual drops only the memory rows) the
    dual is within 2% of the load LP and never above it — fails if the steps do not move the weights."""
    rng = np.random.default_rng(100 + seed)
    inst = instance(random_case(rng, 30, int(rng.integers(2, 5)), p_edge=0.1, forbid=True, integer=False))
    dual, lp = bounds.load_dual_bound(inst).value, bounds.load_lp_bound(inst).value
    assert 0.98 * lp <= dual <= lp * (1 + 1e-9)
    assert dual > bounds.work_bound(inst).value * (1 + 1e-6) or np.isclose(dual, lp)


def test_memory_prices_lift_the_bound_where_memory_binds():
    """Four ops of 1 s on a device that holds one of them, 10 s on the other: the optimum is 30 s (three on
    the slow device); without its memory rows the load bound is 3.6 s. The prices must lift it well above
    that and stay below the optimum — fails if ``μ`` never moves or is charged on the wrong side."""
    inst = Instance([[1.0, 10.0]] * 4, [], mem=[1.0] * 4, capacity=[1.0, math.inf])
    opt, _ = brute_force(inst.time, [], 0.0, 1.0, inst.mem, inst.capacity)
    assert opt == pytest.approx(30.0)
    free = bounds.load_dual_bound(Instance([[1.0, 10.0]] * 4, [])).value
    assert free <= 4.0
    assert 2 * free < bounds.load_dual_bound(inst).value <= opt + TOL
