"""The batch's memory floor (3.7 summed over the devices, :func:`model.memory_floor`): on small instances
it equals an independent brute force over every split of every op (both ends of its ``m`` range are
reachable there), and where it exceeds the devices' capacities together the throughput solve stops at
once with exit 4 (the RWNN sd 4-channel stack at a batch of 128: 181.9 GiB against 153.4 GiB)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnxpart.errors import InfeasibleError
from onnxpart.schedule import Instance, Options, solve
from onnxpart.schedule.throughput import model

BATCH = 4


def _case(seed: int) -> Instance:
    """3 ops on 2 devices with sizes 2 and 4, some ops' activations above their slice's fixed part
    (``mem < act``: more slices hold less) and some below."""
    rng = np.random.default_rng(seed)
    act = rng.integers(1, 6, size=3).astype(float)
    mem = act + rng.integers(-1, 4, size=3)
    return Instance(rng.integers(1, 9, size=(3, 2)).astype(float), [(0, 1, 1.0), (1, 2, 1.0)], mem=mem,
                    act_mem=act, capacity=[100.0, 100.0], batch_sizes=[(2, 4), (2, 4)])


def _least_memory(inst: Instance, batch: int) -> float:
    """Independent: every op's every split (sizes per device summing to the batch, each slice fitting its
    device alone, on a device the op runs on), the least total memory, summed over the ops."""
    total = 0.0
    for i in range(inst.n):
        best = np.inf
        for split in itertools.product(*[(0,) + tuple(sizes) for sizes in inst.batch_sizes]):
            held = [inst.mem[i] + inst.act_mem[i] * (x - 1) for x in split if x]
            fit = all(not x or (np.isfinite(inst.time[i, u]) and inst.mem[i] + inst.act_mem[i] * (x - 1)
                                <= inst.capacity[u]) for u, x in enumerate(split))
            if sum(split) == batch and fit:
                best = min(best, sum(held))
        total += best
    return total


@pytest.mark.parametrize("seed", range(6))
def test_the_floor_is_the_least_memory_of_any_split(seed):
    inst = _case(seed)
    assert model.memory_floor(inst, BATCH) == pytest.approx(_least_memory(inst, BATCH))


def test_a_batch_over_every_devices_memory_is_infeasible_at_once():
    """Two ops of 3 bytes per input on two devices of 11 bytes: any split of 4 inputs holds at least
    2·(3·4) = 24 > 22 bytes, though each op alone fits (a slice of 2 on each device: 6 bytes). Without the
    floor the methods search and fail ("no method found"); with it the solve stops before running any,
    naming the largest batch the floor lets through (3: 18 bytes), which the brute force confirms."""
    inst = Instance([[1.0, 2.0], [1.0, 2.0]], [(0, 1, 1.0)], mem=[3.0, 3.0], act_mem=[3.0, 3.0],
                    capacity=[11.0, 11.0], batch_sizes=[(1, 2, 4), (1, 2, 4)])
    assert _least_memory(inst, BATCH) == model.memory_floor(inst, BATCH) == 24.0
    assert _least_memory(inst, 3) <= 22.0
    with pytest.raises(InfeasibleError, match="needs at least 24 B of device memory.*hold 22 B.*any batch above 3;"):
        solve(inst, Options(methods=("heft", "cpsat"), objective="throughput", batch=BATCH, time_limit=5.0))
    roomy = Instance(inst.time, inst.edges, mem=inst.mem, act_mem=inst.act_mem, capacity=[12.0, 12.0],
                     batch_sizes=inst.batch_sizes)
    assert solve(roomy, Options(methods=("heft",), objective="throughput", batch=BATCH, time_limit=5.0)).schedule


@pytest.mark.parametrize("seed", range(6))
def test_no_smaller_batch_holds_less_than_the_floor_line(seed):
    """:func:`model.floor_line` at the batch bounds every smaller batch too (the message's "nor for any
    batch above N" rests on it): against the brute force at each batch a device pair can make."""
    inst = _case(seed)
    per_input, fixed = model.floor_line(inst, BATCH)
    for batch in (2, 4):
        assert per_input * batch + fixed <= _least_memory(inst, batch) + 1e-9
