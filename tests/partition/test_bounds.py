"""Exactness and validity against brute force: ideal DP and exact MIP equal the optimum; every lower
bound is at most the optimum, which is at most what solve() returns."""

import numpy as np
import pytest
from tests.partition.partition_helpers import brute_force, random_instance

from onnxpart.partition import IDEAL_LIMIT, Options, bounds, solve
from onnxpart.partition.exact import bottleneck_mip, exact_mip, guess_mip
from onnxpart.partition.ideals import enumerate_ideals, ideal_dp
from onnxpart.partition.model import bottleneck, check_assignment, simple_lower_bound, work_lower_bound
from onnxpart.partition.orders import BrkgaOptions, brkga

CASES = [(n, seed) for n, seed in ((5, 0), (6, 1), (6, 2), (7, 3), (7, 4))]


@pytest.mark.parametrize("n,seed", CASES)
def test_ideal_dp_equals_brute_force_for_every_k(n, seed):
    inst = random_instance(n, seed, stage_memory=150.0 if seed % 2 else None)
    result = ideal_dp(inst, 4, IDEAL_LIMIT)
    for k in range(1, 5):
        assert result.optimum_by_k[k - 1] == pytest.approx(brute_force(inst, k), abs=1e-9)
    check_assignment(inst, result.assignment, 4)
    assert bottleneck(inst, result.assignment, 4) == pytest.approx(result.optimum_by_k[-1], abs=1e-9)


def test_ideals_are_counted_with_a_limit():
    inst = random_instance(8, 0, density=0.0)  # no edges: every subset is an ideal
    assert len(enumerate_ideals(inst, 1000)) == 2 ** 8
    assert enumerate_ideals(inst, 100) is None
    assert ideal_dp(inst, 2, limit=100) is None


@pytest.mark.parametrize("n,seed", CASES)
def test_mips_bound_the_optimum(n, seed):
    inst = random_instance(n, seed, stage_memory=150.0 if seed % 2 else None)
    for k in (2, 3):
        opt = brute_force(inst, k)
        exact = exact_mip(inst, k, 20, lower=simple_lower_bound(inst, k))
        assert exact.status == "optimal" and exact.value == pytest.approx(opt, rel=1e-6)
        assert bottleneck(inst, exact.incumbent, k) == pytest.approx(opt, rel=1e-6)
        L = work_lower_bound(inst, k)
        assert bottleneck_mip(inst, k, L, 20).value <= opt * (1 + 1e-6)
        guesses = [guess_mip(inst, k, j, L, 20).value for j in range(1, k + 1)]
        assert min(guesses) <= opt * (1 + 1e-6)


@pytest.mark.parametrize("n,seed", CASES[:3])
def test_solve_sandwiches_the_optimum(n, seed):
    inst = random_instance(n, seed)
    for k in (2, 3):
        opt = brute_force(inst, k)
        solution = solve(inst, Options(k=k, time_limit=20, bounds=("simple", "bottleneck", "guess", "exact"),
                                       ideal_limit=0, brkga=BrkgaOptions(population=10, generations=5)))
        check_assignment(inst, solution.assignment, k)
        assert solution.value >= opt - 1e-9
        for bound in solution.lower_bounds:
            assert bound.value is not None and bound.value <= opt * (1 + 1e-6)
        assert solution.best_lower_bound == pytest.approx(opt, rel=1e-6)  # tiny: the exact MIP closes it
        # solve() ends the MIPs still running once the gap is closed; bounds() waits for all of them.
        lbs = bounds(inst, k, ("simple", "bottleneck", "guess", "exact"), time_limit=20)
        methods = {b.method for b in lbs}
        assert {"simple", "single-block", "convex-block", "weighted-bottleneck", "bottleneck", "bottleneck-guess",
                "exact"} <= methods
        assert all(b.value is not None and b.value <= opt * (1 + 1e-6) for b in lbs)


def test_bounds_alone_and_k1():
    inst = random_instance(6, 5)
    lbs = bounds(inst, 2, ("simple", "exact"), time_limit=10, workers=1)
    assert [b.method for b in lbs] == ["simple", "single-block", "convex-block", "exact"]
    assert lbs[-1].value == pytest.approx(brute_force(inst, 2), rel=1e-6)
    solution = solve(inst, Options(k=1, time_limit=5, ideal_limit=0))
    assert solution.value == pytest.approx(inst.work.sum())
    assert solution.best_lower_bound == pytest.approx(solution.value)


def test_search_is_deterministic_for_a_seed():
    inst = random_instance(30, 7, density=0.1)
    options = Options(k=4, time_limit=30, seed=3, bounds=(), ideal_limit=0,
                      brkga=BrkgaOptions(population=12, generations=6), random_orders=5)
    first, second = solve(inst, options), solve(inst, options)
    assert (first.assignment == second.assignment).all() and first.value == second.value


def test_brkga_minimizes_a_known_function():
    target = np.linspace(0, 1, 8)
    value, keys = brkga(lambda x: float(((x - target) ** 2).sum()), 8, BrkgaOptions(population=30, generations=40),
                        np.random.default_rng(0))
    assert value < 0.05 and value == pytest.approx(float(((keys - target) ** 2).sum()))


def test_guess_without_a_proof_for_some_j_falls_back_to_eq14():
    from onnxpart.partition.bound_lane import merge_bounds as _merge_bounds
    from onnxpart.partition.exact import BoundResult

    results = [BoundResult("guess-1", 5.0, "optimal", 1.0), BoundResult("guess-2", None, "time_limit", 2.0),
               BoundResult("guess-3", 7.0, "time_limit", 1.0)]
    lbs = []
    _merge_bounds(lbs, results, 3, done=True, work_floor=4.0)
    assert lbs[0].method == "bottleneck-guess" and lbs[0].value == 4.0 and lbs[0].status == "time_limit"
    lbs = []
    _merge_bounds(lbs, results[:2], 3, done=True, work_floor=4.0)  # a guess never ran: nothing proven
    assert lbs[0].value is None


def test_running_jobs_post_rising_bounds(monkeypatch):
    """A job's poster sends its bound in instance units, only when it rises, at most once per interval."""
    from onnxpart import parallel

    sent: list[tuple[str, float]] = []
    monkeypatch.setattr(parallel, "_POST", lambda method, value: sent.append((method, value)))
    poster = parallel.BoundPoster("exact", scale=2.0, interval=0.0)
    for bound in (1.0, 0.5, 1.0, 3.0):
        poster(bound)
    assert sent == [("exact", 2.0), ("exact", 6.0)]
    slow = parallel.BoundPoster("bottleneck", scale=1.0, interval=3600.0)
    slow(1.0)
    slow(2.0)  # within the interval: held back
    assert sent[-1] == ("bottleneck", 1.0)


def test_bounds_of_jobs_ended_early_are_reported():
    from onnxpart.board import Board
    from onnxpart.partition.bound_lane import SOURCES

    board = Board()
    for bound in bounds(random_instance(6, 2), 2, ("simple",), time_limit=5):
        board.add(bound)
    for method, value in {"exact": 1.5, "simple": 9.0, "guess-1": 7.0}.items():
        board.post(method, value)
    added = board.posted_bounds(SOURCES)
    assert [(b.method, b.value, b.solver) for b in added] == [("exact", 1.5, "highs")]


def test_progress_lower_bound_only_rises_and_never_passes_the_incumbent():
    inst = random_instance(9, 4)
    events = []
    solution = solve(inst, Options(k=3, time_limit=15, bounds=("simple", "bottleneck", "guess", "exact"),
                                   ideal_limit=0, brkga=BrkgaOptions(population=10, generations=5),
                                   progress=events.append))
    lowers = [e.lower for e in events]
    assert lowers == sorted(lowers)
    assert all(e.lower <= e.upper * (1 + 1e-6) for e in events)
    assert events[-1].lower == pytest.approx(solution.best_lower_bound)


def test_exact_model_size_is_counted_before_building_it_and_too_large_is_skipped(monkeypatch):
    """Partition -k 80 on the 70B-shaped export built the exact MIP (12.7 M nonzeros, 1.5 GB in its worker,
    3.6 GB for the command) and proved nothing with it in 60 s. Its size is counted first (an upper bound on
    what HiGHS receives, within 10% on that export); above EXACT_NONZEROS it is not built, and the
    certificate lists it as skipped, with why."""
    import onnxpart.partition.exact as exact

    built = []
    original = exact.solve_highs
    monkeypatch.setattr(exact, "solve_highs", lambda h, *a, **kw: built.append(h.getNumNz()) or original(h, *a, **kw))
    for n, seed in CASES:
        inst = random_instance(n, seed, stage_memory=150.0 if seed % 2 else None)
        for k in (2, 3, 5):
            exact.exact_mip(inst, k, 5)
            assert built.pop() <= exact.exact_nonzeros(inst, k)
    inst = random_instance(7, 3)
    monkeypatch.setattr(exact, "EXACT_NONZEROS", exact.exact_nonzeros(inst, 3) - 1)
    options = Options(k=3, time_limit=5, bounds=("simple", "exact"), workers=1, ideal_limit=0)
    for found in (bounds(inst, 3, ("simple", "exact"), time_limit=5, workers=1), solve(inst, options).lower_bounds):
        entry = next(b for b in found if b.method == "exact")
        assert entry.value is None and entry.status == "skipped" and "nonzeros" in entry.note
    assert not built  # no exact model was built
    exact_two = [b for b in bounds(inst, 2, ("simple", "exact"), time_limit=5, workers=1) if b.method == "exact"]
    assert exact_two and exact_two[0].status == "optimal"  # k = 2 is under the cap: it runs
