"""Proven lower bounds beside CP-SAT's: the Checkmate LP relaxation under the input order's stages never
exceeds the brute-force optimum (with C_v = 2 or unlimited), runs in a worker process within moccasin's
time limit, and lands in the certificate as its own entry."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.remat.background import METHOD, BackgroundLpBound
from onnxpart.remat.checkmate import lp_lower_bound
from onnxpart.remat.model import build_instance, read_graph_file, resolve_budget
from onnxpart.remat.moccasin import MoccasinOptions, solve_moccasin
from onnxpart.remat.sequence import baseline, simulate
from tests.conftest import SHARED
from tests.remat.helpers import brute_force_fixed, random_dag

G1 = SHARED / "benchmarks" / "moccasin-graphs" / "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json"


def _budget(inst, fraction):
    low, high = inst.min_budget()[0], baseline(inst).peak
    return int(low + (high - low) * fraction)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 6), seed=st.integers(0, 10_000), fraction=st.floats(0.0, 1.0))
def test_lp_bound_is_below_the_brute_force_optimum(n, seed, fraction):
    inst = random_dag(n, seed)
    budget = _budget(inst, fraction)
    bound, status = lp_lower_bound(inst, budget, time_limit=20)
    optimum = brute_force_fixed(inst, budget, max_copies=2)
    unlimited = brute_force_fixed(inst, budget, max_copies=n)
    if status == "infeasible":  # the LP proves that no stage-structured sequence fits
        assert unlimited is None and optimum is None
        return
    assert status == "optimal" and bound >= inst.base_duration
    if unlimited is not None:
        assert bound <= unlimited + 1e-9 <= (optimum if optimum is not None else float("inf")) + 1e-9


def test_background_bound_matches_the_in_process_lp_and_stops_on_time():
    inst = build_instance(read_graph_file(G1))
    budget = resolve_budget("fraction", 0.8, baseline(inst).peak)
    direct, status = lp_lower_bound(inst, budget, time_limit=30)
    entry = BackgroundLpBound(inst, budget, time_limit=30).result(wait=30)
    assert status == "optimal" and entry.status == "optimal" and entry.value == direct
    assert entry.method == METHOD and entry.solver == "highs"
    early = BackgroundLpBound(inst, budget, time_limit=30).result(wait=0.0)  # stopped before it finished
    assert early.value is None and early.status == "time_limit"


@pytest.mark.parametrize("time_limit", [1.0, 20.0])
def test_moccasin_reports_the_lp_bound_unless_it_proved_the_optimum(time_limit):
    inst = build_instance(read_graph_file(G1))
    budget = resolve_budget("fraction", 0.8, baseline(inst).peak)
    result = solve_moccasin(inst, budget, MoccasinOptions(time_limit=time_limit, workers=1))
    duration = simulate(inst, result.sequence).duration
    if result.status == "optimal":
        assert result.extra_bounds == []
    else:
        assert [b.method for b in result.extra_bounds] == [METHOD]
    for entry in result.extra_bounds:
        assert entry.value is None or inst.base_duration <= entry.value <= duration + 1e-9
    assert result.best_bound <= duration + 1e-9
    assert result.seconds <= time_limit + 5.0
