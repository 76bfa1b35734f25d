"""Tile on whole stages for the runs the bound's program picks: the family bound's lazy refinement.

The family bound (:func:`onnxpart.plan.exact.family_bound`) prices a run of units ``i .. j`` on sub-mesh ``m``
at the sum of its units' proven bounds, or the chain over its cuts (:mod:`onnxpart.plan.interfaces`). Each unit
lays out the tensors at its edges as it likes, so what a cut inside a run costs is in no unit's bound — and the
cuts go where the fewest bytes cross, which is where a tensor-parallel layer's all-reduces are (its residual
stream): on llama-7b on 1×8 the sum misses 9 %; the chain holds the tensors only two neighbour units share,
not those every layer reads. Tile's
elimination (:mod:`onnxpart.tile.onnx.elimination`) solves a whole transformer stage exactly in seconds (its
cost network has width 2), so a run's own proven bound replaces the sum where it is known; every plan of the
family still costs at least the sum of its stages' bounds, whichever each is.

:func:`refine` works as lazy constraint generation: solve the bound's program, price the runs its best shape
uses that are not priced yet (:func:`price_run`), solve again; it stops when the best shape's runs are all
priced — the bound is then that shape's own proven cost — or at the deadline. The plans tile finds on the way
are the stages' layouts for the search (:func:`onnxpart.plan.evaluate.evaluate`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from onnxpart.certificate import LowerBound
from onnxpart.plan.model import Problem
from onnxpart.strategy import FLOOR


@dataclass(frozen=True)
class StagePrice:
    """Tile on one run's stage: its proven bound (0: none), and its best plan (None where the stage's weights
    cannot fit a device) with that plan's step time; ``priced`` when the search priced the stage in full."""

    lower: float
    layouts: dict | None = None
    cost: float = math.inf
    priced: bool = False  # the cost is the stage's price in a plan (the search's), not only tile's first plans
    memory: float | None = None  # bytes per device of the plan as the whole stage, where measured

    @property
    def optimal(self) -> bool:
        return self.layouts is not None and self.lower >= self.cost * (1 - 1e-9)


def price_run(problem: Problem, key: tuple[int, int, int], seconds: float, seed: int = 0) -> StagePrice:
    """Tile's local pass and exact method on the stage of units ``key[0] .. key[1]`` on mesh ``key[2]``, as a plan
    of the family has it (:func:`onnxpart.plan.evaluate.stage_instance`), in half of ``seconds``; where that
    proves no optimum, tile's split bound with the units as groups (:func:`onnxpart.tile.onnx.relax.split_bound`)
    in the rest. A stage whose weights cannot fit a device in any layout has bound inf. The bound covers every
    plan of the stage, fitting or not; the plan found is checked for memory where it is used."""
    from onnxpart import tile
    from onnxpart.plan.evaluate import stage_instance, stage_io
    from onnxpart.plan.stages import least_weight_bytes
    from onnxpart.tile.onnx import LayoutOptions
    from onnxpart.tile.onnx.relax import split_bound

    deadline = time.monotonic() + seconds
    first, last, m = key
    shape = problem.run(first, last, m)
    sub = stage_instance(problem, shape, 0, stage_io(problem, shape)[0])
    if least_weight_bytes(sub) > problem.cluster.memory * (1 + 1e-12):
        return StagePrice(math.inf)
    found = tile.solve(sub, LayoutOptions(("local", "exact"), seconds / 2, 1, seed), seconds=seconds / 2)
    price = StagePrice(found.best_lower_bound, dict(found.plan.layouts), found.cost)
    if price.optimal:
        return price
    start = problem.units.bounds[first]
    groups = [[i - start for i in problem.units.ops(u, u + 1)] for u in range(first, last)]
    split = split_bound(sub, groups, max(deadline, time.monotonic() + FLOOR))
    if split is None or split.value <= price.lower:
        return price
    return StagePrice(split.value, price.layouts, price.cost)


def refine(problem: Problem, table, deadline: float, seed: int = 0) -> LowerBound:
    """The family bound with the runs its best shapes use priced whole (module docstring), into ``table.stages``;
    ``deadline`` on ``time.monotonic()``."""
    from onnxpart.plan.exact import family_bound

    while True:
        bound, runs = family_bound(problem, table)
        todo = [key for key in runs if key not in table.stages]
        if not todo or deadline - time.monotonic() < FLOOR:
            return bound
        for n, key in enumerate(todo):
            share = max(FLOOR, (deadline - time.monotonic()) / (len(todo) - n))
            table.stages[key] = price_run(problem, key, share, seed)
