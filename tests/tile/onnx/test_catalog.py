"""The ONNX layout catalog draft: algorithms per op type and collective costs on small cases."""

from __future__ import annotations

import pytest

from onnxpart.tile.onnx.catalog import (P, R, S, Mesh, collective_time, elementwise_algorithms, gemm_algorithms,
                                   layouts, matmul_algorithms, normalization_algorithms, reshard,
                                   transpose_algorithms)
from onnxpart.tile.onnx.mesh import make_mesh
from onnxpart.tile.onnx.resharding import reshard_time


def by_name(algs):
    return {a.name: a for a in algs}


def test_matmul_2d_and_batched():
    algs = by_name(matmul_algorithms(2, 2, 4))
    assert algs["rows"].inputs == (S(0), R) and algs["rows"].output == S(0) and algs["rows"].divisor == 4
    assert algs["cols"].inputs == (R, S(1)) and algs["cols"].output == S(1)
    assert algs["contraction"].inputs == (S(1), S(0)) and algs["contraction"].output == P
    assert algs["replicated"].divisor == 1
    batched = by_name(matmul_algorithms(3, 2, 4))  # [b, m, k] @ [k, n]: B broadcasts over b
    assert batched["batch0"].inputs == (S(0), R) and batched["batch0"].output == S(0)
    assert batched["rows"].inputs == (S(1), R) and batched["rows"].output == S(1)


def test_gemm_transposes_and_bias():
    algs = by_name(gemm_algorithms(True, True, 2, c_shape=[8], out_shape=[4, 8]))
    assert algs["rows"].inputs == (S(1), R, R)  # Aᵀ: m is A's dim 1; the [n] bias broadcasts over rows
    assert algs["cols"].inputs == (R, S(0), S(0))  # Bᵀ: n is B's dim 0; the bias is sharded with Y's cols
    assert algs["contraction"].inputs == (S(0), S(1), P) and algs["contraction"].output == P  # bias added once


def test_elementwise_broadcasting_and_partials():
    algs = by_name(elementwise_algorithms([6, 8], [[6, 8], [8]], 2, linear="sum"))
    assert algs["shard0"].inputs == (S(0), R)  # the bias has no row dimension: replicated
    assert algs["shard1"].inputs == (S(1), S(0))
    assert algs["partial-sum"].inputs == (P, P) and algs["partial-sum"].output == P
    scaled = by_name(elementwise_algorithms([6, 1], [[6, 1], [1]], 2, linear="scale"))
    assert "shard1" not in scaled  # a size-1 dimension is never sharded
    assert scaled["partial-scale1"].inputs == (R, P)


def test_transpose_and_normalizations():
    algs = by_name(transpose_algorithms([2, 0, 1], 2))
    assert algs["shard0"].inputs == (S(2),) and algs["shard0"].output == S(0)
    assert algs["partial"].output == P
    soft = by_name(normalization_algorithms(3, -1, "Softmax", 2))
    assert set(soft) == {"replicated", "shard0", "shard1"}
    ln = by_name(normalization_algorithms(3, 1, "LayerNormalization", 2))
    assert set(ln) == {"replicated", "shard0"} and ln["shard0"].inputs == (S(0), R, R)


def test_layouts_of_a_tensor():
    assert layouts([4, 1, 3], 2) == (R, P, S(0), S(2))
    assert layouts([4], 1) == (R, P)


def test_collective_formulas():
    mesh = Mesh(4, latency=1e-6, bandwidth=1e9)
    n = 4e6
    assert collective_time("all-gather", n, mesh) == pytest.approx(3e-6 + 0.75 * 4e-3)
    assert collective_time("reduce-scatter", n, mesh) == collective_time("all-gather", n, mesh)
    assert collective_time("all-reduce", n, mesh) == pytest.approx(2 * collective_time("all-gather", n, mesh))
    assert collective_time("all-to-all", n, mesh) == pytest.approx(3e-6 + 3 / 16 * 4e-3)
    assert collective_time("all-reduce", n, Mesh(1)) == 0.0
    with pytest.raises(ValueError):
        collective_time("broadcast", n, mesh)


def test_resharding_table():
    assert reshard(S(0), S(0)) is None and reshard(R, S(1)) is None and reshard(S(0), P) is None
    assert reshard(S(0), R) == "all-gather" and reshard(S(0), S(1)) == "all-to-all"
    assert reshard(P, R) == "all-reduce" and reshard(P, S(0)) == "reduce-scatter"
    mesh = make_mesh((2,), None, (0.0,), (1.0,))
    assert reshard_time(P, R, (2,), 8, mesh) == pytest.approx(8.0)
    assert reshard_time(R, S(0), (2,), 8, mesh) == 0.0
