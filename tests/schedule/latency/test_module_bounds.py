"""The module bounds against the true optimum: SPLIT's DP over module lower bounds (Section 3.3.1) and
the multi-channel dep/pre recursion (Section 3.3.2, Table 3.1) never exceed the brute-force optimum on
tiny instances (≤ 8 ops, 2–3 devices) or the proven CP-SAT optimum on small random DAGs with cut ops;
a bound above the optimum is the bug each test names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxpart.schedule import Instance
from onnxpart.schedule.latency import exact, heuristics, multichannel, split
from tests.schedule.helpers import brute_force

TOL = 1e-6


def blocks(rng: np.random.Generator, sizes: list[int], channels: int, k: int, p_edge: float = 0.5) -> dict:
    """Blocks of ops in sequence: random edges inside a block, ``channels`` random edges from each
    block to the next (the modules of a multi-channel stack); random times, latency and bandwidth."""
    edges, start = [], 0
    for b, size in enumerate(sizes):
        ops = range(start, start + size)
        edges += [(i, j, float(rng.integers(1, 5))) for i in ops for j in ops if i < j and rng.random() < p_edge]
        if b + 1 < len(sizes):
            nxt = list(range(start + size, start + size + sizes[b + 1]))
            for _ in range(channels):
                edges.append((int(rng.choice(list(ops))), int(rng.choice(nxt)), float(rng.integers(1, 5))))
        start += size
    edges = sorted(set(edges))
    n = sum(sizes)
    return dict(time=rng.integers(1, 9, size=(n, k)).astype(float), edges=edges,
                latency=float(rng.integers(0, 3)), bandwidth=float(rng.choice([1.0, 2.0])))


def optimum(case: dict) -> float:
    return brute_force(case["time"], case["edges"], case["latency"], case["bandwidth"])[0]


def build(case: dict) -> Instance:
    return Instance(case["time"], case["edges"], latency=case["latency"], bandwidth=case["bandwidth"])


@pytest.mark.parametrize("shape", [([2, 2, 2], 2, 2), ([2, 3, 2], 2, 2), ([2, 2], 2, 3), ([3, 2, 3], 1, 2)])
def test_multichannel_bound_below_brute_force(shape):
    """Over 8 random cases of each shape: every case whose chain of modules is found (most are: the
    test requires at least half) gets a bound no larger than the brute-force optimum."""
    sizes, channels, k = shape
    checked = 0
    for seed in range(8):
        case = blocks(np.random.default_rng(seed), sizes, channels, k)
        inst = build(case)
        modules = multichannel.chain_modules(inst, channels, min_size=2)
        if modules is None:
            continue
        value, _, _ = multichannel.multichannel_bound(inst, modules, time_limit=1.0)
        assert value <= optimum(case) + TOL, f"seed {seed}"
        checked += 1
    assert checked >= 4, f"only {checked} of 8 cases had a chain of modules"


def test_multichannel_sub_solves_get_their_share_and_none_past_the_time_limit(monkeypatch):
    """Every solver call of the recursion is given at most the bound's time limit, and once it is spent the
    remaining sets get their critical paths only — still a bound. The plain path LP used to run with its
    default 10 s each: 140 s past a 10 s limit on a 2,000-op DAG."""
    from onnxpart.schedule.latency import bounds
    from onnxpart.strategy import Budget

    case = blocks(np.random.default_rng(3), [2, 2, 2], 2, 2)
    inst = build(case)
    modules = multichannel.chain_modules(inst, 2, min_size=2)
    assert modules is not None
    limits = []
    path_lp, cpsat = bounds.path_lp_bound, exact.cpsat
    monkeypatch.setattr(bounds, "path_lp_bound",
                        lambda sub, limit=None, **kw: limits.append(limit) or path_lp(sub, limit or 10.0, **kw))
    monkeypatch.setattr(exact, "cpsat", lambda sub, limit, *a, **kw: limits.append(limit) or cpsat(sub, limit, *a, **kw))
    multichannel.multichannel_bound(inst, modules, time_limit=0.5)
    assert limits and all(limit is not None and 0 < limit <= 0.5 for limit in limits), limits
    limits.clear()
    monkeypatch.setattr(Budget, "left", lambda self: 0.0)  # the time limit already spent
    value, status, _ = multichannel.multichannel_bound(inst, modules, time_limit=0.5)
    assert limits == [] and status == "time_limit" and 0 < value <= optimum(case) + TOL


def test_multichannel_recursion_is_tight_on_a_serial_chain():
    # three single-op modules on one device each way: every op reaches the next, so the forward
    # recursion adds them up — the 2-to-2 row of Table 3.1 (guarantee 1): bound = optimum = 1 + 2 + 3
    inst = Instance([[1.0], [2.0], [3.0]], [(0, 1, 1.0), (1, 2, 1.0)], latency=0.0, bandwidth=1.0)
    modules = multichannel.chain_modules(inst, 1, min_size=1)
    assert modules == [[0], [1], [2]]
    value, status, _ = multichannel.multichannel_bound(inst, modules, time_limit=1.0)
    assert status == "bound" and value == pytest.approx(6.0)


def chain_with_cuts(rng: np.random.Generator, modules: int, size: int, k: int) -> dict:
    """Modules of ``size`` ops between cut ops (entry → every op → exit), random edges inside."""
    edges, entry, n = [], 0, 1
    for _ in range(modules):
        ops = list(range(n, n + size))
        exit_ = n + size
        edges += [(entry, a, float(rng.integers(1, 5))) for a in ops]
        edges += [(a, exit_, float(rng.integers(1, 5))) for a in ops]
        edges += [(a, b, float(rng.integers(1, 5))) for a in ops for b in ops if a < b and rng.random() < 0.5]
        entry, n = exit_, exit_ + 1
    return dict(time=rng.integers(1, 9, size=(n, k)).astype(float), edges=edges,
                latency=float(rng.integers(0, 3)), bandwidth=float(rng.choice([1.0, 2.0])))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit", [0.01, 2.0])
def test_split_bound_below_brute_force(seed, limit):
    k = 3 if seed % 2 else 2
    case = chain_with_cuts(np.random.default_rng(seed), modules=2, size=2 if k == 2 else 1, k=k)
    inst = build(case)
    res = split.milp_split(inst, time_limit=limit)
    assert not res.fallback
    opt = optimum(case)
    assert res.bound <= opt + TOL
    assert res.makespan >= opt - TOL
    if res.status == "optimal":  # every module proven: the DP bound is the certificate
        assert res.bound == pytest.approx(opt, abs=TOL)


@st.composite
def dags_with_cuts(draw):
    """Random DAGs with at least one cut op: two random blocks joined through a single op."""
    k = draw(st.integers(2, 3))
    sizes = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    edges, n = [], 0
    cut = sizes[0]
    for lo, hi in ((0, cut), (cut + 1, cut + 1 + sizes[1])):
        ops = list(range(lo, hi))
        edges += [(a, b, float(draw(st.integers(0, 4)))) for a in ops for b in ops if a < b and draw(st.booleans())]
    edges += [(a, cut, float(draw(st.integers(0, 4)))) for a in range(cut)]
    edges += [(cut, b, float(draw(st.integers(0, 4)))) for b in range(cut + 1, cut + 1 + sizes[1])]
    n = cut + 1 + sizes[1]
    time = [[float(draw(st.integers(1, 9))) for _ in range(k)] for _ in range(n)]
    return Instance(time, edges, latency=draw(st.sampled_from([0.0, 1.0])), bandwidth=draw(st.sampled_from([1.0, 2.0])))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags_with_cuts())
def test_split_bound_below_exact_optimum(inst):
    """SPLIT's bound is below the whole-graph CP-SAT optimum — or, where CP-SAT does not close the
    instance in its time, below its schedule (any schedule is at least the optimum). CP-SAT does stall on
    rare instances this strategy draws: 7 ops on 2 devices, latency 1, bandwidth 2, 27.0 against a bound of
    25.5 after 5 s (the same before and after this session's changes; a known issue of the whole-graph
    model, not of SPLIT)."""
    res = split.milp_split(inst, time_limit=1.0)
    whole = exact.cpsat(inst, 5.0, heuristics.heft(inst).schedule)
    assert whole.makespan is not None
    assert res.bound <= whole.makespan + TOL


def repeated_chain(rng: np.random.Generator, modules: int, size: int, k: int) -> dict:
    """``modules`` copies of one random module (its entry op and ``size`` ops, the same times, edges and
    bytes), each entered from the one before through a single op, then a last op: the layers of a stack."""
    inner = [(a, b, float(rng.integers(1, 5))) for a in range(1, size + 1) for b in range(a + 1, size + 1)
             if rng.random() < 0.5]
    inner += [(0, a, float(rng.integers(1, 5))) for a in range(1, size + 1)]
    out = [(a, size + 1, float(rng.integers(1, 5))) for a in range(1, size + 1)]  # into the next entry
    edges = [(m * (size + 1) + i, m * (size + 1) + j, b) for m in range(modules) for i, j, b in inner + out]
    times = rng.integers(1, 9, size=(size + 1, k)).astype(float)
    time = np.vstack([times] * modules + [rng.integers(1, 9, size=(1, k)).astype(float)])
    return dict(time=time, edges=edges, latency=float(rng.integers(0, 3)), bandwidth=float(rng.choice([1.0, 2.0])))


@pytest.mark.parametrize("seed", range(4))
def test_repeated_modules_are_solved_once_and_the_bound_stays_below_brute_force(seed):
    """Two copies of one module pin to equal sub-instances: only the first copy's (entry, exit) pairs are
    solved (with the last op's two: 6 of 10), the second takes its schedules and bounds, and the DP bound
    stays at most the brute-force optimum (equal to it where every pair is proven)."""
    case = repeated_chain(np.random.default_rng(seed), modules=2, size=2, k=2)
    inst = build(case)
    res = split.milp_split(inst, time_limit=2.0, symmetric=False)
    assert len(res.modules) == 3 and (res.solved_pairs, res.pairs) == (6, 10)
    opt = optimum(case)
    assert res.bound <= opt + TOL and res.makespan >= opt - TOL
    if res.status == "optimal":
        assert res.bound == pytest.approx(opt, abs=TOL)
