"""The load LP's Lagrangian dual by cutting planes (:mod:`onnxpart.schedule.latency.load_cuts`): the load
LP's own value where memory (3.7) binds — where the subgradient ascent of ``load_dual_bound`` stops short.
That it is a bound between the work bound and the brute-force optimum: ``test_load_dual.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import bounds, load_cuts


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
