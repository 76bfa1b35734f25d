"""The load LP's Lagrangian dual (:func:`onnxpart.schedule.latency.bounds.load_dual_bound`), the load bound
that runs at every size: never above the brute-force optimum nor the load LP, never below the work
bound (its first weighting), and near the LP where the LP is solved."""

from __future__ import annotations

import numpy as np
import pytest

from onnxpart.schedule.latency import bounds
from tests.schedule.helpers import brute_force, instance, random_case

TOL = 1e-9


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 3), (2, 7, 2), (3, 5, 3), (4, 6, 2), (5, 4, 4)])
def test_load_dual_is_a_bound_between_work_and_the_optimum(seed, n, k):
    """Fails if a weighting may exceed the optimum (weights not on the simplex, a max for the min, an
    op counted on a device it cannot run on) or if the uniform start is lost."""
    case = random_case(np.random.default_rng(seed), n, k, forbid=True, integer=False)
    inst = instance(case)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])
    dual = bounds.load_dual_bound(inst).value
    assert bounds.work_bound(inst).value - TOL <= dual <= opt + TOL


@pytest.mark.parametrize("seed", range(8))
def test_load_dual_reaches_the_load_lp_without_exceeding_it(seed):
    """On 30-op instances with forbidden devices (no memory: the dual drops only the memory rows) the
    dual is within 2% of the load LP and never above it — fails if the steps do not move the weights."""
    rng = np.random.default_rng(100 + seed)
    inst = instance(random_case(rng, 30, int(rng.integers(2, 5)), p_edge=0.1, forbid=True, integer=False))
    dual, lp = bounds.load_dual_bound(inst).value, bounds.load_lp_bound(inst).value
    assert 0.98 * lp <= dual <= lp * (1 + 1e-9)
    assert dual > bounds.work_bound(inst).value * (1 + 1e-6) or np.isclose(dual, lp)
