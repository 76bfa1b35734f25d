"""The throughput objective on systems with many devices (:func:`onnxpart.schedule.throughput.model.split_family`):
the 6-node × 4-GPU system's splits are listed without enumerating its 10^15 products, in canonical order
on each node, with the even data-parallel splits; the load LP stays a proven bound when the heuristics'
families are canonical or cut at MAX_SPLITS; CP-SAT keeps every size; the baselines stop at their time
limit, and their faster forms (pruned list scheduling, vectorized bMET, data parallelism in closed form)
choose what their definitions choose."""

from __future__ import annotations

import numpy as np
import pytest

from onnxpart.schedule import Instance, Options, from_graph, load_system, solve
from onnxpart.schedule.throughput import bounds, exact, heuristics, model, simulator
from tests.conftest import FIXTURES
from tests.schedule.throughput.test_solve import BATCH, CASES, TOL, _brute, _case


@pytest.fixture(scope="module")
def multinode() -> Instance:
    from onnxpart.onnx_io import load_graph

    graph, _ = load_graph(FIXTURES / "diamond.onnx")
    return from_graph(graph, load_system(str(FIXTURES / "systems" / "multinode_6x4.yaml")))


def test_the_multinode_system_gets_canonical_splits(multinode):
    fam = model.split_family(multinode, 64)
    assert fam.canonical and not fam.complete and len(fam.splits) > model.MAX_SPLITS
    classes = multinode.symmetry_classes()
    counts = [sum(1 for x in s if x) for s in fam.splits[:model.MAX_SPLITS]]
    assert counts == sorted(counts) and len(set(fam.splits)) == len(fam.splits)
    assert max(counts) < 16 and (4,) * 16 + (0,) * 8 in fam.splits  # data parallelism: an even split
    for s in fam.splits:
        assert sum(s) == 64 and all(x == 0 or x in multinode.batch_sizes[u] for u, x in enumerate(s))
        for cls in classes:  # the copies of one node: nonincreasing slices
            sizes = [s[u] for u in cls]
            assert sizes == sorted(sizes, reverse=True)
    assert [len(c) for c in classes] == [4] * 6


def test_throughput_on_the_multinode_system(multinode):
    sol = solve(multinode, Options(methods=("heft", "exact"), objective="throughput", batch=64, time_limit=3.0))
    assert not simulator.validate(multinode, sol.schedule)
    lp = next(b for b in sol.lower_bounds if b.method == "load-lp")
    assert lp.status == "optimal" and "over slices" in lp.note
    assert 0 < sol.best_lower_bound <= sol.makespan * (1 + 1e-9)


def test_small_systems_keep_every_split():
    """Two identical devices and whole-batch slices only: both orders are kept, so two independent ops
    run side by side (a canonical family would put both on the first copy, C = 2)."""
    inst = Instance([[1.0, 1.0], [1.0, 1.0]], [], batch_sizes=[(2,), (2,)], fixed=[[1.0, 1.0], [1.0, 1.0]])
    fam = model.split_family(inst, 2)
    assert fam.splits == [(0, 2), (2, 0)] and fam.complete and not fam.canonical
    assert heuristics.heft(inst, 2).schedule.makespan == pytest.approx(1.0)


def test_canonical_families_sum_the_load_lp_rows_per_class(monkeypatch):
    """Past MAX_SPLITS the family keeps (2, 0) only; per-device load rows over it would prove C ≥ 2 while
    the two ops run side by side in C = 1. Summed per class the LP proves 1."""
    monkeypatch.setattr(model, "MAX_SPLITS", 1)
    inst = Instance([[1.0, 1.0], [1.0, 1.0]], [], batch_sizes=[(2,), (2,)], fixed=[[1.0, 1.0], [1.0, 1.0]])
    fam = model.split_family(inst, 2)
    assert fam.splits == [(2, 0)] and fam.canonical and fam.complete
    lp = bounds.load_lp(inst, 2).bound
    assert lp.status == "optimal" and lp.value == pytest.approx(1.0) and "per class" in lp.note
    res = exact.cpsat(inst, 2, 2.0)  # every size, not the family's: finds the optimum
    assert res.status == "optimal" and res.schedule.makespan == pytest.approx(1.0)


@pytest.mark.parametrize("case", CASES[:4], ids=lambda c: f"seed{c[0]}-n{c[1]}")
def test_cut_families_keep_the_bounds_below_and_the_methods_above(case, monkeypatch):
    """With families cut at two splits the load LP becomes the slice LP; it, CP-SAT's bound and every
    heuristic still sit on the right side of the brute-force optimum."""
    monkeypatch.setattr(model, "MAX_SPLITS", 2)
    c = _case(*case)
    inst = Instance(c["time"], c["edges"], latency=c["lat"], bandwidth=c["bw"], batch_sizes=c["sizes"],
                    fixed=c["fixed"])
    opt = _brute(c)
    relaxed = bounds.load_lp(inst, BATCH)
    cut = not all(f.complete for f in model.op_families(inst, BATCH))
    assert ("over slices" in relaxed.bound.note) == cut and relaxed.bound.value <= opt + TOL
    res = exact.cpsat(inst, BATCH, 2.0, heuristics.heft(inst, BATCH).schedule)
    assert res.status == "optimal" and res.schedule.makespan == pytest.approx(opt, abs=TOL)
    for r in (heuristics.met(inst, BATCH), heuristics.greedy(inst, BATCH), heuristics.heft(inst, BATCH)):
        assert not simulator.validate(inst, r.schedule) and r.schedule.makespan >= opt - TOL


def test_slice_lp_is_a_relaxation_of_the_split_lp():
    """On a complete family the split LP is at least the slice LP (every split is a 0/1 slice choice)."""
    rng = np.random.default_rng(3)
    inst = Instance(rng.integers(1, 9, size=(5, 3)).astype(float), [(0, 1, 1.0), (1, 2, 1.0), (3, 4, 2.0)],
                    latency=1.0, bandwidth=2.0, batch_sizes=[(1, 2, 4)] * 3)
    split_lp = bounds.load_lp(inst, 4).bound.value
    slice_lp = bounds._slice_lp(inst, 4, 10.0, 0.0).bound.value
    assert 0 < slice_lp <= split_lp + TOL


@pytest.mark.parametrize("seed", range(4))
def test_data_parallelism_in_closed_form_is_the_best_simulated_split(seed):
    """``uniform`` tables each device's total and memory instead of simulating every common split; the
    simulation of every split, kept here, agrees on the best makespan."""
    rng = np.random.default_rng(seed)
    edges = [(i, j, float(rng.integers(1, 4))) for i in range(6) for j in range(i + 1, 6) if rng.random() < 0.5]
    inst = Instance(rng.uniform(1, 9, size=(6, 3)), edges, latency=1.0, bandwidth=2.0, mem=rng.uniform(1, 3, 6),
                    act_mem=rng.uniform(0.5, 1, 6), capacity=[60.0, 30.0, 20.0], batch_sizes=[(1, 2, 4, 8)] * 3,
                    fixed=rng.uniform(0, 1, size=(6, 3)))
    cands = model.op_splits(inst, 8)
    common = set(cands[0]).intersection(*map(set, cands[1:]))
    simulated = min(simulator.makespan(inst, [s] * inst.n) for s in common)
    found = heuristics.uniform(inst, 8).schedule
    assert not simulator.validate(inst, found) and found.makespan == pytest.approx(simulated)


def test_the_list_baselines_stop_at_their_time_limit(multinode):
    for fn in (heuristics.greedy, heuristics.heft):
        res = fn(multinode, 64, 0.0)
        assert res.timed_out and res.schedule is None
    res = exact.cpsat(multinode, 64, 0.0)
    assert res.status == "time_limit" and res.bound is None and "not built" in res.note


@pytest.mark.parametrize("seed", range(6))
def test_the_list_baselines_skip_only_splits_that_cannot_win(seed, monkeypatch):
    """bGreedy and bHEFT try the splits by a lower bound on their finish and stop past the best; with the
    bound disabled (zero slice times: every split tried) they choose the same splits."""
    rng = np.random.default_rng(seed)
    edges = [(i, j, float(rng.integers(1, 4))) for i in range(8) for j in range(i + 1, 8) if rng.random() < 0.4]
    inst = Instance(rng.uniform(1, 9, size=(8, 4)), edges, latency=0.5, bandwidth=2.0, batch_sizes=[(1, 2, 4, 8)] * 4,
                    fixed=rng.uniform(0, 1, size=(8, 4)))
    pruned = [heuristics.greedy(inst, 8).schedule, heuristics.heft(inst, 8).schedule]
    monkeypatch.setattr(heuristics, "_slice_times", lambda inst, i, cands: np.zeros((len(cands), inst.k)))
    every = [heuristics.greedy(inst, 8).schedule, heuristics.heft(inst, 8).schedule]
    for a, b in zip(pruned, every):
        assert a.splits == b.splits and a.makespan == b.makespan


@pytest.mark.parametrize("seed", range(4))
def test_bmet_takes_the_fitting_split_whose_slowest_slice_is_fastest(seed):
    """bMET (vectorized) against its definition, op by op in BFS order with the memory already taken."""
    rng = np.random.default_rng(seed)
    inst = Instance(rng.uniform(1, 9, size=(7, 3)), [(0, 1, 1.0), (1, 2, 1.0), (3, 4, 2.0), (5, 6, 1.0)],
                    mem=rng.uniform(1, 3, 7), act_mem=rng.uniform(0.5, 1, 7), capacity=[30.0, 16.0, 12.0],
                    batch_sizes=[(1, 2, 4)] * 3, fixed=rng.uniform(0, 1, size=(7, 3)))
    got = heuristics.met(inst, 4).schedule.splits
    load = np.zeros(inst.k)
    for i in inst.topo:
        ok = [s for s in model.op_splits(inst, 4)[i] if model.fits(inst, load, i, s)]
        want = min(ok, key=lambda s: (max(inst.time_batch(i, u, x) for u, x in enumerate(s)), sum(x > 0 for x in s)))
        assert got[i] == want
        model.add_load(inst, load, i, want)


def test_the_even_splits_take_the_fastest_devices_first():
    """A slow host listed first and two kinds of twelve GPUs: the data-parallel splits past the cut use the
    24 GPUs, not the host (in device order every even split over 24 devices has a slice on the host)."""
    time = np.array([[50.0] + [1.0] * 12 + [1.1] * 12] * 3)
    inst = Instance(time, [(0, 1, 1.0), (1, 2, 1.0)], latency=0.0, bandwidth=1.0, batch_sizes=[(1, 2, 4, 8)] * 25)
    fam = model.split_family(inst, 96)
    gpus = (0,) + (4,) * 24
    assert not fam.complete and gpus in fam.splits and gpus not in fam.splits[:model.MAX_SPLITS]
    best = heuristics.uniform(inst, 96).schedule
    assert best.splits[0] == gpus and not simulator.validate(inst, best)
