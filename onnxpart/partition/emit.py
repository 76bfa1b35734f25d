"""Solution -> files: ``stage_i.onnx``, ``manifest.json``, ``certificate.json``, ``annotated.onnx``.

* A stage model holds the ONNX nodes of its ops (weight generators pulled in by
  :func:`onnxpart.onnx_extract.extract_subgraph`); its inputs are the tensors it receives (from earlier stages
  or the graph's inputs), its outputs the tensors later stages read plus the model outputs it makes;
  the last stage also emits the model outputs no op makes (constants, graph inputs passed through).
* ``annotated.onnx`` is the original model with ONNX's multi-device fields (IR ≥ 11):
  ``ModelProto.configuration`` holds one ``DeviceConfigurationProto`` named ``pipeline`` with k devices
  ``stage_0 … stage_{k-1}``, and every compute node (and the weight generators it owns) carries a
  ``NodeDeviceConfigurationProto(configuration_id="pipeline", pipeline_stage=i)``.
* Empty stages (allowed when k exceeds what helps, or k > ops) have no file: ``"file": null``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.partition import Solution
from onnxpart.parts import annotate, iter_part_models, part_io

MANIFEST_SCHEMA = "onnxpart.partition-manifest/1"
OBJECTIVE = "bottleneck stage time (s)"
CONFIGURATION = "pipeline"


def stage_file(index: int) -> str:
    """The file of stage ``index``'s model."""
    return f"stage_{index}.onnx"


def stage_io(graph, assignment: np.ndarray, k: int) -> list[tuple[list[str], list[str]]]:
    """(inputs, outputs) tensor names per stage (:func:`onnxpart.parts.part_io`)."""
    return part_io(graph, assignment, k)


def manifest(solution: Solution, graph, model_path: str | None = None, model_sha256: str | None = None,
             files: dict[int, str] | None = None, constants: dict[int, list[str]] | None = None) -> dict[str, Any]:
    """The manifest: model, k, cost model, bandwidth, and per stage its ops, tensors (of ``graph``, the
    OpGraph the instance was built from) and Eq. (3) terms; with ``constants`` (the stage files written),
    the inputs each file holds as constants instead of reading them (``--freeze-dims``)."""
    inst, k = solution.instance, solution.k
    costs = solution.costs
    io = stage_io(graph, solution.assignment, k)
    value = max(c.cost for c in costs) if costs else 0.0
    worst = int(np.argmax([c.cost for c in costs])) if costs else 0
    stages = []
    for b in range(k):
        ops = np.flatnonzero(solution.assignment == b)
        stages.append({
            "index": b,
            "file": (files or {}).get(b),
            "ops": [inst.op_names[i] for i in ops],
            "onnx_nodes": [name for i in ops for name in inst.members[i]],
            "inputs": io[b][0],
            "outputs": io[b][1],
            "work": costs[b].work,
            "io_in": costs[b].io_in,
            "io_out": costs[b].io_out,
            "overflow": costs[b].overflow,
            "param_bytes": costs[b].params,
            "cost": costs[b].cost,
            **({} if constants is None else {"constants": constants.get(b, [])}),
        })
    return {
        "schema": MANIFEST_SCHEMA,
        "model": {"path": model_path, "sha256": model_sha256},
        "graph": inst.name,
        "k": k,
        "cost_model": graph.cost_model,
        "device": graph.device,
        "bandwidth": inst.bandwidth,
        "stage_memory": inst.stage_memory,
        "objective": OBJECTIVE,
        "method": solution.method,
        "bottleneck": value,
        "bottleneck_stage": worst,
        "stages": stages,
    }


def certificate_hash(solution: Solution, model_sha256: str | None) -> str:
    """Instance sha256: model file + the instance's costs (work, tensors, M, B) + k."""
    return instance_hash(model_sha256, solution.instance.digest(), solution.k)


def certificate(solution: Solution, model_sha256: str | None, options: dict[str, Any]) -> Certificate:
    costs = solution.costs
    return Certificate(
        problem="mtpp",
        instance_sha256=certificate_hash(solution, model_sha256),
        objective=OBJECTIVE,
        upper_bound=max((c.cost for c in costs), default=0.0),
        lower_bounds=list(solution.lower_bounds),
        details={"k": solution.k, "method": solution.method,
                 "stages_used": int(len(np.unique(solution.assignment))) if len(solution.assignment) else 0,
                 "options": options, "search": solution.search},
    )


def stage_models(loaded_model, graph, solution: Solution, declare=None, frozen=None) -> Iterator[tuple[int, Any]]:
    """``(stage index, ModelProto)`` for the non-empty stages, one at a time (:func:`iter_part_models`: a
    writer holds one stage's weights at once); ``declare(name)`` types their inputs and outputs (see
    :func:`onnxpart.onnx_extract.extract_subgraph`); ``frozen`` (``--freeze-dims``: the concrete types)
    makes the inputs that are constant under them initializers."""
    return iter_part_models(loaded_model, graph, solution.assignment, solution.k,
                            lambda b: f"{graph.name}_stage_{b}", declare, frozen=frozen)


def annotated_model(loaded_model, graph, solution: Solution):
    """The original model with ``pipeline_stage`` on every compute node and the weight generators it
    owns, and the ``pipeline`` device configuration (IR version raised to 11 if lower)."""
    return annotate(loaded_model, graph, solution.assignment, CONFIGURATION,
                    [f"stage_{b}" for b in range(solution.k)], lambda b: {"pipeline_stage": b})
