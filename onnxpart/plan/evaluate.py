"""Price a plan's shape in full (:func:`price`): each stage's tile plan on its mesh, the devices of every
replica, the transfers between stages and the memory of every device — the numbers the manifest records and
``--check-certificate`` recomputes (:func:`reprice`).

A stage's layouts start from its units' plans (:func:`onnxpart.plan.stages.merged_layouts`) — or, for a stage
that is not a run of units (partition's stages), from tile's local plan — and tile's greedy improves them
within the stage's part of the time, under the device's memory (:func:`onnxpart.tile.onnx.heuristics.greedy`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from onnxpart.plan.cluster import place
from onnxpart.plan.model import Priced, Problem, Shape, Transfer
from onnxpart.plan.stages import Stage, merged_layouts, restrict
from onnxpart.plan.transfers import Traffic, move


def stage_io(problem: Problem, shape: Shape) -> tuple[list[int], list[dict[int, list[str]]]]:
    """(stage of each op, per stage: source stage -> the tensors it receives from there, in order)."""
    graph = problem.graph
    stage_of = [-1] * len(graph.ops)
    for s, (ops, _) in enumerate(shape.stages):
        for i in ops:
            stage_of[i] = s
    received: list[dict[int, list[str]]] = [{} for _ in shape.stages]
    for s, (ops, _) in enumerate(shape.stages):
        for i in ops:
            for t in graph.ops[i].inputs:
                producer = graph.tensors[t].producer
                if producer is not None and stage_of[producer] != s:
                    names = received[s].setdefault(stage_of[producer], [])
                    if t not in names:
                        names.append(t)
    return stage_of, received


def _boundary(problem: Problem, ops: Sequence[int], stage_of: list[int], s: int) -> frozenset[str]:
    graph, out = problem.graph, set()
    for i in ops:
        op = graph.ops[i]
        for t in op.inputs:
            producer = graph.tensors[t].producer
            if producer is not None and stage_of[producer] != s:
                out.add(t)
        for t in op.outputs:
            if any(stage_of[c] != s for c in graph.tensors[t].consumers):
                out.add(t)
    return frozenset(out)


def build_stage(problem: Problem, shape: Shape, s: int, stage_of: list[int], received: list[str],
                layouts: Mapping[str, object] | None = None, unit_layouts=None, deadline: float | None = None,
                trials: float = 0.0) -> Stage:
    """Stage ``s`` of ``shape``: its cut-down instance, and ``layouts`` when given (a recorded plan), else the
    start of the module docstring improved by greedy until ``deadline`` within ``trials`` move trials."""
    ops, mesh = shape.stages[s]
    inst = problem.instance(mesh)
    sub = restrict(inst, ops, _boundary(problem, ops, stage_of, s), problem.cluster.memory)
    in_flight = min(2, shape.micro_batches)
    if layouts is None:
        layouts = _improved(sub, unit_layouts, deadline, trials)
    return Stage(tuple(ops), sub, dict(layouts), tuple(received), in_flight)


def _improved(sub, unit_layouts, deadline: float | None, trials: float) -> dict:
    from onnxpart.tile.onnx.heuristics import greedy

    start = merged_layouts(sub, unit_layouts) if unit_layouts else None
    found = greedy(sub, deadline=deadline, trials=trials, start=start)
    if start is not None and sub.fits(start) and (not sub.fits(found) or sub.cost(start) <= sub.cost(found)):
        return start
    return found


def price(problem: Problem, shape: Shape, stages: list[Stage]) -> Priced:
    """The plan of ``shape`` with ``stages`` priced: devices placed, transfers, memory (module docstring)."""
    cluster = problem.cluster
    meshes = [mesh for _ in range(shape.replicas) for _, mesh in shape.stages]
    placed = place(cluster, meshes)
    count = len(shape.stages)
    devices = [placed[r * count:(r + 1) * count] for r in range(shape.replicas)]
    _, received = stage_io(problem, shape)
    transfers = []
    for target, sources in enumerate(received):
        for source, names in sorted(sources.items()):
            seconds, moved = 0.0, 0.0
            for replica in devices:
                traffic = Traffic.empty()
                for t in names:
                    a, b = stages[source], stages[target]
                    tensor = problem.graph.tensors[t]
                    move(traffic, cluster, tensor.shape, tensor.bytes,
                         (replica[source], a.layouts[t], a.instance.mesh.shape),
                         (replica[target], b.layouts[t], b.instance.mesh.shape))
                seconds, moved = max(seconds, traffic.seconds(cluster)), traffic.total
            transfers.append(Transfer(source, target, tuple(names), moved, seconds))
    return Priced(shape, stages, devices, transfers, problem.objective, [s.memory() for s in stages],
                  cluster.memory)


def evaluate(problem: Problem, shape: Shape, table=None, deadline: float | None = None,
             trials: float = 0.0) -> Priced:
    """Price ``shape`` with fresh stage plans (module docstring); ``table`` (:class:`~onnxpart.plan.unit_costs.
    UnitTable`) gives the units' plans where the shape's stages are runs of units."""
    stage_of, received = stage_io(problem, shape)
    stages = []
    for s, (ops, mesh) in enumerate(shape.stages):
        pieces = None
        if table is not None and shape.units is not None:
            m = problem.meshes.index(mesh)
            first, last = shape.units[s]
            pieces = [table.layouts[u][m] for u in range(first, last)]
        names = [t for src in sorted(received[s]) for t in received[s][src]]
        stages.append(build_stage(problem, shape, s, stage_of, names, unit_layouts=pieces, deadline=deadline,
                                  trials=trials))
    return price(problem, shape, stages)
