"""The per-piece (device switch) cost: every transfer into a device pays its switch (the launch of the piece
it starts there), so every method's objective pays for fragmentation where it happens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxpart.schedule import Options, solve
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency.pieces import pieces
from onnxpart.schedule.system.model import Device, Link, System

#: a fork of two 10-second branches between two 1-second ops: two devices halve it when switching is free
TIME = np.array([[1.0, 1.0], [10.0, 10.0], [10.0, 10.0], [1.0, 1.0]])
EDGES = [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]


def fork(switch: float) -> Instance:
    devices = [Device(name, name, None, math.inf, switch=switch) for name in ("a", "b")]
    return Instance(TIME, EDGES, system=System(devices, {(0, 1): Link(1e9), (1, 0): Link(1e9)}))


@pytest.mark.parametrize("method", ["greedy", "heft", "cpop", "sa", "ea", "cpsat", "milp"])
def test_every_method_pays_the_switch_and_keeps_one_piece_where_switching_costs_more_than_it_saves(method):
    free = solve(fork(0.0), Options(methods=(method,), time_limit=5.0, iterations=200))
    costly = solve(fork(20.0), Options(methods=(method,), time_limit=5.0, iterations=200))
    assert len(set(free.mapping)) == 2 and free.makespan == pytest.approx(12.0, abs=1e-6)
    assert len(pieces(costly.instance, costly.mapping, costly.schedule.order)) == 1 and costly.makespan == pytest.approx(22.0)
