"""Price a plan's shape in full (:func:`price`): each stage's tile plan on its mesh, the devices of every
replica, the transfers between stages and the memory of every device — the numbers the manifest records and
``--check-certificate`` recomputes (:func:`reprice`).

A stage's layouts are the cheapest that fit the device's memory among tile's own answer for the stage
(:func:`onnxpart.tile.solve`) and, where the stage is a run of units, the units' plans merged
(:func:`onnxpart.plan.stages.merged_layouts`) and greedy's improvement of them
(:func:`onnxpart.tile.onnx.heuristics.greedy`) — the units' own plans, and where the chain over their cuts
found them, plans that agree at the cuts (:func:`onnxpart.plan.interfaces.chained_plans`).
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


def stage_instance(problem: Problem, shape: Shape, s: int, stage_of: list[int]):
    """Stage ``s`` of ``shape`` as tile sees it: the model's instance on its mesh cut down to its ops, the tensors
    crossing its edges without partial sums, no memory bound (the stage's memory is :meth:`Stage.memory`)."""
    ops, mesh = shape.stages[s]
    return restrict(problem.instance(mesh), ops, _boundary(problem, ops, stage_of, s))


def build_stage(problem: Problem, shape: Shape, s: int, stage_of: list[int], received: list[str],
                layouts: Mapping[str, object] | None = None, unit_plans=(), seconds: float = 0.05,
                seed: int = 0, known=None) -> Stage:
    """Stage ``s`` of ``shape``: its cut-down instance, and ``layouts`` when given (a recorded plan), else the
    best of the module docstring's plans found in ``seconds`` (with ``known``, a
    :class:`~onnxpart.plan.refine.StagePrice` of the same stage, among them)."""
    sub = stage_instance(problem, shape, s, stage_of)
    ops = tuple(shape.stages[s][0])
    sent = _boundary(problem, ops, stage_of, s) - set(received)

    def stage(x) -> Stage:
        return Stage(ops, sub, dict(x), tuple(received), min(2, shape.micro_batches), sent=sent)

    if layouts is not None:
        return stage(layouts)
    return stage(_improved(sub, unit_plans, seconds, seed, known,
                           lambda x: stage(x).memory()["total"] <= problem.cluster.memory * (1 + 1e-12)))


def _improved(sub, unit_plans, seconds: float, seed: int, known, fits) -> dict:
    """The cheapest plan that ``fits`` among tile's own solve on the stage (:func:`onnxpart.tile.solve`: local,
    greedy, exact, within ``seconds``), for each of ``unit_plans`` (each a plan per unit) greedy from the units'
    plans merged and the merged plan itself, and the least-memory plan; ``known``'s plan alone when tile proved
    it optimal and it fits. When none fits, the one of least memory (priced and reported as over, never
    emitted)."""
    from onnxpart import tile
    from onnxpart.tile.onnx import LayoutOptions
    from onnxpart.tile.onnx.heuristics import TRIALS_PER_SECOND, greedy

    if known is not None and known.optimal and fits(known.layouts):
        return known.layouts
    candidates = [known.layouts] if known is not None and known.layouts is not None else []
    candidates.append(tile.solve(sub, LayoutOptions(("local", "greedy", "exact"), seconds, 1, seed),
                                 seconds=seconds).plan.layouts)
    for pieces in unit_plans:
        start = merged_layouts(sub, pieces)
        candidates += [start, greedy(sub, trials=TRIALS_PER_SECOND * seconds / 2 / len(unit_plans), start=start)]
    least = {t.name: min(t.domain, key=lambda a, t=t: t.per_device(a, sub.mesh)) for t in sub.tensors}
    fitting = [c for c in candidates + [least] if fits(c)]
    return min(fitting, key=sub.cost) if fitting else least


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
                         (replica[source], a.layouts.get(t, a.instance.replicated), a.instance.mesh.shape),
                         (replica[target], b.layouts.get(t, b.instance.replicated), b.instance.mesh.shape))
                seconds, moved = max(seconds, traffic.seconds(cluster)), traffic.total
            transfers.append(Transfer(source, target, tuple(names), moved, seconds))
    return Priced(shape, stages, devices, transfers, problem.objective, [s.memory() for s in stages],
                  cluster.memory)


def evaluate(problem: Problem, shape: Shape, table=None, seconds: float = 0.05, seed: int = 0) -> Priced:
    """Price ``shape`` with fresh stage plans (module docstring) found in ``seconds`` in all, each stage's part
    by its ops; ``table`` (:class:`~onnxpart.plan.unit_costs.UnitTable`) gives the units' plans where the
    shape's stages are runs of units on meshes of the family."""
    stage_of, received = stage_io(problem, shape)
    total = max(1, sum(len(ops) for ops, _ in shape.stages))
    stages = []
    for s, (ops, mesh) in enumerate(shape.stages):
        plans, known = [], None
        if table is not None and shape.units is not None and mesh in problem.meshes:
            m = problem.meshes.index(mesh)
            first, last = shape.units[s]
            plans = [[table.layouts[u][m] for u in range(first, last)]]
            plans += [pieces[first:last] for pieces in table.chained.get(m, ())]
            known = table.stages.get((first, last, m))
        names = [t for src in sorted(received[s]) for t in received[s][src]]
        part = max(0.05, seconds * len(ops) / total)
        stages.append(build_stage(problem, shape, s, stage_of, names, unit_plans=plans, seconds=part, seed=seed,
                                  known=known))
    return price(problem, shape, stages)
