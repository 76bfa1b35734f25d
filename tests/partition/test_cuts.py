"""The single-block bounds: the min cut equals a brute-force min over subsets, the convex refinement a
brute-force min over blocks that fit in a partition, both are ≤ OPT, and they beat Lemma 3.3 when the
bottleneck is communication."""

import itertools
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.partition.partition_helpers import brute_force, random_instance

from onnxpart.partition import Options, solve
from onnxpart.partition.cuts import (_Network, convex_block_bound, is_convex, single_block_bound,
                                     singleton_costs)
from onnxpart.partition.model import Instance, _csr, block_costs, simple_lower_bound


def _cost(inst: Instance, block: set[int]) -> float:
    """f(block) of Eq. (3) without overflow, from the model's own block_costs (block 0 vs the rest)."""
    assign = np.array([0 if v in block else 1 for v in range(inst.n)])
    c = block_costs(inst, assign, 2)[0]
    return c.work + c.io_in + c.io_out


def _subsets(n: int, v: int):
    others = [u for u in range(n) if u != v]
    for r in range(len(others) + 1):
        for extra in itertools.combinations(others, r):
            yield {v, *extra}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), density=st.floats(0.1, 0.8))
def test_min_cut_is_the_cheapest_set_holding_each_op(n, seed, density):
    inst = random_instance(n, seed, density=density)
    network = _Network(inst, inst.work)
    for v in range(n):
        brute = min(_cost(inst, s) for s in _subsets(n, v))
        value, side = network.min_cut(v)
        assert value <= brute * (1 + 1e-9) + 1e-12  # rounded down: never above
        assert value == pytest.approx(brute, rel=1e-9, abs=1e-9)
        assert v in side and _cost(inst, set(side)) == pytest.approx(brute, rel=1e-9, abs=1e-9)
    assert singleton_costs(inst) == pytest.approx([_cost(inst, {v}) for v in range(n)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 6), seed=st.integers(0, 10_000), density=st.floats(0.1, 0.8), k=st.integers(2, 3))
def test_single_block_bounds_never_exceed_the_optimum(n, seed, density, k):
    inst = random_instance(n, seed, density=density, stage_memory=120.0 if seed % 2 else None)
    opt = brute_force(inst, k)
    cut = single_block_bound(inst)
    convex = convex_block_bound(inst, cut.value, time.monotonic() + 30)
    assert cut.value <= opt * (1 + 1e-9)
    assert cut.value <= convex.value <= opt * (1 + 1e-6)
    # The convex refinement is exactly max_v min over convex blocks holding v (without overflow).
    if inst.stage_memory is None:
        exact = max(min(_cost(inst, s) for s in _subsets(n, v) if is_convex(inst, s)) for v in range(n))
        assert convex.value == pytest.approx(max(exact, cut.value), rel=1e-6)


def _skip(m: int = 8) -> Instance:
    """s -> h -> a_1 -> … -> a_m -> t with a skip h -> t: h's tensor (cost 50) goes to a_1 and t, the
    a_i do the work (10 each), everything else is cheap. The block holding h either pays 50 for h's
    tensor or holds a_1 and t; without convexity {s, h, a_1, t} costs 12.3, a block of a partition must
    hold every a_i then (cost > 80), so it pays the 50 — while Lemma 3.3 sees W / k ≈ 10."""
    n = m + 3
    s, h, t = 0, 1, n - 1
    consumers = {s: [h], h: [2, t]}
    consumers.update({a: [a + 1] for a in range(2, n - 1)})
    producers = sorted(consumers)
    ptr, idx = _csr([consumers[u] for u in producers])
    work = np.array([0.1, 0.1] + [10.0] * m + [0.1])
    transfer = np.array([50.0 if u == h else 1.0 for u in producers])
    return Instance("skip", tuple(f"op{i}" for i in range(n)), tuple((f"op{i}",) for i in range(n)), work,
                    np.zeros(n), tuple(f"t{u}" for u in producers), np.array(producers), ptr, idx, transfer,
                    bandwidth=1.0)


def test_communication_heavy_instance_beats_the_simple_bound():
    inst = _skip()
    k = 8
    simple = simple_lower_bound(inst, k)
    cut = single_block_bound(inst)
    convex = convex_block_bound(inst, cut.value, time.monotonic() + 30)
    assert cut.value == pytest.approx(12.3) and cut.value > 1.2 * simple  # {s, h, a_1, t}
    # The block holding a_1 cannot hold t without every a_i: a_1 alone, 10 work + 50 in + 1 out, is best.
    assert convex.value == pytest.approx(61.0) and convex.mips >= 1
    solution = solve(inst, Options(k=k, time_limit=10, ideal_limit=0, bounds=("simple",)))
    assert solution.best_lower_bound == pytest.approx(convex.value)
    assert solution.best_lower_bound <= solution.value * (1 + 1e-9)


def test_solve_stops_and_ends_the_mips_once_the_gap_is_closed():
    inst = _skip()  # OPT = 61 for k = 8: the convex-block bound closes the gap before any MIP can
    solution = solve(inst, Options(k=8, time_limit=60, ideal_limit=0,
                                   bounds=("simple", "bottleneck", "guess", "exact")))
    assert solution.value == pytest.approx(61.0) and solution.best_lower_bound == pytest.approx(61.0)
    # Closed by the convex-block bound before any search: no order search ran, and the k guess MIPs were
    # ended rather than awaited (bottleneck-guess is reported only once all k have returned).
    assert solution.search["generations"] == 0 and "local_search_moves" not in solution.search
    assert "bottleneck-guess" not in {b.method for b in solution.lower_bounds}


def test_convexity_check():
    inst = _skip(2)  # 0 -> 1 -> 2 -> 3 -> 4, 1 -> 4
    assert is_convex(inst, {0, 1}) and is_convex(inst, {1, 2, 3}) and is_convex(inst, {4})
    assert not is_convex(inst, {1, 4}) and not is_convex(inst, {2, 4})
