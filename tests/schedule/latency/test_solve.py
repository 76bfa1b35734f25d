"""solve(): every method together, SPLIT against the whole-graph solve, symmetry breaking, the OpGraph
path, and property tests on random DAGs (schedules valid, every lower bound ≤ every upper bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxpart.errors import UserError
from onnxpart.schedule import METHODS, Instance, Options, from_graph, load_system, solve
from onnxpart.strategy import Budget
from onnxpart.schedule.common.modules import cut_ops
from onnxpart.schedule.latency import exact, heuristics, split
from onnxpart.schedule.latency.simulator import validate
from tests.conftest import FIXTURES
from tests.schedule.helpers import brute_force, budgets_not_clock, chain_of_modules, instance, random_case

TOL = 1e-6
#: a wall-clock limit no solve of these few-op instances comes near: each ends by its proof of optimality,
#: so the statuses asserted do not depend on the machine's load
UNREACHED = 60.0


@pytest.mark.parametrize("seed, k", [(0, 2), (1, 3), (2, 2)])
def test_split_equals_whole_exact_on_chain_of_modules(seed, k, monkeypatch):
    inst = chain_of_modules(np.random.default_rng(seed), modules=3, size=2, k=k)
    res = split.milp_split(inst, time_limit=budgets_not_clock(monkeypatch, 10.0))  # ends when every module is optimal
    assert not res.fallback and len(res.modules) >= 3 and res.status == "optimal"
    assert validate(inst, res.schedule) == []
    whole = exact.cpsat(inst, UNREACHED, heuristics.heft(inst).schedule)
    assert whole.status == "optimal"
    assert res.makespan == pytest.approx(whole.makespan, abs=TOL)
    assert res.bound == pytest.approx(whole.makespan, abs=TOL)


def test_split_without_modules_falls_back():
    inst = Instance(np.ones((4, 2)), [(0, 2, 1), (0, 3, 1), (1, 2, 1), (1, 3, 1)], latency=1, bandwidth=1)
    assert cut_ops(inst) == []
    res = split.milp_split(inst, time_limit=1.0)
    assert res.fallback and "no articulation point" in res.reason
    assert validate(inst, res.schedule) == [] and res.bound <= res.makespan + TOL


def test_split_ignores_a_cut_skipped_by_an_edge():
    # 0 → 1 → 2 with a skip edge 0 → 2: 1 is not a cut op, 0 and 2 are
    inst = Instance(np.ones((3, 2)), [(0, 1, 1), (1, 2, 1), (0, 2, 1)], latency=1, bandwidth=1)
    assert cut_ops(inst) == [0, 2]


def test_symmetry_breaking_keeps_the_optimum():
    rng = np.random.default_rng(5)
    case = random_case(rng, 6, 3, p_edge=0.3)
    case["time"][:, 2] = case["time"][:, 1]  # devices 1 and 2 are identical copies
    inst = instance(case)
    assert [1, 2] in inst.symmetry_classes()
    opt, _ = brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])
    for solver in (exact.cpsat, exact.milp):
        for symmetry in (True, False):
            res = solver(inst, 2.0, heuristics.heft(inst).schedule, symmetry=symmetry)
            assert res.status == "optimal" and res.makespan == pytest.approx(opt, abs=TOL)


def test_solve_all_methods():
    inst = chain_of_modules(np.random.default_rng(3), modules=2, size=2, k=2)
    sol = solve(inst, Options(methods=METHODS, time_limit=4.0, iterations=100))
    assert {r.method for r in sol.results} == set(METHODS) - {"exact"}  # cpsat answers for it: one solve
    assert validate(inst, sol.schedule) == []
    assert sol.makespan == min(r.value for r in sol.results if r.value is not None)
    assert {b.method for b in sol.lower_bounds} >= {"critical-path", "work", "load-lp", "cpsat", "milp", "split-dp"}
    assert sol.gap == pytest.approx(0.0, abs=1e-6)  # tiny instance: proven optimal


def test_the_bound_lps_get_a_quarter_of_a_short_run(monkeypatch):
    """On the 709-op benchmark stack the path LP took 3.3 s of a 2 s run before any method started."""
    from onnxpart.schedule.latency import bounds

    limits = []
    for name in ("load_lp_bound", "path_lp_bound"):
        real = getattr(bounds, name)
        monkeypatch.setattr(bounds, name, lambda inst, limit, _real=real: limits.append(limit) or _real(inst, limit))
    inst = chain_of_modules(np.random.default_rng(3), modules=2, size=2, k=2)
    solve(inst, Options(methods=("heft",), time_limit=2.0))
    solve(inst, Options(methods=("heft",), time_limit=600.0))
    assert limits == [0.5, 0.5, 10.0, 10.0]


def test_options_errors():
    with pytest.raises(UserError, match="unknown schedule method"):
        Options(methods=("heft", "tabu"))
    with pytest.raises(UserError, match="unknown objective"):
        Options(objective="energy")
    with pytest.raises(UserError, match="batch must be"):
        Options(objective="throughput", batch=0)


def test_from_graph_with_the_thesis_system():
    from onnxpart.onnx_io import load_graph

    graph, _ = load_graph(FIXTURES / "diamond.onnx")
    system = load_system(str(FIXTURES / "systems" / "cpu_t4_a100.yaml"))
    inst = from_graph(graph, system)
    assert inst.n == len(graph.ops) and inst.k == 3 and np.isfinite(inst.time).all()
    from onnxpart.cost_models import analytic_costs

    for u, device in enumerate(system.devices):  # the analytic roofline per device spec
        assert inst.time[:, u].tolist() == [op.work for op in analytic_costs(graph, device.spec).ops]
    assert sum(b for _, _, b in inst.edges) > 0 and (inst.mem > 0).all()
    sol = solve(inst, Options(methods=("met", "heft", "cpsat"), time_limit=1.0))
    assert validate(inst, sol.schedule) == [] and sol.best_lower_bound <= sol.makespan * (1 + 1e-9)


@st.composite
def dags(draw):
    n = draw(st.integers(2, 9))
    k = draw(st.integers(1, 3))
    edges = [(i, j, float(draw(st.integers(0, 6)))) for i in range(n) for j in range(i + 1, n)
             if draw(st.booleans()) and draw(st.booleans())]
    time = [[float(draw(st.integers(0, 9))) / 2 for _ in range(k)] for _ in range(n)]
    return Instance(time, edges, latency=draw(st.sampled_from([0.0, 0.5, 2.0])),
                    bandwidth=draw(st.sampled_from([0.5, 1.0, math.inf])))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_random_dags_valid_and_bounded(inst):
    sol = solve(inst, Options(methods=("met", "greedy", "heft", "sa", "ea", "cpsat", "split"), time_limit=1.0,
                              iterations=40, lp_bound=True))
    upper = [r.value for r in sol.results if r.value is not None]
    for lb in sol.lower_bounds:
        if lb.value is not None:
            assert lb.value <= min(upper) + TOL, lb.method
    assert validate(inst, sol.schedule) == []


def two_channel_chain(rng: np.random.Generator, modules: int, k: int) -> Instance:
    """Modules of 4 ops, every pair joined (3-edge-connected), chained by 2 channels c_s → a_{s+1} and
    d_s → b_{s+1}."""
    edges = []
    for s in range(modules):
        ops = range(4 * s, 4 * s + 4)
        edges += [(x, y, float(rng.integers(1, 4))) for x in ops for y in ops if x < y]
        if s + 1 < modules:
            edges += [(4 * s + 2, 4 * s + 4, 2.0), (4 * s + 3, 4 * s + 5, 3.0)]
    time = rng.integers(1, 9, size=(4 * modules, k)).astype(float)
    return Instance(time, edges, latency=0.5, bandwidth=1.0)


def test_chain_split_never_answers_worse_than_its_warm_start(monkeypatch):
    """Modules solved to optimality one after the other lose the overlap across modules: on this instance
    their join (52) is longer than HEFT's whole-graph schedule (44.5). Given HEFT as the warm start,
    chain_split returns it and says so; solve passes its best heuristic as that warm start (and its
    answer is no longer: there the barrier DP's guided join, 43, is shorter still)."""
    from onnxpart.schedule.latency import chain_split, multichannel

    inst = two_channel_chain(np.random.default_rng(3), modules=3, k=2)
    modules = multichannel.chain_modules(inst, 2)
    warm = heuristics.heft(inst).schedule
    joined, status, _, _ = chain_split.chain_split(inst, modules, time_limit=UNREACHED)
    assert status == "optimal-modules" and joined.makespan > warm.makespan + TOL  # the case this test is about
    sched, _, _, note = chain_split.chain_split(inst, modules, time_limit=UNREACHED, warm=warm)
    assert sched.makespan == pytest.approx(warm.makespan) and "warm start is shorter" in note
    passed, real = [], chain_split.chain_split
    monkeypatch.setattr(chain_split, "chain_split", lambda *a, **kw: passed.append(a[4]) or real(*a, **kw))
    sol = solve(inst, Options(methods=("heft", "split"), time_limit=2.0))
    assert passed and passed[0].makespan == pytest.approx(warm.makespan)
    assert next(r for r in sol.results if r.method == "split").value <= warm.makespan + TOL


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multichannel_bound_below_optimum(seed):
    from onnxpart.schedule.latency import multichannel

    inst = two_channel_chain(np.random.default_rng(seed), modules=3, k=2)
    assert cut_ops(inst) == [0, 11]  # only the source and the sink: no single-channel modules
    assert split.milp_split(inst, time_limit=1.0).fallback
    assert multichannel.chain_modules(inst, 1) is None
    modules = multichannel.chain_modules(inst, 2)
    assert modules == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    value, status, _ = multichannel.multichannel_bound(inst, modules, time_limit=UNREACHED)
    whole = exact.cpsat(inst, 2.0, heuristics.heft(inst).schedule)
    assert whole.status == "optimal" and status == "bound"
    assert value <= whole.makespan + TOL
    module_lb = max(exact.cpsat(inst.subinstance(m)[0], 1.0).bound for m in modules)
    assert value >= module_lb - TOL
    sol = solve(inst, Options(methods=("heft", "split"), time_limit=3.0))
    proven = [b.value for b in sol.lower_bounds if b.method in ("barrier-dp", "multichannel-2") and b.value]
    assert any(b.method == "multichannel-2" for b in sol.lower_bounds)
    assert next(r for r in sol.results if r.method == "split").bound == max(proven)  # the --compare bound column


def test_exact_solvers_post_proven_bounds_while_they_run():
    """What the progress bar shows for milp and cpsat: bounds posted during the solve, each at most the
    optimum (they are proven, never incumbents)."""
    inst = chain_of_modules(np.random.default_rng(0), modules=3, size=2, k=3)
    for solver in (exact.milp, exact.cpsat):
        posted: list[float] = []
        res = solver(inst, 10.0, heuristics.heft(inst).schedule, on_bound=posted.append)
        assert res.status == "optimal" and posted
        assert max(posted) <= res.makespan + TOL


@pytest.mark.parametrize("seed", [0, 1])
def test_chain_split_on_multichannel_modules(seed):
    from onnxpart.schedule.latency import chain_split, multichannel

    inst = two_channel_chain(np.random.default_rng(seed), modules=3, k=2)
    modules = multichannel.chain_modules(inst, 2)
    sched, status, _, note = chain_split.chain_split(inst, modules, time_limit=UNREACHED)
    assert validate(inst, sched) == [] and status == "optimal-modules" and "3 multi-channel" in note
    whole = exact.cpsat(inst, UNREACHED, heuristics.heft(inst).schedule)
    assert whole.status == "optimal" and sched.makespan >= whole.makespan - TOL
    sol = solve(inst, Options(methods=("heft", "split"), time_limit=2.0))  # also tries the barrier DP's guide
    assert next(r for r in sol.results if r.method == "split").value <= sched.makespan + TOL


def test_chain_split_puts_pinned_ops_on_their_devices_and_delivers_each_module_to_them():
    """a → b → c, modules [a, b] and [c], c pinned to device 0, device 1 a little faster for a and b, a
    transfer 11: the first module must count delivering b's output to c's device (a zero-time stand-in
    of c as its exit), so it stays on device 0 — 4, where solving it alone puts it on device 1 and c
    then waits for the transfer (14.5). Fails if pins are ignored or the exit stand-in is missing. The
    pins are a guide (the barrier DP's chain): chain_split also joins the modules free, and returns the
    shorter join (3.5, all on device 1) and says which."""
    from onnxpart.schedule.latency import chain_split

    inst = Instance([[1.0, 1.0], [2.0, 1.5], [1.0, 1.0]], [(0, 1, 1.0), (1, 2, 1.0)], latency=10.0, bandwidth=1.0)
    pinned, status, _ = chain_split._in_sequence(inst, [[0, 1], [2]], Budget(UNREACHED), 0, {2: 0})
    assert validate(inst, pinned) == [] and status == "optimal-modules"
    assert list(pinned.mapping) == [0, 0, 0] and pinned.makespan == pytest.approx(4.0)
    guide = chain_split.Guide([[0, 1], [2]], {2: 0})
    best, _, _, note = chain_split.chain_split(inst, [[0, 1], [2]], time_limit=UNREACHED, guide=guide)
    assert list(best.mapping) == [1, 1, 1] and best.makespan == pytest.approx(3.5)
    assert "shorter than the 2 barrier DP segments" in note


def test_a_module_entered_only_through_pinned_ops_gets_no_feeder_stand_ins(monkeypatch):
    """a → b → {c1, c2} → d, modules [a, b] and [c1, c2, d], c1 and c2 pinned (a barrier's receivers):
    the first module's exit already delivers b's data to them, so the second is solved from time 0
    without b (a feeder stand-in would make c1 wait for that transfer a second time), and the guided
    join is the segments' schedules one after the other. Unpinned, b stays as the feeder."""
    from onnxpart.schedule.latency import chain_split

    edges = [(0, 1, 1.0), (1, 2, 1.0), (1, 3, 1.0), (2, 4, 1.0), (3, 4, 1.0)]
    inst = Instance([[5.0, 1.0], [5.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.5]], edges, latency=10.0, bandwidth=1.0)
    pins = {2: 0, 3: 1}
    mapping = np.array([1, 1, -1, -1, -1])
    _, index, first, last = chain_split._module_instance(inst, [2, 3, 4], mapping, pins)
    assert (first, last, index) == (0, 3, [2, 3, 4])
    _, index, first, _ = chain_split._module_instance(inst, [2, 3, 4], mapping, {})
    assert first == 1 and index[0] == 1
    assert chain_split._independent(inst, [[0, 1], [2, 3, 4]], pins)
    assert not chain_split._independent(inst, [[0, 1], [2, 3, 4]], {2: 0})  # c2 is fed by b
    apart = []
    real = chain_split._solved_apart
    monkeypatch.setattr(chain_split, "_solved_apart", lambda *a: apart.append(a[-1]) or real(*a))
    for workers in (1, 2):  # with 2, the two modules are solved at once in two processes
        joined, status, _ = chain_split._in_sequence(inst, [[0, 1], [2, 3, 4]], Budget(UNREACHED), 0, pins, workers)
        assert validate(inst, joined) == [] and status == "optimal-modules"
        # module 1 on device 1 ends delivering to c1 at 1 + 1 + 11 = 13; module 2 from there: c1, c2 in
        # parallel, d on device 1 after c1's transfer: 1 + 11 + 0.5
        assert list(joined.mapping) == [1, 1, 0, 1, 1] and joined.makespan == pytest.approx(13 + 12.5)
    assert apart == [2]
