"""A plan's files: ``manifest.json`` (schema ``onnxpart.plan-manifest/1``), the shared certificate (problem
``plan``), one ONNX file per stage, and the picture (:mod:`onnxpart.plan.chart`).

* **Stage files** ``stage_i.onnx`` are partition's (:func:`onnxpart.partition.emit.stage_file`,
  :func:`onnxpart.parts.iter_part_models`: the stage's nodes, its weight generators, its inputs the tensors it
  receives, its outputs those later stages read and the model outputs it makes), each annotated with its
  stage's tile layouts as ONNX sharding specs (:func:`onnxpart.tile.onnx.emit.sharded_model`): one
  ``DeviceConfigurationProto`` named ``cluster`` with every cluster device (``device_0`` …, node-major), and
  per node a spec per slot whose device indices are the cluster devices of replica 0 (the manifest lists every
  replica's: replica r runs the same file on its own devices).
* **manifest.json**: the model, the cluster (:meth:`~onnxpart.plan.cluster.Cluster.describe`), the objective,
  batch, replicas and micro-batches; the plan family (units as op-index bounds, the sub-meshes allowed); per
  stage its file, ops, unit run, mesh, the cluster devices of every replica, predicted compute and period, the
  memory of each of its devices (:meth:`onnxpart.plan.stages.Stage.memory`) and every tensor's layout — enough
  for ``--check-certificate`` to rebuild the stage (:func:`onnxpart.plan.evaluate.build_stage` with the
  recorded layouts) and reprice it; the transfers between stages; the totals; every method's row and the
  one-device reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.parts import iter_part_models, part_io

if TYPE_CHECKING:
    from onnxpart.plan import PlanResult, Solution
    from onnxpart.plan.model import Priced, Problem

SCHEMA = "onnxpart.plan-manifest/1"
CONFIGURATION = "cluster"
OBJECTIVES = {"latency": "latency of one input (s): Σ stage compute + Σ transfers between stages",
              "throughput": "time of the batch (s): latency + (M − 1) × the slowest stage's period, on R replicas"}
FAMILY = ("plans whose stages are runs of the listed units (op-index bounds), each stage on its own sub-mesh — "
          "1×d inside one node with d in the node's divisor chain, or whole nodes (the sizes listed) — the "
          "sub-meshes disjoint, R identical replicas as the objective allows (latency: R = 1; throughput: R "
          "dividing the batch, M = batch / R), a tile plan inside each stage priced by tile's model, transfers "
          "between stages lower-bounded by 0, and memory by tile's model (each unit's least bytes per device); "
          "see onnxpart/plan/model.py, exact.py and unit_costs.py")


def stage_file(index: int) -> str:
    """The file of stage ``index`` (partition's naming)."""
    from onnxpart.partition.emit import stage_file as partition_stage_file

    return partition_stage_file(index)


def assignment(problem: Problem, priced: Priced) -> np.ndarray:
    """The stage of every op of the model."""
    out = np.zeros(len(problem.graph.ops), dtype=np.int64)
    for s, (ops, _) in enumerate(priced.shape.stages):
        out[list(ops)] = s
    return out


def stage_io(problem: Problem, priced: Priced) -> list[tuple[list[str], list[str]]]:
    """(inputs, outputs) tensor names per stage (:func:`onnxpart.parts.part_io`)."""
    return part_io(problem.graph, assignment(problem, priced), len(priced.shape.stages))


def family(problem: Problem) -> dict[str, Any]:
    """The plan family the search and the bound cover (module docstring of :mod:`onnxpart.plan.model`)."""
    return {"units": list(problem.units.bounds), "max_units": problem.max_units,
            "sub_meshes": [str(m) for m in problem.meshes],
            "mesh_sizes": None if problem.mesh_sizes is None else list(problem.mesh_sizes)}


def digest(problem: Problem) -> list:
    """What the certificate's instance hash covers: the cluster, the objective and its batch, the family, and
    every op's work and tensor bytes of the costed graph."""
    graph = problem.graph
    return [problem.cluster.describe(), problem.objective, problem.batch, problem.micro_batches, family(problem),
            [(op.name, op.work) for op in graph.ops], sorted((t.name, t.bytes) for t in graph.tensors.values())]


def instance_sha(problem: Problem, model_sha: str | None) -> str:
    return instance_hash(model_sha, digest(problem))


def _stage(problem: Problem, priced: Priced, s: int, io, files: dict[int, str] | None) -> dict[str, Any]:
    (ops, mesh), stage = priced.shape.stages[s], priced.stages[s]
    units = priced.shape.units[s] if priced.shape.units is not None else None
    return {"index": s, "file": (files or {}).get(s), "ops": [problem.graph.ops[i].name for i in ops],
            "units": None if units is None else list(units),
            "mesh": {"name": str(mesh), "nodes": mesh.nodes, "devices": mesh.devices, "shape": list(mesh.shape)},
            "devices": [list(replica[s]) for replica in priced.devices], "inputs": io[s][0], "outputs": io[s][1],
            "received": list(stage.received), "in_flight": stage.in_flight, "compute_s": stage.compute,
            "period_s": priced.periods[s], "memory": dict(priced.memory[s]),
            "layouts": {name: str(layout) for name, layout in stage.layouts.items()}}


def totals(problem: Problem, priced: Priced) -> dict[str, Any]:
    """Latency, the slowest period, the objective, and for throughput the inputs per second."""
    out = {"latency_s": priced.latency, "max_period_s": max(priced.periods), "value_s": priced.value,
           "devices_used": priced.shape.devices, "fits": priced.fits, "missing_bytes": priced.missing}
    if problem.objective == "throughput":
        out["inputs_per_second"] = problem.batch / priced.value if priced.value > 0 else None
    return out


def result_row(result: PlanResult) -> dict[str, Any]:
    """One method's row of the comparison."""
    return {**result.to_dict(), "shape": result.shape}


def one_device(problem: Problem, priced: Priced) -> dict[str, Any]:
    """The reference row: the whole model on one device."""
    return {"value_s": priced.value, "fits": priced.fits, "missing_bytes": priced.missing,
            "memory_per_device": priced.memory[0]["total"], "shape": priced.shape.describe()}


def manifest(solution: Solution, model_path: str | None, model_sha: str | None,
             files: dict[int, str] | None = None) -> dict[str, Any]:
    """manifest.json (module docstring); ``files``: the stage files written, by stage."""
    problem, priced = solution.problem, solution.priced
    io = stage_io(problem, priced)
    return {"schema": SCHEMA, "model": {"path": model_path, "sha256": model_sha}, "graph": problem.graph.name,
            "cost_model": problem.graph.cost_model, "device": problem.graph.device,
            "cluster": problem.cluster.describe(), "objective": problem.objective,
            "objective_text": OBJECTIVES[problem.objective], "batch": problem.batch,
            "micro_batches_option": problem.micro_batches, "replicas": priced.shape.replicas,
            "micro_batches": priced.shape.micro_batches, "family": family(problem), "method": solution.method,
            "shape": priced.shape.describe(),
            "stages": [_stage(problem, priced, s, io, files) for s in range(len(priced.stages))],
            "transfers": [{"source": t.source, "target": t.target, "tensors": list(t.tensors), "bytes": t.bytes,
                           "seconds": t.seconds} for t in priced.transfers],
            "totals": totals(problem, priced), "comparison": [result_row(r) for r in solution.results],
            "one_device": one_device(problem, solution.one_device)}


def certificate(solution: Solution, model_sha: str | None, options: dict[str, Any]) -> Certificate:
    """The shared certificate: the plan's value as the upper bound, the family bound, what it covers."""
    problem = solution.problem
    return Certificate(problem="plan", instance_sha256=instance_sha(problem, model_sha),
                       objective=OBJECTIVES[problem.objective], upper_bound=solution.value,
                       lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, "shape": solution.priced.shape.describe(),
                                "results": [result_row(r) for r in solution.results], "family": FAMILY,
                                "one_device": solution.one_device.value, "options": options})


def stage_models(model, solution: Solution, declare=None) -> Iterator[tuple[int, Any]]:
    """``(stage, ModelProto)`` per stage, one at a time, annotated with its layouts on replica 0's cluster
    devices (module docstring); ``declare(name)`` types the stage's inputs and outputs as the original does."""
    from onnxpart.tile.onnx.emit import sharded_model

    problem, priced = solution.problem, solution.priced
    graph, cluster = problem.graph, problem.cluster
    names = [f"device_{d}" for d in range(cluster.devices)]
    parts = iter_part_models(model, graph, assignment(problem, priced), len(priced.stages),
                             lambda s: f"{graph.name}_stage_{s}", declare)
    for s, part in parts:
        stage = priced.stages[s]
        yield s, sharded_model(part, graph, stage.instance, stage.plan, CONFIGURATION, names, priced.devices[0][s])
