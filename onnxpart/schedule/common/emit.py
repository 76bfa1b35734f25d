"""What both objectives' output files share (payloads and models only; the command writes them through
:class:`onnxpart.files.OutputDir` and :mod:`onnxpart.writer`).

* The manifest's head (``onnxpart.schedule-manifest/1``: the model, the system's devices and direct
  links, the objective), its ``transfers[]`` and ``pieces[]`` entries, and every method's line.
* The certificate (``problem: "schedule"``; the instance hash covers everything the cost depends on:
  :func:`instance_digest`).
* The pieces' file and graph names, and ``gantt.png`` drawn from the manifest's events.
* The schedule's semantics are the thesis's (Ghannane 2023, Section 2.3;
  ../shared/papers/heterogeneous-scheduling-milp-split.txt): contention-free links.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from onnxpart.certificate import Certificate
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.pieces import Piece

MANIFEST_SCHEMA = "onnxpart.schedule-manifest/1"
CONFIGURATION = "schedule"


def instance_digest(inst: Instance) -> str:
    """sha256 of everything the schedule's cost depends on: times, edges, delays, memory, capacities, and
    the measured batch curves."""
    h = hashlib.sha256()
    for array in (inst.time, np.array([(i, j, b) for i, j, b in inst.edges], dtype=float), inst.delays,
                  inst.mem, inst.capacity):
        h.update(np.ascontiguousarray(array, dtype=float).tobytes())
    h.update("\0".join(inst.op_names + ["|"] + list(inst.device_names)).encode())
    h.update(b"".join(inst.curve_key(u) for u in range(inst.k)))  # measured batch curves (none: no bytes)
    return h.hexdigest()


def system_payload(inst: Instance) -> dict[str, Any]:
    """The system's devices (name, group, spec, memory, switch cost) and its direct links (bandwidth,
    latency)."""
    system = inst.system
    devices = [{"name": name, "memory": finite(inst.capacity[u]),
                "group": system.devices[u].group if system else name,
                "spec": getattr(system.devices[u].spec, "name", None) if system else None,
                "switch": system.devices[u].switch if system else 0.0}
               for u, name in enumerate(inst.device_names)]
    links = [] if system is None else [
        {"from": inst.device_names[u], "to": inst.device_names[v], "bandwidth": link.bandwidth,
         "latency": link.latency} for (u, v), link in sorted(system.links.items())]
    return {"devices": devices, "links": links}


def finite(value: float) -> float | None:
    """``value`` as a float, None for an infinite one (JSON has no infinity)."""
    return float(value) if math.isfinite(value) else None


def manifest_head(solution, graph, model_path: str | None, model_sha256: str | None, objective: str,
                  unit: str) -> dict[str, Any]:
    """The fields every manifest starts with: schema, model, graph, system, objective and its unit."""
    return {"schema": MANIFEST_SCHEMA, "model": {"path": model_path, "sha256": model_sha256}, "graph": graph.name,
            "system": system_payload(solution.instance), "objective": objective, "objective_unit": unit}


def edge_tensors(graph, i: int, j: int) -> list[str]:
    """The tensors op ``i`` makes that op ``j`` reads (an instance edge's names)."""
    reads = set(graph.ops[j].inputs)
    return [name for name in graph.ops[i].outputs if name in reads]


def transfer_entry(inst: Instance, graph, src: int, dst: int, u: int, v: int, start: float, end: float,
                   nbytes: float) -> dict[str, Any]:
    """A ``transfers[]`` entry: op ``src``'s tensors for op ``dst`` from device ``u`` to ``v``."""
    tensors = edge_tensors(graph, src, dst)
    names = inst.device_names
    return {"tensor": ",".join(tensors), "tensors": tensors, "from": names[u], "to": names[v],
            "src_op": inst.op_names[src], "dst_op": inst.op_names[dst], "start": float(start), "end": float(end),
            "bytes": float(nbytes)}


def onnx_nodes(graph, ops) -> list[str]:
    """The ONNX nodes of ``ops``, in their order."""
    return [name for i in ops for name in graph.ops[i].onnx_nodes]


def piece_entry(inst: Instance, graph, piece: Piece, files: dict[int, str], io_names: tuple[list, list],
                span: tuple[float, float], **more: Any) -> dict[str, Any]:
    """A ``pieces[]`` entry: index, device, file, ops, ONNX nodes, the tensors it reads and makes
    (``io_names``), the objective's own fields ``more``, and its first start and last end (``span``)."""
    return {"index": piece.index, "device": inst.device_names[piece.device], "file": files.get(piece.index),
            "ops": [inst.op_names[i] for i in piece.ops], "onnx_nodes": onnx_nodes(graph, piece.ops),
            "inputs": io_names[0], "outputs": io_names[1], **more, "start": float(span[0]), "end": float(span[1])}


def method_result(r) -> dict[str, Any]:
    """A ``methods[]`` row of the certificate: a :class:`onnxpart.strategy.MethodResult`, its value as ``makespan``."""
    return {"method": r.method, "makespan": r.value, "status": r.status, "seconds": r.seconds,
            "bound": r.bound, "note": r.note}


def certificate(solution, instance_sha256: str, objective: str, upper_bound: float, details: dict[str, Any],
                options: dict[str, Any]) -> Certificate:
    """The shared certificate, ``problem: "schedule"``: the emitted makespan as the upper bound, every
    proven bound, the method, the objective's own ``details``, the options and every method's line."""
    return Certificate(problem="schedule", instance_sha256=instance_sha256, objective=objective,
                       upper_bound=float(upper_bound), lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, **details, "solver_makespan": solution.makespan,
                                "options": options, "methods": [method_result(r) for r in solution.results]})


def piece_graph_name(graph, piece: Piece, inst: Instance) -> str:
    """The graph name of a piece's model: ``<graph>_piece_<i>_<device>``."""
    return f"{graph.name}_piece_{piece.index}_{_safe(inst.device_names[piece.device])}"


def piece_file(piece: Piece, inst: Instance) -> str:
    """``piece_<i>_<device>.onnx``; a throughput piece adds its inputs, first and last:
    ``piece_<i>_<device>_b<lo>-<hi - 1>.onnx``."""
    slice_ = f"_b{piece.inputs[0]}-{piece.inputs[1] - 1}" if piece.inputs is not None else ""
    return f"piece_{piece.index}_{_safe(inst.device_names[piece.device])}{slice_}.onnx"


def _safe(name: str) -> str:
    return name.replace(":", "-")
