"""Fast layouts for an ONNX layout instance (:mod:`onnxpart.tile.onnx.model`), after Sections 5–6 of
"Matrix Tiling as Constrained Hypergraph Labeling"; no bounds.

* :func:`local` — the paper's Section 6 baseline: ops in topological order, each takes its locally
  cheapest algorithm given the layouts fixed so far; its not-yet-laid-out tensors take that
  algorithm's layouts.
* :func:`greedy` — improvement from the local plan and from all-replicated: Algorithm 3's bucket step
  with buckets of one edge (β = 1: lay out all tensors of one op by one of its algorithms) and of one
  vertex (one tensor, every layout in its domain), repeated while the step time drops. Every move keeps
  ``--device-memory``.
* :func:`fit_memory` — shrink a plan until it fits ``--device-memory``.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

import numpy as np

from onnxpart.tile.onnx.catalog import Layout
from onnxpart.tile.onnx.model import LayoutInstance


def local(inst: LayoutInstance) -> dict[str, Layout]:
    """Section 6's local solver (module docstring), then :func:`fit_memory`. It is the first answer, so it
    has no deadline: one pass over the ops, each pricing all its algorithms at once from its cost table
    (:meth:`LayoutInstance.table`), and the same plan whatever the clock (issue 30; it used to leave the ops
    past the deadline replicated, so a loaded machine gave another plan)."""
    x: dict[str, Layout] = {}
    nearest: dict = {}  # per shared slot table: each choice's nearest stored layout (:func:`_nearest_columns`)
    for op in inst.ops:
        base, slots = inst.table(op)
        total, unset = base, []
        for j, (t, column, matrix) in enumerate(slots):
            if t in x:
                total = total + matrix[:, column[x[t]]]
            else:
                near, seconds = _nearest_columns(inst, op, j, matrix, nearest)
                total = total + seconds
                unset.append((t, near))
        best = int(np.argmin(total))
        for t, near in unset:
            x.setdefault(t, inst.tensor(t).domain[near[best]])
    for t in inst.tensors:
        x.setdefault(t.name, t.domain[0])
    return fit_memory(inst, x)


def _nearest_columns(inst: LayoutInstance, op, j: int, matrix, memo: dict) -> tuple[list[int], np.ndarray]:
    """For each choice of ``op``: the domain column of the layout slot ``j``'s tensor would take were it laid
    out by that choice (:func:`_nearest` of the slot's layout), and the seconds of that slot then (the
    choice's row of ``matrix``, the slot's table, at that column); ``memo``: answers per shared table."""
    key = id(matrix)
    if key not in memo:  # the entry holds the table too, so that its id is not reused
        t, column, _ = inst.table(op)[1][j]
        near = [column[_nearest(inst, t, (c.inputs + c.outputs)[j])] for c in op.choices]
        memo[key] = (matrix, near, matrix[np.arange(len(near)), near])
    return memo[key][1:]


def _nearest(inst: LayoutInstance, t: str, want: Layout) -> Layout:
    """``want`` when it is in t's domain, else the domain's layout closest to it (cheapest to convert)."""
    var = inst.tensor(t)
    return want if want in var.domain else min(
        var.domain, key=lambda a: inst.reshard_time(a, want, t) + inst.reshard_time(want, a, t))


def greedy(inst: LayoutInstance, max_rounds: int = 50, deadline: float | None = None,
           trials: float = math.inf, start: dict[str, Layout] | None = None) -> dict[str, Layout]:
    """Improve the local plan and the all-replicated one by op and tensor moves; the best of them.
    With ``--device-memory`` also Lagrangian runs (Fisher, "The Lagrangian Relaxation Method for Solving
    Integer Programming Problems", Management Science 1981): moves priced at seconds + λ·bytes per
    device, free of the bound, for λ in ``LAGRANGE`` times (step time / memory); each result is then
    made to fit (:func:`fit_memory`) and improved under the bound. A round runs only while its moves fit
    in ``trials`` (all runs together): a deterministic budget, so one time limit gives one plan whatever the
    machine's load; ``deadline`` (``time.monotonic()`` seconds) is the safety net, checked between rounds.
    ``start``: the local plan when it is already made (:func:`local`'s, not made again)."""
    budget = _Trials(trials, deadline)
    starts = [dict(start) if start is not None else local(inst),
              fit_memory(inst, {t.name: t.domain[0] for t in inst.tensors})]  # R first when allowed
    if _moves(inst) > budget.trials:  # not one round fits (LLM-sized graphs on a short limit): what fits of one
        best = min([x for x in starts if inst.fits(x)] or starts, key=inst.cost)  # from the better start
        return _improve(inst, dict(best), 1, budget, partial=True)
    plans = [_improve(inst, x, max_rounds, budget) for x in starts]
    if inst.memory is not None:
        scale = inst.cost(plans[0]) / max(inst.memory, 1.0)
        for factor in LAGRANGE:
            if budget.spent():
                break
            priced = _improve(inst, dict(plans[0]), max_rounds, budget, factor * scale)
            plans.append(_improve(inst, fit_memory(inst, priced), max_rounds, budget))
    return min([x for x in plans if inst.fits(x)] or plans, key=inst.cost)


#: λ per (step time / --device-memory) of greedy's Lagrangian runs.
LAGRANGE = (0.3, 1.0, 3.0)
#: Greedy's move trials per second of its time share (about a fifth of what 2 loaded cores try on a
#: 600-tensor 2x4 instance, so the wall-clock deadline rarely ends it first).
TRIALS_PER_SECOND = 2000.0


@dataclass
class _Trials:
    trials: float
    deadline: float | None

    def spent(self, more: int = 0) -> bool:
        """Whether ``more`` trials no longer fit (they are taken when they do), or the deadline passed."""
        if more > self.trials or (self.deadline is not None and time.monotonic() > self.deadline):
            return True
        self.trials -= more
        return False


def _improve(inst: LayoutInstance, x: dict[str, Layout], max_rounds: int, budget: _Trials,
             price: float | None = None, partial: bool = False) -> dict[str, Layout]:
    """Rounds of op and tensor moves on ``x`` (in place) while one lowers the step time and keeps the
    memory bound — or, with a ``price`` per byte, while one lowers step time + price·memory per device.
    A round starts only when all its moves fit in the trials left; ``partial``: its moves are taken one
    at a time, in order, until the trials run out (a round larger than the whole budget)."""
    touching = inst.touching()
    memory = [inst.memory_per_device(x)]  # kept up to date by _try
    count = _moves(inst)
    for _ in range(max_rounds):
        if not partial and budget.spent(count):
            break
        improved = False
        for move in _move_list(inst, partial):
            if partial and budget.spent(1):
                break
            move = {t: a for t, a in move.items() if a in inst.tensor(t).domain and x[t] != a}
            if move and _try(inst, x, move, touching, memory, price):
                improved = True
        if not improved:
            break
    return x


def _move_list(inst: LayoutInstance, partial: bool):
    """The moves of one round of :func:`_improve`, made as they are tried (a round that the trials cut short
    makes no more): each op's algorithms (the heaviest ops first when ``partial``: the trials where the time
    is), then each tensor's layouts."""
    ops = sorted(inst.ops, key=lambda op: -op.work) if partial else inst.ops
    for op in ops:
        for c in op.choices:
            yield dict(zip(op.inputs + op.outputs, c.inputs + c.outputs))
    for t in inst.tensors:
        for a in t.domain:
            yield {t.name: a}


def _moves(inst: LayoutInstance) -> int:
    """The moves one round of :func:`_improve` tries: one per algorithm of an op, one per layout of a tensor."""
    return sum(len(op.choices) for op in inst.ops) + sum(len(t.domain) for t in inst.tensors)


def _try(inst: LayoutInstance, x: dict, move: dict, touching: dict, memory: list, price: float | None) -> bool:
    """Apply ``move`` to ``x`` when it pays (:func:`_improve`); ``memory[0]`` is x's memory per device."""
    ops = {i for t in move for i in touching[t]}
    before = _local_time(inst, x, ops, move)
    grown = sum(inst.tensor(t).per_device(a, inst.mesh) - inst.tensor(t).per_device(x[t], inst.mesh)
                for t, a in move.items())
    old = {t: x[t] for t in move}
    x.update(move)
    after = _local_time(inst, x, ops, move) + (price or 0.0) * grown
    fits = price is not None or inst.memory is None or memory[0] + grown <= inst.memory * (1 + 1e-12)
    if after < before - 1e-15 * max(1.0, abs(before)) and fits:
        memory[0] += grown
        return True
    x.update(old)
    return False


def _local_time(inst: LayoutInstance, x: dict, ops, tensors) -> float:
    """The part of T(x) that ``ops`` and the final gathers of ``tensors`` pay."""
    return sum(inst.best_choice(inst.ops[i], x)[1] for i in ops) + sum(inst.final_time(t, x[t]) for t in tensors)


def fit_memory(inst: LayoutInstance, x: dict[str, Layout]) -> dict[str, Layout]:
    """Shrink tensors to their smallest layout, most bytes saved per second added first, until the plan
    fits ``--device-memory`` (unchanged when there is no bound or it fits already; every tensor at its
    smallest at once when even that does not fit).

    A lazy greedy (Minoux, "Accelerated greedy algorithms for maximizing submodular set functions", 1978):
    each tensor's ratio is priced once, and again only when it reaches the top of the heap; it is taken
    when it is still at least the next one's. A shrink changes only the ratios of the tensors sharing its
    ops, so few are priced twice: O(T log T) where pricing every tensor per shrink was O(T²), minutes on
    an LLM's 10,000 tensors."""
    if inst.memory is None or inst.fits(x):
        return x
    mesh, limit = inst.mesh, inst.memory * (1 + 1e-12)
    smallest = {t.name: min(t.domain, key=lambda a, t=t: t.per_device(a, mesh)) for t in inst.tensors}
    if sum(t.per_device(smallest[t.name], mesh) for t in inst.tensors) > limit:  # even the least memory is over
        x.update({t.name: smallest[t.name] for t in inst.tensors
                  if t.per_device(x[t.name], mesh) > t.per_device(smallest[t.name], mesh)})
        return x
    heap = [(-_shrink_ratio(inst, x, t, smallest[t.name]), i) for i, t in enumerate(inst.tensors)]
    heapq.heapify(heap)
    memory = inst.memory_per_device(x)
    while heap and memory > limit:
        _, i = heapq.heappop(heap)
        t = inst.tensors[i]
        ratio = _shrink_ratio(inst, x, t, smallest[t.name])
        if ratio == -math.inf:
            continue
        if heap and ratio < -heap[0][0]:
            heapq.heappush(heap, (-ratio, i))
            continue
        memory -= t.per_device(x[t.name], mesh) - t.per_device(smallest[t.name], mesh)
        x[t.name] = smallest[t.name]
        if memory <= limit:
            memory = inst.memory_per_device(x)  # the sum again, free of the updates' rounding
    return x


def _shrink_ratio(inst: LayoutInstance, x: dict[str, Layout], t, small: Layout) -> float:
    """Bytes per device saved by moving ``t`` to ``small``, per second it adds to the step time (the ops
    touching ``t`` and its final gather); ``-inf`` when it saves nothing."""
    saved = t.per_device(x[t.name], inst.mesh) - t.per_device(small, inst.mesh)
    if saved <= 0:
        return -math.inf
    ops, old = inst.touching()[t.name], x[t.name]
    before = _local_time(inst, x, ops, [t.name])
    x[t.name] = small
    added = _local_time(inst, x, ops, [t.name]) - before
    x[t.name] = old
    return saved / (max(added, 0.0) + 1e-12)
