"""The plan family's dynamic program (onnxpart.plan.dp) against a brute force over every plan of the same
arrays: every run of units on every sub-mesh, the meshes' sizes within the devices, Alpa's objective."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from onnxpart.plan import dp


def _compositions(units: int):
    """Every cut of ``units`` units into consecutive runs: the list of (i, j) runs."""
    for cuts in itertools.product((False, True), repeat=units - 1):
        bounds = [0] + [k + 1 for k, cut in enumerate(cuts) if cut] + [units]
        yield list(zip(bounds, bounds[1:]))


def brute_force(lat, per, sizes, devices: int, micro_batches: int) -> float:
    units = lat.shape[0] - 1
    best = math.inf
    for runs in _compositions(units):
        for meshes in itertools.product(range(len(sizes)), repeat=len(runs)):
            if sum(sizes[m] for m in meshes) > devices:
                continue
            total = sum(lat[i, j, m] for (i, j), m in zip(runs, meshes))
            period = max(per[i, j, m] for (i, j), m in zip(runs, meshes))
            best = min(best, total + (micro_batches - 1) * period if micro_batches > 1 else total)
    return best


def random_arrays(seed: int, units: int, meshes: int):
    rng = np.random.default_rng(seed)
    lat = np.full((units + 1, units + 1, meshes), math.inf)
    per = np.full_like(lat, math.inf)
    for i in range(units):
        for j in range(i + 1, units + 1):
            for m in range(meshes):
                if rng.random() < 0.15:
                    continue  # over memory
                lat[i, j, m] = rng.uniform(0.5, 2.0) * (j - i) / (m + 1)
                per[i, j, m] = lat[i, j, m] + rng.uniform(0.0, 0.5)
    return lat, per


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("micro_batches", [1, 4])
def test_dp_equals_brute_force(seed: int, micro_batches: int) -> None:
    units, sizes = 2 + seed % 5, np.array([1, 2, 4])
    devices = 1 + seed % 4
    lat, per = random_arrays(seed, units, len(sizes))
    want = brute_force(lat, per, sizes, devices, micro_batches)
    found = dp.solve(lat, per, sizes, devices, micro_batches)
    proven = dp.solve(lat, per, sizes, devices, micro_batches, bound=True)
    if not math.isfinite(want):
        assert found is None and proven is None
        return
    assert found.value == pytest.approx(want, rel=1e-12)
    assert proven.value == pytest.approx(want, rel=1e-12)
    total = sum(lat[i, j, m] for i, j, m in found.stages)
    period = max(per[i, j, m] for i, j, m in found.stages)
    assert total + (micro_batches - 1) * period == pytest.approx(found.value, rel=1e-12)
    assert sum(sizes[m] for _, _, m in found.stages) <= devices


@pytest.mark.parametrize("seed", range(6))
def test_grouped_caps_keep_the_bound_proven_and_the_plan_within_a_step(seed: int, monkeypatch) -> None:
    """With the periods grouped (more than EXACT_CANDIDATES of them), the bound stays below the optimum and
    the plan within a factor 1 + STEP of it (a grouping that kept the wrong end of a group breaks one)."""
    monkeypatch.setattr(dp, "EXACT_CANDIDATES", 2)
    monkeypatch.setattr(dp, "STEP", 0.3)
    units, sizes = 5, np.array([1, 2])
    lat, per = random_arrays(100 + seed, units, len(sizes))
    want = brute_force(lat, per, sizes, 3, 8)
    found = dp.solve(lat, per, sizes, 3, 8)
    proven = dp.solve(lat, per, sizes, 3, 8, bound=True)
    assert proven.value <= want * (1 + 1e-12)
    assert want <= found.value <= want * 1.3 * (1 + 1e-12)
