"""Barrier cuts and their DP bound (onnxpart/schedule/latency/barrier.py): the cuts found are the channels'
receivers, the bound is never above the brute-force optimum, and on a two-channel stack whose
transfers make offloading useless it proves more than the whole-graph bounds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from onnxpart.schedule import Instance, Options, solve
from onnxpart.schedule.latency import barrier, bounds
from onnxpart.schedule.latency.split import join_dp, segment_instance
from onnxpart.schedule.latency.split_lane import floor_bound
from tests.schedule.helpers import brute_force

TOL = 1e-9
# s → {r1, r2} (every later op reads a receiver) → m1, m2, m3 → {t1, t2} (each reads all three) → z
S, R1, R2, M1, M2, M3, T1, T2, Z = range(9)
SD_EDGES = [(S, R1), (S, R2), (R1, M1), (R2, M2), (R1, M3), (R2, M3),
            (M1, T1), (M2, T1), (M3, T1), (M1, T2), (M2, T2), (M3, T2), (T1, Z), (T2, Z)]
# the "wd" variant: each channel its own chain (t1 reads only m1, t2 only m2), so nothing waits for both
WD_EDGES = [(S, R1), (S, R2), (R1, M1), (R2, M2), (R1, M3), (R2, M3), (M1, T1), (M2, T2), (M3, T2),
            (T1, Z), (T2, Z)]


def make(edges, time, latency=2.0, bandwidth=1.0):
    return Instance(time, [(i, j, 1.0) for i, j in edges], latency=latency, bandwidth=bandwidth)


def test_barriers_are_the_receivers_every_later_op_waits_for():
    """Fails if a barrier admits an op that does not follow every earlier op (the wd stack's channels)
    or misses the two-op receiver sets."""
    inst = make(SD_EDGES, np.ones((9, 2)))
    assert [set(rs) for _, rs in barrier.barrier_cuts(inst, 4)] == [{R1, R2}, {T1, T2}, {Z}]  # not {m1, m2, m3}:
    assert [set(rs) for _, rs in barrier.barrier_cuts(inst, 1)] == [{Z}]  # r2 does not reach m1
    wd = make(WD_EDGES, np.ones((9, 2)))
    assert [set(rs) for _, rs in barrier.barrier_cuts(wd, 4)] == [{R1, R2}, {Z}]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("edges", [SD_EDGES, WD_EDGES], ids=["sd", "wd"])
def test_barrier_bound_is_below_the_brute_force_optimum(seed, edges):
    """LB ≤ OPT on random times over two devices with costly links (fails, e.g., if a segment's cost
    took the max over the exit's receivers instead of the min, or charged the entry's transfers)."""
    rng = np.random.default_rng(seed)
    time = rng.integers(1, 9, size=(9, 2)).astype(float)
    latency = float(rng.integers(0, 4))
    inst = make(edges, time, latency=latency)
    opt, _ = brute_force(time, [(i, j, 1.0) for i, j in edges], latency, 1.0)
    value, status, _, _ = barrier.barrier_bound(inst, barrier.barrier_cuts(inst, 4), 30.0)
    assert status == "bound" and 0.0 < value <= opt + TOL


@pytest.mark.parametrize("seed", range(4))
def test_the_lazy_dp_equals_the_dp_over_every_full_floor(seed):
    """The lazy DP (device paths first, path LPs only on its best chain) proves the value of the DP over
    every pair's full floor, computed here eagerly — fails if it stops while its chain still holds a
    cheaper level, or raises a part that is not the least."""
    rng = np.random.default_rng(100 + seed)
    time = rng.integers(1, 9, size=(9, 3)).astype(float)
    inst = make(SD_EDGES, time, latency=float(rng.integers(0, 4)))
    cuts = barrier.barrier_cuts(inst, 4)
    starts = [0] + [p for p, _ in cuts] + [inst.n]
    receivers = [None] + [rs for _, rs in cuts] + [None]
    tables = []
    for k in range(len(cuts) + 1):
        ops = list(inst.topo[starts[k]:starts[k + 1]])
        entries = [None] if receivers[k] is None else list(itertools.product(range(3), repeat=len(receivers[k])))
        exits = [None] if receivers[k + 1] is None else list(itertools.product(range(3), repeat=len(receivers[k + 1])))

        def full(e, stand_in, ops=ops, entry=receivers[k]):
            built = segment_instance(inst, ops, dict(zip(entry or (), e or ())), stand_in)
            return math.inf if built is None else floor_bound(built[0], 30.0)[0]

        tables.append({(e, xs): full(e, None) if xs is None else
                       min(full(e, (r, x)) for r, x in zip(receivers[k + 1], xs)) for e in entries for xs in exits})
    eager, _ = join_dp(tables)
    lazy = barrier.barrier_bound(inst, cuts, 60.0)
    assert lazy.status == "bound" and lazy.value == pytest.approx(eager, rel=1e-9)
    assert set(lazy.pins) == {r for _, rs in cuts for r in rs}


def test_barrier_bound_counts_the_round_trip_the_whole_graph_bounds_miss():
    """Device 1 is twice as fast but a transfer costs 6: the optimum stays on device 0 (brute force).
    The whole-graph bounds let work move for free at the ends; each segment's pinned receivers make
    the barrier DP pay the round trip, so it proves more — and here the optimum itself."""
    time = np.array([[2.0, 1.0]] * 9)
    inst = make(SD_EDGES, time, latency=5.0)
    opt, mapping = brute_force(time, [(i, j, 1.0) for i, j in SD_EDGES], 5.0, 1.0)
    value = barrier.barrier_bound(inst, barrier.barrier_cuts(inst, 4), 30.0).value
    whole = max(bounds.device_path_bound(inst).value, bounds.path_lp_bound(inst).value)
    assert whole < value - 1.0
    assert value == pytest.approx(opt)


def test_too_many_floors_are_not_attempted_and_the_solver_says_which_bound():
    """Past MAX_FLOORS the bound declines with its reason; through ``solve``, SPLIT on a graph with
    barriers but no one-op cut reports ``barrier-dp`` beside the multi-channel recursion."""
    inst = make(SD_EDGES, np.ones((9, 2)))
    cuts = barrier.barrier_cuts(inst, 4)
    old = barrier.MAX_FLOORS
    try:
        barrier.MAX_FLOORS = barrier.floors_needed(inst, cuts) - 1
        value, status, note, _ = barrier.barrier_bound(inst, cuts, 30.0)
        assert value is None and status == "none" and "not attempted" in note
    finally:
        barrier.MAX_FLOORS = old
    slow_links = make(SD_EDGES, np.array([[2.0, 1.0]] * 9), latency=5.0)
    sol = solve(slow_links, Options(methods=("heft", "split"), time_limit=3.0))
    proven = {b.method: b.value for b in sol.lower_bounds}
    assert proven["barrier-dp"] == pytest.approx(sol.schedule.makespan)  # 9: SPLIT's answer certified
    assert max(v for m, v in proven.items() if m != "barrier-dp") < proven["barrier-dp"]
