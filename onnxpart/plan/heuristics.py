"""The plans a user would try by hand, each a method of the registry and a row of the comparison (their shapes
here; each is priced like any plan, :func:`onnxpart.plan.evaluate.evaluate`):

* ``pipeline`` — pure pipeline: ``onnxpart partition`` with one stage per device (:func:`onnxpart.partition.
  solve`, its Lemma 3.3 bounds only), each stage on one device;
* ``tensor-parallel`` — pure tensor parallel: tile on the whole cluster as a nodes × devices mesh, one stage;
* ``megatron`` — Megatron-LM's layout: tensor parallel across each node, equal pipeline stages (the same
  number of units each) across the nodes;
* ``data-parallel`` — the whole model on each device, as many replicas as the batch allows (one for latency).

Each takes one replica where the family allows it (else the fewest replicas it allows).
"""

from __future__ import annotations

from onnxpart.plan.cluster import SubMesh
from onnxpart.plan.model import Problem, Shape


def _replicas(problem: Problem, most: bool = False) -> tuple[int, int]:
    options = problem.replica_options()
    return max(options) if most else min(options)


def pipeline_shape(problem: Problem, seconds: float, seed: int) -> Shape:
    """Partition's best k = min(devices, ops) stages, one device each."""
    from onnxpart import partition
    from onnxpart.partition.model import from_graph

    k = max(1, min(problem.cluster.devices, len(problem.graph.ops)))
    inst = from_graph(problem.graph, bandwidth=problem.cluster.intra.bandwidth)
    options = partition.Options(k=k, time_limit=seconds, seed=seed, bounds=("simple",), workers=1)
    solution = partition.solve(inst, options, seconds=seconds)
    blocks: dict[int, list[int]] = {}
    for op, block in enumerate(solution.assignment.tolist()):
        blocks.setdefault(int(block), []).append(op)
    replicas, micro = _replicas(problem)
    return Shape(tuple((tuple(ops), SubMesh(1, 1)) for _, ops in sorted(blocks.items())), replicas, micro)


def _whole(problem: Problem) -> tuple[int, ...]:
    return tuple(range(len(problem.graph.ops)))


def tensor_parallel_shape(problem: Problem) -> Shape:
    """One stage on every device: a nodes × devices mesh (a ring on one node)."""
    cluster = problem.cluster
    replicas, micro = _replicas(problem)
    return Shape(((_whole(problem), SubMesh(cluster.nodes, cluster.devices_per_node)),), replicas, micro,
                 ((0, problem.units.count),))


def megatron_shape(problem: Problem) -> Shape:
    """One stage per node, tensor parallel across its devices, the units split evenly between them."""
    cluster, units = problem.cluster, problem.units
    count = min(cluster.nodes, units.count)
    cuts = [round(k * units.count / count) for k in range(count + 1)]
    replicas, micro = _replicas(problem)
    stages = tuple((tuple(units.ops(a, b)), SubMesh(1, cluster.devices_per_node)) for a, b in zip(cuts, cuts[1:]))
    return Shape(stages, replicas, micro, tuple(zip(cuts, cuts[1:])))


def data_parallel_shape(problem: Problem) -> Shape:
    """The whole model on one device, replicated as far as the batch and the devices allow."""
    replicas, micro = _replicas(problem, most=True)
    return Shape(((_whole(problem), SubMesh(1, 1)),), replicas, micro, ((0, problem.units.count),))


def one_device_shape(problem: Problem) -> Shape:
    """The reference: the whole model on one device, one replica, every input in turn."""
    micro = problem.batch if problem.objective == "throughput" else 1
    return Shape(((_whole(problem), SubMesh(1, 1)),), 1, micro, ((0, problem.units.count),))
