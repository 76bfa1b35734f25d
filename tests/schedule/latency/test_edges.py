"""Edge cases: infeasible mappings in the simulator, SPLIT's global memory, symmetry canonicalization,
the validator catching broken schedules, the multi-node system's symmetry classes."""

from __future__ import annotations

import math
import numpy as np
import pytest

from onnxpart.schedule import Instance, load_system
from onnxpart.schedule.latency import exact, heuristics, split
from onnxpart.schedule.latency.simulator import InfeasibleMapping, Schedule, simulate, validate
from tests.conftest import FIXTURES


def test_simulate_rejects_infeasible_mappings():
    inst = Instance([[1, math.inf], [1, 1]], [(0, 1, 1.0)], mem=[3, 3], capacity=[5, 5], latency=1, bandwidth=1)
    with pytest.raises(InfeasibleMapping, match="op0 cannot run on d1"):
        simulate(inst, [1, 1])
    with pytest.raises(InfeasibleMapping, match="d0 holds 6 bytes > capacity 5"):
        simulate(inst, [0, 0])
    with pytest.raises(ValueError, match="topological"):
        simulate(inst, [0, 1], order=[1, 0])
    sched = simulate(inst, [0, 1])
    assert sched.makespan == 4.0 and sched.transfers[0].end == 3.0  # 1 + latency 1 + 1 byte / 1 and validate(inst, sched) == []


def test_validator_catches_broken_schedules():
    inst = Instance([[2, 2], [2, 2], [2, 2]], [(0, 1, 2.0)], latency=1, bandwidth=1)
    good = simulate(inst, [0, 1, 0])
    assert validate(inst, good) == []
    early = Schedule(good.mapping, good.start.copy(), good.end.copy(), good.order, good.transfers)
    early.start[1] -= 1
    early.end[1] -= 1
    assert any("before its input" in p for p in validate(inst, early))
    overlap = Schedule(good.mapping, np.array([0.0, 5.0, 1.0]), np.array([2.0, 7.0, 3.0]), good.order, good.transfers)
    assert any("overlap on d0" in p for p in validate(inst, overlap))
    wrong = Schedule(good.mapping, good.start, good.end + 1, good.order, good.transfers)
    assert any("runs" in p for p in validate(inst, wrong))


def test_split_reports_global_memory_overflow():
    # a chain 0 → 1 → 2 → 3: modules are solved with full capacity each; device 1 is fastest for all
    time = [[5, 1]] * 4
    inst = Instance(time, [(0, 1, 1), (1, 2, 1), (2, 3, 1)], mem=[1, 1, 1, 1], capacity=[10, 2],
                    latency=0, bandwidth=100)
    res = split.milp_split(inst, time_limit=1.0)
    assert res.status == "memory" and res.schedule is None and "memory" in res.reason
    whole = exact.cpsat(inst, 1.0)
    assert res.bound <= whole.makespan + 1e-9  # the relaxed DP still bounds the true optimum


def test_canonical_hint_sorts_identical_devices():
    time = np.array([[1, 3, 3], [1, 3, 3], [4, 2, 2], [4, 2, 2]], dtype=float)
    inst = Instance(time, [(0, 2, 1.0), (1, 3, 1.0)], latency=0, bandwidth=10)
    assert inst.symmetry_classes() == [[0], [1, 2]]
    sched = simulate(inst, [0, 0, 2, 2])  # device 2 busier than its identical copy, device 1
    canon = exact.canonical_hint(inst, sched)
    busy = canon.busy(inst.k)
    assert busy[1] == pytest.approx(4.0) and busy[2] == 0.0 and canon.makespan == sched.makespan and validate(inst, canon) == []


def test_multinode_symmetry_and_solve():
    system = load_system(str(FIXTURES / "systems" / "multinode_6x4.yaml"))
    rng = np.random.default_rng(0)
    n = 6
    time = np.tile(rng.uniform(1e-3, 5e-3, size=(n, 1)), (1, system.k))
    inst = Instance(time, [(0, 1, 1e8), (0, 2, 1e8), (1, 3, 1e8), (2, 3, 1e8), (3, 4, 1e6), (3, 5, 1e6)],
                    system=system)
    assert [len(c) for c in inst.symmetry_classes()] == [4] * 6
    heft = heuristics.heft(inst)
    res = exact.cpsat(inst, 2.0, heft.schedule)
    assert validate(inst, res.schedule) == [] and res.bound <= res.makespan + 1e-12
    assert res.makespan <= heft.makespan + 1e-12
