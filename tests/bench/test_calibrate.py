"""The calibration fit recovers known answers from synthetic unit times."""

from __future__ import annotations

import numpy as np
import pytest

from onnxpart.bench.fit import fit_units


def _units(count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    work = [{"MatMul": rng.uniform(1e-4, 1e-3), "Add": rng.uniform(1e-5, 1e-4), "Softmax": rng.uniform(1e-5, 5e-5)}
            for _ in range(count)]
    return work, [int(rng.integers(3, 40)) for _ in range(count)]


def test_a_known_scale_per_op_type_and_overhead_are_recovered():
    work, launches = _units(8)
    scales, overhead = {"MatMul": 2.5, "Add": 1.3, "Softmax": 4.0}, 6e-6
    measured = [sum(scales[t] * w for t, w in unit.items()) + overhead * n for unit, n in zip(work, launches)]
    fit = fit_units(work, launches, measured)
    assert fit.kind == "per-op-type"
    assert fit.scales == pytest.approx(scales, rel=1e-6)
    assert fit.overhead == pytest.approx(overhead, rel=1e-6)
    assert fit.residual < 1e-9


def test_few_units_get_one_scale_and_an_overhead():
    work, launches = _units(3)
    measured = [1.7 * sum(unit.values()) + 2e-6 * n for unit, n in zip(work, launches)]
    fit = fit_units(work, launches, measured)
    assert fit.kind == "global"
    assert fit.scale("MatMul") == pytest.approx(1.7, rel=1e-6) and fit.overhead == pytest.approx(2e-6, rel=1e-6)


def test_two_units_get_a_scale_alone_with_its_residual():
    work, launches = _units(2)
    measured = [3.0 * sum(work[0].values()), 3.0 * sum(work[1].values()) * 1.1]
    fit = fit_units(work, launches, measured)
    assert fit.kind == "scale" and fit.overhead == 0.0
    assert 3.0 < fit.scale("Add") < 3.3 and 0 < fit.residual < 0.1


def test_noise_that_makes_an_overhead_negative_drops_it():
    work, launches = _units(3)
    measured = [2.0 * sum(unit.values()) - 1e-5 * n for unit, n in zip(work, launches)]
    fit = fit_units(work, launches, measured)
    assert fit.overhead >= 0 and all(s > 0 for s in fit.scales.values())


def test_kernel_times_give_each_op_type_its_scale_and_the_walls_the_overhead():
    from onnxpart.bench.fit import fit_kernels

    rng = np.random.default_rng(1)
    types = ["Conv", "Relu", "Gemm"] * 10
    work = rng.uniform(1e-4, 1e-3, len(types)).tolist()
    scales, overhead = {"Conv": 8.0, "Relu": 1.5, "Gemm": 3.0}, 5e-6
    kernel = [scales[t] * w for t, w in zip(types, work)]
    stage_ops, launches, generators = [list(range(10)), list(range(10, 30))], [12, 20], [1e-3, 0.0]
    measured = [sum(kernel[i] for i in ops) + g + overhead * n for ops, g, n in zip(stage_ops, generators, launches)]
    fit = fit_kernels(types, work, kernel, stage_ops, launches, generators, measured)
    assert fit.kind == "per-op-type" and fit.units == 2
    assert {t: fit.scale(t) for t in scales} == pytest.approx(scales, rel=1e-9)
    assert fit.overhead == pytest.approx(overhead, rel=1e-6) and fit.residual < 1e-9
