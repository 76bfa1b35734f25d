"""Window search: re-partition a few consecutive blocks of a partition exactly (CP-SAT), the others fixed.

Blocks ``b … b+w−1`` of a valid partition (blocks in DAG order) hold a set U of ops that only ever reads
from blocks before the window and feeds blocks after it. Re-assigning U to the same w blocks, monotone
along the edges inside U, keeps the partition valid, and leaves every block outside the window with the
same cost: a block before the window pays a tensor it sends into U as output whatever block of U reads
it (Eq. 1: once per direction), a block after the window pays a tensor it reads from U as input whatever
block of U made it. So the window's best re-partition is the exact MTPP problem on U with w blocks and
fixed surroundings — Figure 3 of Archer et al. (ICML 2024) restricted to the window:

    level indicators  g_{v,j} = [block(v) ≥ b + j]  (j = 1 … w−1), g_{v,j+1} ≤ g_{v,j}, g_{u,j} ≤ g_{v,j}
                      for every edge u → v inside U (Eq. 8);
    block j's ops     x_{v,j} = g_{v,j} − g_{v,j+1} (with g_{v,0} = 1, g_{v,w} = 0);
    crossings         c_{t,j} ≥ |x_{u,j} − x_{v,j}| for producer u and each consumer v of tensor t, where an
                      end outside U is a constant 0 (Eqs. 9–10: t crosses block j's boundary once);
    cost              f_j = Σ work·x_{·,j} + Σ transfer·c_{·,j} + overflow_j (Eqs. 2–3) ≤ F,

minimizing ``M·F + Σ_j f_j`` with M above any Σ_j f_j (the window's bottleneck, then its total), each
model with ``WINDOW_EFFORT`` of CP-SAT's deterministic time. The search keeps a re-partition iff the block
costs sorted decreasingly drop lexicographically (the local search's rule, on the exact float costs, so
the rounding of the integer model never makes a partition worse).

Which windows: those holding the current bottleneck block, narrowest first (w = 2, then wider when no
window of a width helps), back to w = 2 after every improvement; the search ends when no window up to
``MAX_WIDTH`` blocks (or ``WINDOW_OPS`` ops) helps, at the deadline, or when ``stop`` says so. It finds
what single-op moves cannot on REGAL-like graphs (io-bound random DAGs): from the local search's
partition, 60 s of one core, regal-9 at k = 8 6965 → 6709 and regal-5 at k = 16 5842 → 5632.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxpart.partition.local_search import block_cost_array, lex_lower
from onnxpart.partition.model import Instance

WINDOW_OPS = 400  # the most ops a window model holds
MAX_WIDTH = 6  # the widest window, in blocks
WINDOW_EFFORT = 2.0  # CP-SAT deterministic seconds per window model (the same on any machine)
_UNITS = 2 ** 24  # integer units for the cost of all ops and tensors (a block, overflow aside, costs ≤ this)


@dataclass(frozen=True)
class WindowSearchResult:
    assignment: np.ndarray  # op -> block, blocks in DAG order
    value: float  # bottleneck (Eq. 3)
    windows: int  # window models solved
    improvements: int  # re-partitions kept


def applies(inst: Instance, k: int) -> bool:
    """Whether two blocks of average size fit one window model (else the search does not run)."""
    return k >= 2 and inst.n >= 2 and 2 * inst.n <= WINDOW_OPS * k


def _window_model(inst: Instance, assignment: np.ndarray, first: int, width: int):
    """The CP-SAT model of the module doc for blocks ``first … first+width−1``: (model, ops U, levels
    g[j][i] for j = 1 … width−1 and U's i-th op)."""
    from ortools.sat.python import cp_model

    ops = np.flatnonzero((assignment >= first) & (assignment < first + width))
    index = {int(v): i for i, v in enumerate(ops)}
    model = cp_model.CpModel()
    levels = [[model.NewBoolVar(f"g{j}_{i}") for i in range(len(ops))] for j in range(1, width)]
    for j in range(len(levels) - 1):
        for i in range(len(ops)):
            model.AddImplication(levels[j + 1][i], levels[j][i])
    for u, v in inst.edges().tolist():
        if u in index and v in index:
            for level in levels:
                model.AddImplication(level[index[u]], level[index[v]])
    blocks = [_block_members(model, levels, j, len(ops)) for j in range(width)]
    touching = _tensors_touching(inst, index)
    bottleneck = model.NewIntVar(0, 2 ** 32, "F")
    units = _integer_costs(inst)
    costs = [_block_cost(model, inst, ops, index, members, touching, units) for members in blocks]
    for cost in costs:
        model.Add(cost <= bottleneck)
    model.Minimize((2 * width * _UNITS + 1) * bottleneck + sum(costs))  # a sum of costs never outweighs F
    for j, level in enumerate(levels, start=1):
        for i, v in enumerate(ops.tolist()):
            model.AddHint(level[i], int(assignment[v] >= first + j))
    return model, ops, levels


def _block_members(model, levels: list[list], j: int, size: int) -> list:
    """x_{·,j} = g_{·,j} − g_{·,j+1} as booleans (the level indicators with g_0 = 1 and g_width = 0)."""
    members = []
    for i in range(size):
        above = levels[j - 1][i] if j > 0 else 1
        below = levels[j][i] if j < len(levels) else 0
        if isinstance(above, int) and isinstance(below, int):
            members.append(1)
            continue
        x = model.NewBoolVar("")
        model.Add(x == above - below)
        members.append(x)
    return members


def _tensors_touching(inst: Instance, index: dict[int, int]) -> list[tuple[int, list[int]]]:
    """(tensor, [producer, consumers…]) for every tensor with an end in the window."""
    touching = []
    for t in range(inst.num_tensors):
        ends = [int(inst.producer[t])] + inst.consumers(t).tolist()
        if any(e in index for e in ends):
            touching.append((t, ends))
    return touching


def _integer_costs(inst: Instance) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Work, transfers, parameter overflow per op and the stage memory in ``_UNITS`` for all work and
    transfers (:func:`~onnxpart.solvers.to_integers`, rounded down)."""
    from onnxpart.solvers import to_integers

    total = max(float(inst.work.sum() + inst.transfer.sum()), 1e-300)
    work, scale = to_integers(inst.work, _UNITS, total=total)
    transfer, _ = to_integers(inst.transfer, _UNITS, total=total)
    if inst.stage_memory is None or not inst.bandwidth:
        return work, transfer, np.zeros(inst.n, dtype=np.int64), 0
    per_byte = scale / inst.bandwidth
    return work, transfer, to_integers(inst.params, unit=1 / per_byte)[0], int(inst.stage_memory * per_byte)


def _block_cost(model, inst: Instance, ops: np.ndarray, index: dict[int, int], members: list,
                touching: list[tuple[int, list[int]]], units: tuple[np.ndarray, np.ndarray, np.ndarray, int]):
    """f_j of the module doc in integer units: work, the tensors crossing the block's boundary, overflow."""
    work, transfer, params, memory = units
    terms = [int(work[v]) * members[i] for i, v in enumerate(ops.tolist()) if work[v] > 0]
    for t, ends in touching:
        inside = [members[index[e]] if e in index else 0 for e in ends]
        if all(isinstance(x, int) for x in inside) or transfer[t] <= 0:
            continue
        crossing = model.NewBoolVar("")
        producer = inside[0]
        for consumer in inside[1:]:
            model.Add(crossing >= producer - consumer)
            model.Add(crossing >= consumer - producer)
        terms.append(int(transfer[t]) * crossing)
    if params.any():
        overflow = model.NewIntVar(0, 2 ** 32, "")
        model.Add(overflow >= sum(int(params[v]) * members[i] for i, v in enumerate(ops.tolist())) - memory)
        terms.append(overflow)
    return sum(terms)


def repartition(inst: Instance, assignment: np.ndarray, first: int, width: int, time_limit: float,
                seed: int = 0) -> np.ndarray | None:
    """The best re-partition CP-SAT finds for the window (its deterministic effort, cut at ``time_limit``
    seconds), or None when it found none."""
    from onnxpart.solvers import solve_cpsat

    model, ops, levels = _window_model(inst, assignment, first, width)
    result, solver = solve_cpsat(model, time_limit, workers=1, seed=seed,
                                 parameters={"linearization_level": 2, "max_deterministic_time": WINDOW_EFFORT})
    if not result.has_solution:
        return None
    new = np.asarray(assignment, dtype=np.int64).copy()
    for i, v in enumerate(ops.tolist()):
        new[v] = first + sum(solver.Value(level[i]) for level in levels)
    return new


def window_search(inst: Instance, assignment: np.ndarray, k: int, seed: int, stop: Callable[[float], bool],
                  deadline: float = np.inf) -> WindowSearchResult:
    """The window search of the module doc from ``assignment`` until no window helps, ``stop(best value)``
    or the deadline (``time.monotonic()``); never worse than the start."""
    rng = np.random.default_rng(seed)
    best = np.asarray(assignment, dtype=np.int64).copy()
    cost = block_cost_array(inst, best, k)
    windows = improvements = 0
    width = 2
    while width <= min(k, MAX_WIDTH) and not stop(float(cost.max())):
        improved = False
        for first in _windows_around(int(np.argmax(cost)), width, k, rng):
            if np.count_nonzero((best >= first) & (best < first + width)) > WINDOW_OPS:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return WindowSearchResult(best, float(cost.max()), windows, improvements)
            trial = repartition(inst, best, first, width, left, int(rng.integers(1 << 30)))
            windows += 1
            if trial is None:
                continue
            trial_cost = block_cost_array(inst, trial, k)
            if lex_lower(trial_cost, cost):
                best, cost, improved = trial, trial_cost, True
                improvements += 1
                break
        width = 2 if improved else width + 1
    return WindowSearchResult(best, float(cost.max()), windows, improvements)


def _windows_around(block: int, width: int, k: int, rng: np.random.Generator) -> list[int]:
    """The first blocks of the windows of ``width`` blocks that hold ``block``, in a random order."""
    firsts = np.arange(max(0, block - width + 1), min(block, k - width) + 1)
    return rng.permutation(firsts).tolist()
