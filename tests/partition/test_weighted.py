"""The weighted bottleneck bound (CP-SAT): never above the brute-force optimum, equal to Section 3.2's
bottleneck MIP for π = work, and reported by bounds()."""

import numpy as np
import pytest
from tests.partition.partition_helpers import brute_force, random_instance

from onnxpart.partition import bounds
from onnxpart.partition.exact import bottleneck_mip
from onnxpart.partition.weighted import heavy_block_bound, pigeonhole_weights, weighted_bottleneck

CASES = [(6, 0), (7, 1), (7, 2), (7, 3)]


@pytest.mark.parametrize("n,seed", CASES)
def test_weighted_bottleneck_bounds_the_optimum(n, seed):
    inst = random_instance(n, seed, stage_memory=150.0 if seed % 2 else None)
    for k in (2, 3):
        opt = brute_force(inst, k)
        result = weighted_bottleneck(inst, k, 10, alphas=(0.0, 0.5, 1.0, 3.0))
        assert result.status == "optimal" and len(result.parts) == 4
        assert result.value == max(result.parts) and result.value <= opt * (1 + 1e-9)


def test_alpha_zero_is_the_bottleneck_mip():
    """π = work is Eq. (14) with L = Σ work / k: the same relaxation as the HiGHS bottleneck MIP."""
    for seed in range(3):
        inst = random_instance(8, seed, density=0.25)
        for k in (2, 3):
            L = float(inst.work.sum()) / k
            if L < inst.work.max():
                continue
            value, status = heavy_block_bound(inst, k, pigeonhole_weights(inst, 0.0), 10)
            assert status == "optimal"
            assert value == pytest.approx(bottleneck_mip(inst, k, L, 10).value, rel=1e-6)


def test_weights_are_non_negative_integers_growing_with_io():
    inst = random_instance(7, 4)
    plain, with_io = pigeonhole_weights(inst, 0.0), pigeonhole_weights(inst, 1.0)
    assert plain.dtype == np.int64 and (plain >= 0).all() and (with_io >= 0).all()
    ratio = plain / plain.sum()
    assert np.allclose(ratio, inst.work / inst.work.sum(), atol=1e-8)


def test_bounds_report_the_weighted_bottleneck():
    inst = random_instance(7, 5)
    opt = brute_force(inst, 3)
    lbs = {b.method: b for b in bounds(inst, 3, ("simple", "bottleneck"), time_limit=10)}
    weighted = lbs["weighted-bottleneck"]
    assert weighted.solver == "cp-sat" and "alpha=0" in weighted.note
    assert weighted.value is not None and weighted.value <= opt * (1 + 1e-9)


def test_nothing_to_pay_proves_zero():
    inst = random_instance(5, 6)
    assert heavy_block_bound(inst, 2, np.zeros(inst.n, dtype=np.int64), 5) == (0.0, "optimal")


def test_lb_tree_run_proves_the_same_optimum(monkeypatch):
    """With no time for the default search, the LB-tree run (objective capped at the first run's
    incumbent, if any) must still prove exactly the single-block optimum, never more."""
    import onnxpart.partition.weighted as weighted

    for seed in range(3):
        inst = random_instance(14, seed, density=0.3)
        weights = pigeonhole_weights(inst, 0.5)
        reference, status = heavy_block_bound(inst, 3, weights, 20)
        assert status == "optimal"
        monkeypatch.setattr(weighted, "DEFAULT_SEARCH_SHARE", 0.0)
        value, status = heavy_block_bound(inst, 3, weights, 20)
        monkeypatch.undo()
        assert status == "optimal"
        assert value == pytest.approx(reference, rel=1e-9)
