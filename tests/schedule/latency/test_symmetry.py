"""MILP-SPLIT's symmetry reduction (:mod:`onnxpart.schedule.symmetry`, Section 5.2): the automorphism
generators are true automorphisms (checked here from the raw system, not by the package's check), the
pair orbits have the expected counts (block swaps and rotations of whole nodes included), a changed link
is not an automorphism, relabelled module schedules are valid and optimal for their own pair, and SPLIT
with the reduction matches SPLIT without it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from onnxpart.schedule import Instance, load_system
from onnxpart.schedule.common import ticks
from onnxpart.schedule.common.modules import cut_ops, segments
from onnxpart.schedule.latency import exact, split, symmetry
from onnxpart.schedule.latency.simulator import validate
from tests.schedule.helpers import budgets_not_clock, chain_of_modules

FAST = {"bandwidth": "300GB/s", "latency": "2us"}
SLOW = {"bandwidth": "100Gbps", "latency": "5us"}


def _system(tmp_path, devices: list[dict], pairs: list[dict], default: dict | None = SLOW):
    path = tmp_path / "system.json"
    links = {"pairs": pairs} | ({"default": default} if default else {})
    path.write_text(json.dumps({"devices": devices, "links": links}))
    return load_system(str(path))


def _nodes(tmp_path, nodes: int, count: int, inter: list[dict] = ()):
    """``nodes`` nodes of ``count`` A100s: fast links inside a node, the slow default between nodes."""
    devices = [{"name": f"node{i}", "spec": "a100", "count": count} for i in range(nodes)]
    return _system(tmp_path, devices, [{"from": f"node{i}", "to": f"node{i}"} | FAST for i in range(nodes)]
                   + list(inter))


def _instance(system, columns: list[int]) -> Instance:
    """A diamond whose op times on device ``u`` are column ``columns[u]`` of a fixed table (equal
    columns: identical devices)."""
    table = np.array([[1e-3, 2e-3], [2e-3, 1e-3], [3e-3, 5e-4], [1e-3, 1e-3]])
    edges = [(0, 1, 1e7), (0, 2, 2e7), (1, 3, 3e7), (2, 3, 1e7)]
    return Instance(table[:, columns], edges, system=system)


def _true_automorphism(inst: Instance, system, perm: np.ndarray) -> bool:
    """From the raw data: op times, capacities, batch sizes, every directed link (or its absence) and
    every edge's delay matrix are the same after relabelling ``u`` as ``perm[u]``."""
    k = inst.k
    same_links = all(system.links.get((perm[u], perm[v])) == system.links.get((u, v))
                     for u in range(k) for v in range(k))
    return (same_links and all(np.array_equal(inst.time[:, perm[u]], inst.time[:, u]) for u in range(k))
            and all(inst.capacity[perm[u]] == inst.capacity[u] for u in range(k))
            and all(inst.batch_sizes[perm[u]] == inst.batch_sizes[u] for u in range(k))
            and all(inst.delays[e, perm[u], perm[v]] == inst.delays[e, u, v]
                    for e in range(len(inst.edges)) for u in range(k) for v in range(k)))


def _orbits(inst: Instance, entry_none: bool = False) -> int:
    devices = range(inst.k)
    pairs = [(None, v) for v in devices] if entry_none else [(u, v) for u in devices for v in devices]
    found = symmetry.pair_orbits(pairs, symmetry.generators(inst), inst.k)
    for pair, (rep, perm) in found.items():  # the permutation maps the representative onto the pair
        assert symmetry._image(perm, rep) == pair and rep == min(
            (p for p, (r, _) in found.items() if r == rep), key=lambda p: tuple(-1 if u is None else u for u in p))
    return len({rep for rep, _ in found.values()})


def test_two_identical_gpus_and_a_cpu(tmp_path):
    system = _system(tmp_path, [{"name": "cpu", "spec": "cpu"}, {"name": "gpu", "spec": "a100", "count": 2}], [])
    inst = _instance(system, [0, 1, 1])
    gens = symmetry.generators(inst)
    assert [list(g) for g in gens] == [[0, 2, 1]] and all(_true_automorphism(inst, system, g) for g in gens)
    # (c,c); (c,g0)~(c,g1); (g0,c)~(g1,c); (g0,g0)~(g1,g1); (g0,g1)~(g1,g0)
    assert _orbits(inst) == 5 and _orbits(inst, entry_none=True) == 2


def test_two_nodes_of_two_gpus_swap_as_blocks(tmp_path):
    """Transpositions alone leave 6 orbits of the 16 pairs; swapping the nodes whole merges them into 3:
    one device, two devices of one node, two nodes."""
    system = _nodes(tmp_path, 2, 2)
    inst = _instance(system, [0, 0, 0, 0])
    gens = symmetry.generators(inst)
    assert all(_true_automorphism(inst, system, g) for g in gens)
    assert any(list(g) == [2, 3, 0, 1] for g in gens)  # the block swap
    assert _orbits(inst) == 3 and _orbits(inst, entry_none=True) == 1


def _lopsided(tmp_path, what: str):
    """Two nodes of two GPUs that differ in one thing: a slower node0 → node1 link than node1 → node0,
    or node1's batch sizes."""
    if what == "link":
        return _nodes(tmp_path, 2, 2, [{"from": "node0", "to": "node1", "bandwidth": "10Gbps", "latency": "5us"}])
    devices = [{"name": "node0", "spec": "a100", "count": 2}, {"name": "node1", "spec": "a100", "count": 2,
                                                              "batch_sizes": [1, 2]}]
    return _system(tmp_path, devices, [{"from": f"node{i}", "to": f"node{i}"} | FAST for i in range(2)])


@pytest.mark.parametrize("what", ["link", "batch sizes"])
def test_a_changed_link_is_not_an_automorphism(tmp_path, what):
    """Swapping the nodes maps node0 → node1 onto node1 → node0 (or node0's batch sizes onto node1's):
    rejected, so the orbits are only those of the transpositions inside each node."""
    system = _lopsided(tmp_path, what)
    inst = _instance(system, [0, 0, 0, 0])
    swap = np.array([2, 3, 0, 1])
    assert not _true_automorphism(inst, system, swap) and not inst.preserved_by(swap)
    assert not Instance(inst.time, [], system=system).preserved_by(swap)  # no edge's delays show the link
    gens = symmetry.generators(inst)
    assert all(_true_automorphism(inst, system, g) for g in gens)
    assert all(set(g[:2]) == {0, 1} for g in gens)  # nothing moves a node0 GPU to node1
    assert _orbits(inst) == 6


def test_a_candidate_that_is_not_an_automorphism_is_dropped(tmp_path, monkeypatch):
    """Every generator is checked on the instance: a (wrong) class permutation swapping the lopsided
    nodes is not used."""
    inst = _instance(_lopsided(tmp_path, "link"), [0, 0, 0, 0])
    monkeypatch.setattr(symmetry, "_class_transversal", lambda inst, classes: [[1, 0]])
    assert [list(g) for g in symmetry.generators(inst)] == [[1, 0, 2, 3], [0, 1, 3, 2]]


def test_a_directed_ring_of_nodes_rotates(tmp_path):
    """Three devices with fast links 0 → 1 → 2 → 0 only: no swap is an automorphism, the rotations are
    (the class-permutation search finds them), so the 9 pairs fall into 3 orbits."""
    devices = [{"name": f"d{i}", "spec": "a100"} for i in range(3)]
    system = _system(tmp_path, devices, [{"from": f"d{i}", "to": f"d{(i + 1) % 3}"} | FAST for i in range(3)])
    inst = _instance(system, [0, 0, 0])
    gens = symmetry.generators(inst)
    assert gens and all(_true_automorphism(inst, system, g) for g in gens)
    assert inst.symmetry_classes() == [[0], [1], [2]] and _orbits(inst) == 3


def _symmetric_chain(seed: int) -> Instance:
    """Random modules on a CPU and two identical GPUs (GPU columns equal, uniform links)."""
    chain = chain_of_modules(np.random.default_rng(seed), modules=3, size=2, k=2)
    return Instance(chain.time[:, [0, 1, 1]], chain.edges, latency=0.5, bandwidth=2.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_relabelled_module_schedules_are_valid_and_optimal_for_their_pair(seed):
    """Each orbit mate gets its representative's optimal schedule relabelled: valid on the mate's own
    pinned sub-instance (a wrong permutation breaks the pins) and as short as the mate's own optimum."""
    inst = _symmetric_chain(seed)
    segs = segments(inst, cut_ops(inst))
    tables, subs, _ = split._module_pairs(inst, segs)
    assert tables.images and len(subs) < sum(len(t) for t in tables.ub)
    for rep, mates in tables.images.items():
        best = exact.cpsat(subs[rep], 10.0)
        assert best.status == "optimal"
        for (s, u, v), perm in mates:
            ops, entry, exit_ = segs[s]
            own, _ = split.segment_instance(inst, ops, {entry: u} if entry is not None else {},
                                            (exit_, v) if exit_ is not None else None)
            moved = symmetry.relabel(best.schedule, perm)
            assert validate(own, moved) == []
            assert moved.makespan == pytest.approx(exact.cpsat(own, 10.0).makespan)


@pytest.mark.parametrize("seed", [0, 1])
def test_split_with_and_without_the_reduction_agree(seed, monkeypatch):
    """Module solves optimal: the same makespan and DP bound with the orbit mates filled by relabelling
    as with every pair solved, a valid joined schedule, and fewer pairs solved."""
    inst = _symmetric_chain(seed)
    limit = budgets_not_clock(monkeypatch, 10.0)
    on, off = (split.milp_split(inst, time_limit=limit, symmetric=flag) for flag in (True, False))
    for res in (on, off):
        assert res.status == "optimal" and validate(inst, res.schedule) == []
    assert on.makespan == pytest.approx(off.makespan) and on.bound == pytest.approx(off.bound)
    assert on.pairs == off.pairs == off.solved_pairs and on.solved_pairs < off.solved_pairs
    assert on.module_status == off.module_status  # every pair has a status, solved or filled
    assert not math.isinf(on.makespan)


def test_refinement_re_solves_representatives_of_open_mates(monkeypatch):
    """First-pass budgets too small to prove the chains: the rounds re-solve the open pairs on the DP's
    chains — which may be orbit mates, re-solved through their representative."""
    monkeypatch.setattr(ticks, "DET_PER_SECOND", 0.002)
    chain = chain_of_modules(np.random.default_rng(0), modules=2, size=8, k=2)
    inst = Instance(chain.time[:, [0, 0, 0]], chain.edges, latency=0.1, bandwidth=20.0)  # its chain: mates
    res = split.milp_split(inst, time_limit=budgets_not_clock(monkeypatch, 6.0), seed=1, symmetric=True)
    assert res.solved_pairs < res.pairs and res.solves > res.solved_pairs  # some representatives solved again
    assert validate(inst, res.schedule) == [] and res.bound <= res.makespan + 1e-9
