"""``onnxpart plan --verify``, the part of it that is the plan's own: each stage's tile plan run on its
sub-mesh's virtual devices (:func:`onnxpart.tile.onnx.verify.verify_plan`: shards in onnxruntime, collectives
as data movement, every resharding's bytes held to its price), against the original model.

A stage's instance is the whole model's on its mesh cut down to its ops (:mod:`onnxpart.plan.stages`), where a
tensor another stage makes is an activation. For the run it is relabelled (:func:`stage_instance`): the tensors
the stage receives are its inputs — laid out from the original's values, as the transfer into the stage
delivers them in their layouts — and the tensors it hands on are its outputs, gathered whole and compared
with the original's on every device, with the model's outputs it makes. The chained run of the written stage
files against the original is the shared :func:`onnxpart.verify.verify_parts` (the command does both).
"""

from __future__ import annotations

import dataclasses

from onnxpart.tile.onnx.model import LayoutInstance


def stage_instance(graph, stage) -> LayoutInstance:
    """``stage``'s instance with the tensors it receives as inputs and those it hands on as outputs."""
    inst = stage.instance
    mine = {graph.ops[i].name for i in stage.ops}
    made = {t for op in inst.ops for t in op.outputs}
    tensors = []
    for t in inst.tensors:
        kind = t.kind
        if kind == "activation" and t.name not in made:
            kind = "input"
        elif kind == "activation" and any(graph.ops[c].name not in mine for c in graph.tensors[t.name].consumers):
            kind = "output"
        tensors.append(dataclasses.replace(t, kind=kind))
    return LayoutInstance(inst.name, inst.mesh, tuple(tensors), inst.ops, inst.memory, dict(inst.index),
                          sharded_outputs=inst.sharded_outputs)


def verify_stages(solution, loaded, seed: int, tolerance: float) -> list[dict]:
    """Run every stage's tile plan on its virtual devices (module docstring); -> one report per stage
    (:meth:`onnxpart.verify.VerifyReport.to_dict`, with the stage and its mesh). VerificationError (exit 1) at
    the first tensor that differs."""
    from onnxpart.tile.onnx.verify import verify_plan

    graph, priced = solution.problem.graph, solution.priced
    reports = []
    for s, stage in enumerate(priced.stages):
        report = verify_plan(stage_instance(graph, stage), stage.plan, graph, loaded, seed=seed, tolerance=tolerance)
        reports.append({"stage": s, "mesh": str(priced.shape.stages[s][1]), **report.to_dict()})
    return reports
