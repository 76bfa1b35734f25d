"""A latency Solution as files: ``manifest.json``, ``certificate.json``, ``piece_<i>_<device>.onnx``,
``annotated.onnx`` and ``gantt.png`` (payloads and models only; the command writes them through
:class:`onnxpart.files.OutputDir` and :mod:`onnxpart.writer`; what both objectives share is in
:mod:`onnxpart.schedule.common.emit`).

* The manifest (``onnxpart.schedule-manifest/1``) holds plain fields a checker re-simulates: the system
  (devices, links), the objective, ``order`` (the execution order), ``ops[]`` (name, device, start, end,
  piece), ``transfers[]`` (tensor, from, to, start, end, bytes), the makespan and the pieces.
* ``annotated.onnx``: one ``DeviceConfigurationProto`` named ``schedule`` listing the system's devices;
  every node carries a ``NodeDeviceConfigurationProto``. ONNX 1.23's proto has no ``device`` field (only
  ``configuration_id``, ``sharding_spec``, ``pipeline_stage``), so the device is a ``ShardingSpecProto``
  per node output with ``device=[index]`` and no sharded axis: the whole tensor lives on that device.
* The schedule's semantics are the thesis's (Ghannane 2023, Section 2.3;
  ../shared/papers/heterogeneous-scheduling-milp-split.txt): contention-free links, latency objective.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.parts import annotate, part_io, part_models
from onnxpart.schedule.common.emit import (CONFIGURATION, certificate as shared_certificate, finite, instance_digest,
                                           manifest_head, piece_entry, piece_graph_name, transfer_entry)
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.pieces import Piece
from onnxpart.schedule.latency.pieces import piece_of
from onnxpart.schedule.latency.simulator import Schedule
from onnxpart.units import format_seconds

OBJECTIVE = "latency: makespan (s)"


def certificate_hash(inst: Instance, model_sha256: str | None, max_pieces: int | None) -> str:
    """Instance sha256: model file + the instance's costs and system + the piece limit."""
    return instance_hash(model_sha256, instance_digest(inst), "latency", max_pieces)


def manifest(solution, sched: Schedule, parts: list[Piece], graph, model_path: str | None,
             model_sha256: str | None, files: dict[int, str] | None = None, axis=None) -> dict[str, Any]:
    """The manifest (module docstring); ``sched`` is the emitted (canonical, maybe merged) schedule
    (``axis``: throughput's batch axis, unused here)."""
    inst = solution.instance
    where = piece_of(inst, parts)
    io_names = part_io(graph, where, len(parts))
    ops = [{"name": inst.op_names[i], "device": inst.device_names[sched.mapping[i]], "start": float(sched.start[i]),
            "end": float(sched.end[i]), "piece": int(where[i])} for i in sched.order]
    transfers = [transfer_entry(inst, graph, t.src, t.dst, t.src_device, t.dst_device, t.start, t.end, t.bytes)
                 for t in sorted(sched.transfers, key=lambda t: (t.start, t.src, t.dst))]
    pieces = [piece_entry(inst, graph, p, files or {}, io_names[p.index],
                          (min(sched.start[list(p.ops)]), max(sched.end[list(p.ops)]))) for p in parts]
    return {**manifest_head(solution, graph, model_path, model_sha256, "latency", "s"),
            "method": solution.method, "makespan": sched.makespan, "order": [inst.op_names[i] for i in sched.order],
            "ops": ops, "transfers": transfers, "pieces": pieces, "devices": device_summary(inst, sched)}


def device_summary(inst: Instance, sched: Schedule) -> list[dict[str, Any]]:
    """Per device: busy seconds, op count, and memory (constraint 3.7's resident bytes)."""
    busy, memory = sched.busy(inst.k), sched.memory(inst)
    counts = np.bincount(sched.mapping, minlength=inst.k)
    return [{"name": name, "busy": float(busy[u]), "ops": int(counts[u]), "memory": float(memory[u]),
             "capacity": finite(inst.capacity[u])} for u, name in enumerate(inst.device_names)]


def certificate(solution, sched: Schedule, model_sha256: str | None, options: dict[str, Any]) -> Certificate:
    """The shared certificate, ``problem: "schedule"``: upper bound = the emitted makespan, every bound."""
    return shared_certificate(solution, certificate_hash(solution.instance, model_sha256, options.get("max_pieces")),
                              OBJECTIVE, sched.makespan, {}, options)


def summary(sched: Schedule) -> dict[str, Any]:
    """The command's own result fields (``--json``)."""
    return {"makespan": sched.makespan}


def gantt_title(graph, sched: Schedule) -> str:
    """``gantt.png``'s title."""
    return f"{graph.name}: makespan {format_seconds(sched.makespan)}"


def piece_models(loaded_model, graph, parts: list[Piece], inst: Instance, declare=None) -> dict[int, onnx.ModelProto]:
    """``{piece index: ModelProto}`` via :func:`onnxpart.parts.part_models`."""
    where = piece_of(inst, parts)
    return part_models(loaded_model, graph, where, len(parts), lambda p: piece_graph_name(graph, parts[p], inst),
                       declare)


def annotated_model(loaded, graph, inst: Instance, sched: Schedule, axis=None) -> onnx.ModelProto:
    """The original model (``loaded``: :class:`~onnxpart.onnx_io.LoadedModel`) with the ``schedule`` device
    configuration and each node's device (module docstring; ``axis`` unused)."""
    def fields(u: int, node: onnx.NodeProto) -> dict[str, Any]:
        return {"sharding_spec": [onnx.ShardingSpecProto(tensor_name=out, device=[u]) for out in node.output if out]}

    return annotate(loaded.model, graph, np.asarray(sched.mapping), CONFIGURATION, list(inst.device_names), fields,
                    per_node=True)


def pieces_axis(loaded, freeze: bool) -> None:
    """Latency pieces run whole, on one input: no batch axis."""
    return None


def piece_runner(axis, sched: Schedule) -> None:
    """How ``--verify`` runs the pieces: None, the shared runner (:func:`onnxpart.verify.verify_parts`)."""
    return None
