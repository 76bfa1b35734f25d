"""The device-aware heads and tails and Carlier's lead + busy + trail rows (:mod:`onnxpart.schedule.latency.bounds`,
used by the path LP, CP-SAT and the MILP): they hold in every schedule, the bounds built on them never
exceed the brute-force optimum — with pinned ops, as in SPLIT's (entry, exit) modules, where they
matter — and on a round trip through a second device the Carlier row is what makes the path LP exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import bounds, exact, heuristics
from tests.schedule.helpers import brute_force, instance, random_case

TOL = 1e-6


def pinned_case(seed: int, n: int, k: int) -> dict:
    """A random tiny case whose first and last ops are pinned to random devices (times inf elsewhere)."""
    rng = np.random.default_rng(seed)
    case = random_case(rng, n, k, p_edge=0.5)
    for i in (0, n - 1):
        keep = int(rng.integers(k))
        case["time"][i] = np.where(np.arange(k) == keep, case["time"][i], math.inf)
    return case


def schedules(inst: Instance) -> list:
    """Every heuristic's schedule and CP-SAT's (optimal on these sizes)."""
    found = [r.schedule for r in (heuristics.met(inst), heuristics.greedy(inst), heuristics.heft(inst)) if r]
    return found + [exact.cpsat(inst, 5.0, found[0]).schedule]


def test_the_carlier_row_makes_the_path_lp_exact_on_a_round_trip():
    """Entry and exit pinned to device 0, three ops that run only on device 1: that device starts after one
    transfer (lead 1 + 6), runs 3, and its last op still needs a transfer and the exit (trail 6 + 1):
    17. Without the Carlier row the path LP stops at the device path, 15; the critical path is 3."""
    inf = math.inf
    time = [[1.0, inf], [inf, 1.0], [inf, 1.0], [inf, 1.0], [1.0, inf]]
    edges = [(0, j, 1.0) for j in (1, 2, 3)] + [(j, 4, 1.0) for j in (1, 2, 3)]
    inst = Instance(time, edges, latency=5.0, bandwidth=1.0)
    opt, _ = brute_force(time, edges, 5.0, 1.0)
    assert opt == pytest.approx(17.0)
    assert bounds.critical_path_bound(inst).value == pytest.approx(3.0)
    assert bounds.device_path_bound(inst).value == pytest.approx(15.0)
    assert bounds.path_lp_bound(inst).value == pytest.approx(17.0)
    lead, trail = bounds.device_lead_trail(inst, *bounds.heads_tails(inst))
    assert (lead[1], trail[1]) == pytest.approx((7.0, 7.0))


def test_the_device_used_indicator_is_binary_so_a_sliver_of_offload_pays_the_whole_round_trip():
    """Entry and exit pinned to device 0, three ops that take 2 there and 1 on device 1, a round trip of 6
    each way: the optimum keeps them home, 8 (brute force). With a fractional "device 1 runs anything"
    indicator the path LP moves a sliver of each op over and pays the same sliver of the idle time,
    6.59; with the indicator 0/1 it proves 8 — fails if ``w_u`` is relaxed again."""
    inf = math.inf
    time = [[1.0, inf], [2.0, 1.0], [2.0, 1.0], [2.0, 1.0], [1.0, inf]]
    edges = [(0, j, 1.0) for j in (1, 2, 3)] + [(j, 4, 1.0) for j in (1, 2, 3)]
    inst = Instance(time, edges, latency=5.0, bandwidth=1.0)
    opt, mapping = brute_force(time, edges, 5.0, 1.0)
    assert opt == pytest.approx(8.0) and set(mapping) == {0}
    assert bounds.path_lp_bound(inst).value == pytest.approx(8.0)
    assert bounds.device_path_bound(inst).value == pytest.approx(4.0)


def test_carlier_rows_over_the_late_ops_count_the_idle_time_before_them(monkeypatch):
    """Receivers pinned one to each device, three ops reading both (3 on device 0, 1 on device 1), a sink
    on device 1, transfers of 6: every op waits 7 wherever it runs, so device 1 idles after its receiver;
    the optimum is 11 (brute force). Carlier's row over all of device 1's ops starts at its receiver's
    head 0 and proves only the device path, 9; the row over the ops whose head is at least 7 proves
    more — fails if :func:`bounds.carlier_sets` offers only the all-ops set."""
    inf = math.inf
    time = [[1.0, inf], [inf, 1.0], [3.0, 1.0], [3.0, 1.0], [3.0, 1.0], [inf, 1.0]]
    edges = [(r, m, 1.0) for r in (0, 1) for m in (2, 3, 4)] + [(m, 5, 1.0) for m in (2, 3, 4)]
    inst = Instance(time, edges, latency=5.0, bandwidth=1.0)
    opt, _ = brute_force(time, edges, 5.0, 1.0)
    assert opt == pytest.approx(11.0)
    with_sets = bounds.path_lp_bound(inst).value
    monkeypatch.setattr(bounds, "CARLIER_SETS", 0)
    assert bounds.path_lp_bound(inst).value == pytest.approx(9.0)
    assert 10.0 < with_sets <= opt + TOL


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 2), (2, 5, 3), (3, 6, 3), (4, 7, 2), (5, 4, 3)])
def test_every_carlier_set_row_holds_in_every_schedule(seed, n, k):
    """``C ≥ Σ_{i∈J on u} t(i,u) + idle_J`` on every device that runs an op of ``J``, for every set that
    :func:`bounds.carlier_sets` offers — fails if a set's idle time took a head or tail from outside it."""
    inst = instance(pinned_case(seed, n, k))
    head, tail = bounds.heads_tails(inst)
    for sched in schedules(inst):
        for u in range(inst.k):
            ops = [i for i in range(inst.n) if np.isfinite(head[i, u] + tail[i, u])]
            for idle, members in bounds.carlier_sets(inst, head, tail, u, ops):
                on = [i for i in members if sched.mapping[i] == u]
                if on:
                    assert sched.makespan >= sum(inst.time[i, u] for i in on) + idle - TOL


@pytest.mark.parametrize("seed,n,k", [(0, 5, 2), (1, 6, 2), (2, 5, 3), (3, 6, 3), (4, 7, 2), (5, 4, 3)])
def test_heads_tails_and_carlier_hold_in_every_schedule(seed, n, k):
    """``s_i ≥ head(i, π(i))``, ``C ≥ s_i + tail(i, π(i))`` for every op, and ``first start ≥ lead_u``,
    ``C ≥ last end + trail_u`` on every device that runs an op — fails if the DPs take the best device
    where the chosen one counts, or drop a pinned op's transfer."""
    inst = instance(pinned_case(seed, n, k))
    head, tail = bounds.heads_tails(inst)
    lead, trail = bounds.device_lead_trail(inst, head, tail)
    for sched in schedules(inst):
        for i, u in enumerate(sched.mapping):
            assert sched.start[i] >= head[i, u] - TOL
            assert sched.makespan >= sched.start[i] + tail[i, u] - TOL
        for u in set(int(u) for u in sched.mapping):
            on = sched.mapping == u
            assert sched.start[on].min() >= lead[u] - TOL
            assert sched.makespan >= sched.end[on].max() + trail[u] - TOL


@pytest.mark.parametrize("seed,n,k", [(10, 5, 2), (11, 6, 2), (12, 5, 3), (13, 6, 3), (14, 7, 2), (15, 5, 3)])
def test_bounds_with_heads_and_tails_are_below_brute_force(seed, n, k):
    """Pinned ends: device path, path LP and MIP at most the optimum; CP-SAT and the MILP (with the
    redundant rows) prove exactly the optimum."""
    case = pinned_case(seed, n, k)
    inst = instance(case)
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])
    assert bounds.device_path_bound(inst).value <= opt + TOL
    assert bounds.path_lp_bound(inst).value <= opt + TOL
    assert bounds.path_lp_bound(inst, 5.0, integer=True).value <= opt + TOL
    for solver in (exact.cpsat, exact.milp):
        res = solver(inst, 5.0, heuristics.heft(inst).schedule)
        assert res.status == "optimal" and res.bound <= opt + TOL
        assert res.makespan == pytest.approx(opt, abs=TOL)


@st.composite
def pinned_dags(draw):
    """Random DAGs of 2–9 ops on 2–3 devices, real-valued times, some ops pinned to one device."""
    n, k = draw(st.integers(2, 9)), draw(st.integers(2, 3))
    edges = [(a, b, float(draw(st.integers(0, 4)))) for a in range(n) for b in range(a + 1, n) if draw(st.booleans())]
    time = np.array([[draw(st.floats(0.1, 9.0)) for _ in range(k)] for _ in range(n)])
    for i in range(n):
        if draw(st.booleans()):
            time[i] = np.where(np.arange(k) == draw(st.integers(0, k - 1)), time[i], math.inf)
    return Instance(time, edges, latency=draw(st.sampled_from([0.0, 0.5, 2.0])),
                    bandwidth=draw(st.sampled_from([0.5, 1.0, 4.0])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pinned_dags())
def test_lower_bounds_never_exceed_a_schedule(inst):
    """LB ≤ UB on random DAGs: every bound built on the heads and tails is at most HEFT's makespan, and
    CP-SAT's proven bound (with its redundant rows, floored to ticks) at most its own schedule."""
    heft = heuristics.heft(inst).schedule
    for lb in (bounds.device_path_bound(inst), bounds.path_lp_bound(inst)):
        assert lb.value <= heft.makespan + TOL, lb.method
    res = exact.cpsat(inst, 2.0, heft, deterministic_time=0.05)
    assert res.bound <= res.makespan + TOL and res.makespan <= heft.makespan + TOL


def test_the_path_lp_where_a_tensor_cannot_move_between_two_devices():
    """Two devices with no link (infinite transfer): an op can only follow its producer's device. The
    path LP fixes "moved" to 0 there (j on v forces i onto v) instead of a −∞ coefficient HiGHS
    rejects (no bound at all before); its bound is the optimum 5 (all on one device: 1 + 3 + 1)."""
    lat = np.array([[0.0, math.inf], [math.inf, 0.0]])
    inst = Instance([[1.0, 3.0], [3.0, 1.0], [1.0, 1.0]], [(0, 1, 1.0), (1, 2, 1.0)], latency=lat, bandwidth=1.0)
    optimum = exact.cpsat(inst, 5.0)
    assert optimum.status == "optimal" and optimum.makespan == pytest.approx(5.0)
    for relaxed in (False, True):
        found = bounds.path_lp_bound(inst, relaxed=relaxed)
        assert found.status == "optimal" and found.value == pytest.approx(5.0)
