"""Tile on every unit × sub-mesh: the numbers the dynamic program reads (:mod:`onnxpart.plan.dp`).

For unit u on mesh m, :func:`unit_table` runs :func:`onnxpart.tile.solve` on the whole model's instance on m
cut down to u's ops (:func:`onnxpart.plan.stages.restrict`, every domain kept whole), once per distinct unit
(:func:`onnxpart.plan.stages.signature`: an LLM's equal layers share one solve), and keeps

* ``upper[u, m]`` — the step time of tile's plan for the unit, and the plan (``layouts``);
* ``lower[u, m]`` — tile's best proven bound for the unit (its closed form, or exact's);
* ``memory[u, m]`` — bytes per device of that plan: the unit's weight shards and its activations' live peak
  (:meth:`onnxpart.plan.stages.Stage.memory`'s model);
* ``floor[u, m]`` — the least bytes per device of the weights the unit *owns* (those it touches first), each
  in its smallest layout.

**Why the bounds add up.** A stage's step time is a sum of per-op terms (tile's T), and each term reads only
the layouts of its op's tensors; a stage's domains are subsets of the whole model's (:mod:`onnxpart.plan.
stages`). So every stage plan restricted to unit u is a plan of u's instance, and its terms there cost at least
``lower[u, m]``: a stage of units i..j on m takes at least ``Σ lower[u, m]``, transfers and gathers being ≥ 0.
Owned weights are disjoint and every weight a stage touches is resident, so a stage needs at least
``Σ floor[u, m]`` bytes per device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxpart.plan.model import Problem
from onnxpart.plan.stages import least_weight_bytes, live_peak, restrict, signature, tensor_order, weight_bytes
from onnxpart.strategy import FLOOR, Budget


@dataclass
class UnitTable:
    upper: np.ndarray  # (units, meshes) seconds
    lower: np.ndarray
    memory: np.ndarray  # bytes per device
    floor: np.ndarray
    layouts: list[list[dict]]  # [unit][mesh] -> tensor -> layout
    runs: dict | None = None  # (i, j, m) -> (compute, bytes per device, received bytes per device): exact_runs
    stages: dict = field(default_factory=dict)  # (i, j, m) -> StagePrice of the run's stage: plan.refine
    chain: np.ndarray | None = None  # (units + 1, units + 1, meshes) runs' bounds joined at cuts: plan.interfaces
    chained: dict = field(default_factory=dict)  # mesh index -> [[unit] -> layouts agreeing at cuts]: plan.interfaces


def touching_units(problem: Problem) -> dict[str, set[int]]:
    """tensor -> the units whose ops read or write it (the first is where a weight is owned)."""
    inst, units = problem.instance(problem.meshes[0]), problem.units
    touched: dict[str, set[int]] = {}
    for u in range(units.count):
        for i in units.ops(u, u + 1):
            for t in inst.ops[i].inputs + inst.ops[i].outputs:
                touched.setdefault(t, set()).add(u)
    return touched


def unit_table(problem: Problem, budget: Budget, seconds: float, seed: int = 0, workers: int = 1) -> UnitTable:
    """The table (module docstring) within ``seconds`` of ``budget``: each distinct (unit, mesh) gets an equal
    part of them (never under :data:`~onnxpart.strategy.FLOOR`)."""
    units, meshes = problem.units, problem.meshes
    shape = (units.count, len(meshes))
    table = UnitTable(np.zeros(shape), np.zeros(shape), np.zeros(shape), np.zeros(shape),
                      [[{} for _ in meshes] for _ in range(units.count)])
    groups: dict[tuple, list] = {}
    owner = {t: min(reached) for t, reached in touching_units(problem).items()}
    for m, mesh in enumerate(meshes):
        inst = problem.instance(mesh)
        subs = [restrict(inst, list(units.ops(u, u + 1))) for u in range(units.count)]
        for u, sub in enumerate(subs):
            groups.setdefault((m, signature(sub)), []).append((u, sub))
    each = max(FLOOR, seconds / max(1, len(groups)))
    for (m, _), members in groups.items():
        u0, sub0 = members[0]
        solution = _solve(sub0, min(each, max(FLOOR, budget.left())), seed, workers)
        order = tensor_order(sub0)
        for u, sub in members:
            mapping = dict(zip(tensor_order(sub), (solution.plan.layouts[t] for t in order)))
            table.upper[u, m], table.lower[u, m] = solution.cost, solution.best_lower_bound
            table.layouts[u][m] = mapping
            table.memory[u, m] = weight_bytes(sub, mapping) + live_peak(sub, mapping)
            table.floor[u, m] = least_weight_bytes(sub, {t.name for t in sub.tensors if owner[t.name] == u})
    return table


def _solve(sub, seconds: float, seed: int, workers: int):
    from onnxpart import tile
    from onnxpart.tile.onnx import LayoutOptions

    return tile.solve(sub, LayoutOptions(("local", "greedy", "exact"), seconds, workers, seed), seconds=seconds)


#: Up to this many (run of units, mesh) pairs, every stage the family holds is priced itself (:func:`exact_runs`).
EXACT_RUNS = 400


def exact_runs(problem: Problem, table: UnitTable, seconds: float, seed: int = 0) -> None:
    """On small families (at most :data:`EXACT_RUNS` runs × meshes), price every run of units on every mesh as
    the stage it would be (:func:`onnxpart.plan.evaluate.build_stage`: tile's plan of the cut-down stage,
    its memory and its received tensors' bytes) into ``table.runs``, so the program reads the stages' own
    compute instead of the units' sums; ``seconds`` in all."""
    from onnxpart.plan.evaluate import build_stage, stage_io

    count = problem.units.count
    pairs = [(i, j, m) for i in range(count) for j in range(i + 1, count + 1) for m in range(len(problem.meshes))]
    if len(pairs) > EXACT_RUNS:
        return
    runs = {}
    for i, j, m in pairs:
        shape = problem.run(i, j, m)
        stage_of, received = stage_io(problem, shape)
        names = [t for source in sorted(received[0]) for t in received[0][source]]
        stage = build_stage(problem, shape, 0, stage_of, names, unit_plans=[[table.layouts[u][m] for u in range(i, j)]],
                            seconds=max(0.01, seconds / len(pairs)), seed=seed)
        held = sum(stage.instance.tensor(t).per_device(stage.layouts[t], stage.instance.mesh) for t in names)
        runs[(i, j, m)] = (stage.compute, stage.memory()["total"], float(held))
    table.runs = runs
