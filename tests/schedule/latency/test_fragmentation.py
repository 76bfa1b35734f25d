"""Fragmentation: a system file's per-transfer link latency is charged on every transfer by the simulator,
the exact models and the heuristics alike (raising it removes device hops), and the pieces' dependency
graph stays acyclic where a "one piece per device" split would loop — the pieces run in order in
onnxruntime (--verify)."""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest

from onnxpart.schedule import OBJECTIVES, Instance, Solution, load_system, simulate
from onnxpart.schedule.latency import exact, heuristics
from onnxpart.schedule.latency.pieces import later_reads, piece_of, pieces
from tests.conftest import FIXTURES
from tests.schedule.helpers import brute_force

N = 6  # a chain; op i runs in 1 s on device i % 2 and in 3 s on the other


def chain(tmp_path, latency: float) -> Instance:
    path = tmp_path / f"lat{latency}.yaml"
    path.write_text("devices: [{name: a}, {name: b}]\nlinks:\n"
                    f"  default: {{bandwidth: 1TB/s, latency: {latency}}}\n")
    time = [[1.0, 3.0] if i % 2 == 0 else [3.0, 1.0] for i in range(N)]
    return Instance(time, [(i, i + 1, 1.0) for i in range(N - 1)], system=load_system(str(path)))


def hops(inst: Instance, mapping) -> int:
    return sum(int(mapping[i]) != int(mapping[j]) for i, j, _ in inst.edges)


def test_the_simulator_charges_the_latency_once_per_transfer(tmp_path):
    alternate = [i % 2 for i in range(N)]
    for latency in (0.0, 0.5, 2.0):
        inst = chain(tmp_path, latency)
        sched = simulate(inst, alternate, list(range(N)))
        assert sched.makespan == pytest.approx(N + (N - 1) * (latency + 1.0 / 1e12))


@pytest.mark.parametrize("latency, expected_hops", [(0.0, N - 1), (2.5, 0)])
def test_raising_the_latency_removes_device_hops(tmp_path, latency, expected_hops):
    inst = chain(tmp_path, latency)
    opt, _ = brute_force(inst.time, inst.edges, np.full((2, 2), latency), np.full((2, 2), 1e12))
    found = {}
    for name, solve in (("cpsat", exact.cpsat), ("milp", exact.milp)):
        res = solve(inst, 5.0, heuristics.heft(inst).schedule)
        assert res.status == "optimal" and res.makespan == pytest.approx(opt, rel=1e-6)
        found[name] = hops(inst, res.schedule.mapping)
    heft = hops(inst, heuristics.heft(inst).schedule.mapping)
    assert found == {"cpsat": expected_hops, "milp": expected_hops} and heft == expected_hops


def naive_device_pieces(mapping) -> np.ndarray:
    """The splitter this guards against: one piece per device, whatever the order."""
    return np.asarray(mapping, dtype=np.int64)


def has_cycle(inst: Instance, assignment: np.ndarray) -> bool:
    g = nx.DiGraph((int(assignment[i]), int(assignment[j])) for i, j, _ in inst.edges if assignment[i] != assignment[j])
    return not nx.is_directed_acyclic_graph(g)


def test_pieces_of_a_diamond_are_acyclic_where_one_piece_per_device_loops(tmp_path):
    """diamond.onnx: conv_1 → (relu_2 → conv_3 | sigmoid_4 → conv_5) → add_6 → conv_7. With conv_3 alone
    on the T4, a piece per device would read cpu → t4 → cpu; the pieces are runs in execution order."""
    from onnxpart.cli.option_groups import ModelSource
    from onnxpart.cli.schedule_cmd import _load, _write

    system = FIXTURES / "systems" / "cpu_t4_a100.yaml"
    inst, graph, loaded = _load(FIXTURES / "diamond.onnx", system, ModelSource())
    names = inst.op_names
    mapping = [1 if name == "conv_3" else 0 for name in names]
    order = [names.index(n) for n in ("conv_1", "relu_2", "sigmoid_4", "conv_5", "conv_3", "add_6", "conv_7")]
    sched = simulate(inst, mapping, order)
    assert has_cycle(inst, naive_device_pieces(mapping))
    parts = pieces(inst, sched.mapping, sched.order)
    assert [p.device for p in parts] == [0, 1, 0] and later_reads(inst, piece_of(inst, parts)) == []
    assert not has_cycle(inst, piece_of(inst, parts))

    from onnxpart.files import OutputDir
    from onnxpart.loading import weight_policy

    out = tmp_path / "out"
    check = dict(verify=True, seed=0, tolerance=1e-4, freeze=False, axis=None)
    summary = _write(OBJECTIVES["latency"], OutputDir(out), Solution(inst, sched, "heft"), sched, graph, loaded,
                     (str(FIXTURES / "diamond.onnx"), loaded.sha256), {}, weight_policy(loaded, None), check)
    assert summary["verify"]["ok"] and summary["pieces"] == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert [p["device"] for p in manifest["pieces"]] == ["cpu", "t4", "cpu"]
    assert math.isclose(manifest["makespan"], sched.makespan)


def test_parallel_branches_interleaved_in_time_stay_one_piece_per_device():
    """source → (1 → 2 on a | 3 → 4 on b) → sink on a, run interleaved 1, 3, 2, 4: a runtime needs three
    sessions (a's branch with the source, b's branch, the sink after b's data comes back), not one per
    run of consecutive ops in time (five)."""
    inst = Instance(np.ones((6, 2)), [(0, 1, 1.0), (1, 2, 1.0), (0, 3, 1.0), (3, 4, 1.0), (2, 5, 1.0), (4, 5, 1.0)])
    parts = pieces(inst, [0, 0, 0, 1, 1, 0], [0, 1, 3, 2, 4, 5])
    assert [(p.device, p.ops) for p in parts] == [(0, (0, 1, 2)), (1, (3, 4)), (0, (5,))]
    assert later_reads(inst, piece_of(inst, parts)) == []
