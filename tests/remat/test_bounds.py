"""Proven lower bounds beside CP-SAT's: the Checkmate LP relaxation and the event-cover bound under the
input order's stages never exceed the brute-force optimum (with C_v = 2 or unlimited); the LP runs in a
worker process within moccasin's time limit; both land in the result as their own entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.remat.background import METHOD, BackgroundLpBound
from onnxpart.remat.bounds import event_cover_bound
from onnxpart.remat.checkmate import lp_lower_bound
from onnxpart.readers import read_graph
from onnxpart.remat.model import build_instance, resolve_budget
from onnxpart.remat.moccasin import MoccasinOptions, solve_moccasin
from onnxpart.remat.sequence import baseline, simulate
from tests.conftest import SHARED, requires_shared
from tests.remat.helpers import brute_force_fixed, random_dag

G1 = SHARED / "benchmarks" / "moccasin-graphs" / "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json"


def _budget(inst, fraction):
    low, high = inst.min_budget()[0], baseline(inst).peak
    return int(low + (high - low) * fraction)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 5), seed=st.integers(0, 10_000), fraction=st.floats(0.0, 1.0))
def test_lp_bound_is_below_the_brute_force_optimum(n, seed, fraction):
    """Against every stage-structured sequence: 2^(n(n-1)/2) of them (at n = 6, 32,768 simulations per
    instance, most of this file's time; n = 6 is covered with C_v ≤ 3 by the event-cover test)."""
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


@settings(max_examples=40, deadline=None)
@given(n=st.integers(3, 6), seed=st.integers(0, 10_000), fraction=st.floats(0.0, 1.0), copies=st.integers(1, 3))
def test_event_cover_bound_is_below_the_brute_force_optimum(n, seed, fraction, copies):
    inst = random_dag(n, seed, p=0.6)
    budget = _budget(inst, fraction)
    bound, status = event_cover_bound(inst, budget, copies)
    optimum = brute_force_fixed(inst, budget, max_copies=copies)
    if status == "infeasible":
        assert bound is None and optimum is None
        return
    assert status == "bound" and bound >= inst.base_duration
    if optimum is not None:
        assert bound <= optimum + 1e-9


@requires_shared
def test_event_cover_bound_is_positive_where_memory_must_be_freed():
    inst = build_instance(read_graph(G1))
    budget = resolve_budget("fraction", 0.8, baseline(inst).peak)
    bound, status = event_cover_bound(inst, budget, 2)
    assert status == "bound" and inst.base_duration < bound <= inst.base_duration * 1.0230  # G1 80%: +2.30%


def test_background_bound_matches_the_in_process_lp_and_stops_on_time():
    inst = random_dag(40, 3)
    budget = resolve_budget("fraction", 0.8, baseline(inst).peak)
    direct, status = lp_lower_bound(inst, budget, time_limit=30)
    entry = BackgroundLpBound(inst, budget, time_limit=30).result(wait=30)
    assert status == "optimal" and entry.status == "optimal" and entry.value == direct
    assert entry.method == METHOD and entry.solver == "highs"
    early = BackgroundLpBound(inst, budget, time_limit=30).result(wait=0.0)  # stopped before it finished
    assert early.value is None and early.status == "time_limit"


@requires_shared
@pytest.mark.parametrize("graph, time_limit, deterministic", [("G1", 1.0, True), ("random-20", 20.0, False)])
def test_moccasin_reports_the_lp_bound_unless_it_proved_the_optimum(graph, time_limit, deterministic):
    """On G1 (100 ops) 1 s of CP-SAT's deterministic time ends by the limit (a wall-clock second on a loaded
    machine once left it no sequence at all); a 20-op DAG is proven optimal in about 2 s of the 20."""
    inst = build_instance(read_graph(G1)) if graph == "G1" else random_dag(20, 1)
    budget = resolve_budget("fraction", 0.8, baseline(inst).peak)
    options = MoccasinOptions(time_limit=time_limit, workers=1, deterministic=deterministic)
    result = solve_moccasin(inst, budget, options)
    duration = simulate(inst, result.sequence).duration
    methods = [b.method for b in result.extra_bounds]
    assert methods == (["event-cover"] if result.status == "optimal" else ["event-cover", METHOD])
    for entry in result.extra_bounds:
        assert entry.value is None or inst.base_duration <= entry.value <= duration + 1e-9
    assert result.best_bound <= duration + 1e-9
    # It ends by proving the optimum or by its time limit, and either way reports CP-SAT's proven bound.
    assert result.status in ("optimal", "time_limit") and result.bound_status == result.status
    assert result.bound is not None and inst.base_duration <= result.bound <= result.best_bound


def test_lp_bound_that_finished_during_the_search_is_collected_with_no_time_left(monkeypatch):
    """CP-SAT may use all of the time limit: the LP's result, already sent, must still be read."""
    import time

    from onnxpart.remat import background

    monkeypatch.setattr(background, "lp_job", lambda *args: (7.0, "optimal", 0.01))
    lp = background.BackgroundLpBound(instance=None, budget=0.0, time_limit=1.0)
    time.sleep(1.0)
    bound = lp.result(0.0)
    assert bound.value == 7.0 and bound.status == "optimal"
