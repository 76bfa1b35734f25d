"""Solution -> files: ``manifest.json``, ``certificate.json``, ``piece_<i>_<device>.onnx``,
``annotated.onnx`` and ``gantt.png`` (payloads and models only; the command writes them through
:class:`onnxpart.files.OutputDir` and :mod:`onnxpart.writer`).

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

import hashlib
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.parts import annotate, part_io, part_models
from onnxpart.schedule.model import Instance
from onnxpart.schedule.pieces import Piece, piece_of
from onnxpart.schedule.simulator import Schedule

MANIFEST_SCHEMA = "onnxpart.schedule-manifest/1"
OBJECTIVE = "latency: makespan (s)"
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


def certificate_hash(inst: Instance, model_sha256: str | None, max_pieces: int | None) -> str:
    """Instance sha256: model file + the instance's costs and system + the piece limit."""
    return instance_hash(model_sha256, instance_digest(inst), "latency", max_pieces)


def system_payload(inst: Instance) -> dict[str, Any]:
    """The system's devices (name, group, spec, memory) and its direct links (bandwidth, latency)."""
    system = inst.system
    devices = [{"name": name, "memory": _finite(inst.capacity[u]),
                "group": system.devices[u].group if system else name,
                "spec": getattr(system.devices[u].spec, "name", None) if system else None}
               for u, name in enumerate(inst.device_names)]
    links = [] if system is None else [
        {"from": inst.device_names[u], "to": inst.device_names[v], "bandwidth": link.bandwidth,
         "latency": link.latency} for (u, v), link in sorted(system.links.items())]
    return {"devices": devices, "links": links}


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def edge_tensors(graph, i: int, j: int) -> list[str]:
    """The tensors op ``i`` makes that op ``j`` reads (an instance edge's names)."""
    reads = set(graph.ops[j].inputs)
    return [name for name in graph.ops[i].outputs if name in reads]


def manifest(solution, sched: Schedule, parts: list[Piece], graph, model_path: str | None,
             model_sha256: str | None, files: dict[int, str] | None = None) -> dict[str, Any]:
    """The manifest (module docstring); ``sched`` is the emitted (canonical, maybe merged) schedule."""
    inst = solution.instance
    names = inst.device_names
    where = piece_of(inst, parts)
    io_names = part_io(graph, where, len(parts))
    ops = [{"name": inst.op_names[i], "device": names[sched.mapping[i]], "start": float(sched.start[i]),
            "end": float(sched.end[i]), "piece": int(where[i])} for i in sched.order]
    transfers = []
    for t in sorted(sched.transfers, key=lambda t: (t.start, t.src, t.dst)):
        tensors = edge_tensors(graph, t.src, t.dst)
        transfers.append({"tensor": ",".join(tensors), "tensors": tensors, "from": names[t.src_device],
                          "to": names[t.dst_device], "src_op": inst.op_names[t.src], "dst_op": inst.op_names[t.dst],
                          "start": t.start, "end": t.end, "bytes": t.bytes})
    pieces = [{"index": p.index, "device": names[p.device], "file": (files or {}).get(p.index),
               "ops": [inst.op_names[i] for i in p.ops], "onnx_nodes": onnx_nodes(graph, p.ops),
               "inputs": io_names[p.index][0], "outputs": io_names[p.index][1],
               "start": float(min(sched.start[list(p.ops)])), "end": float(max(sched.end[list(p.ops)]))}
              for p in parts]
    return {"schema": MANIFEST_SCHEMA, "model": {"path": model_path, "sha256": model_sha256}, "graph": graph.name,
            "system": system_payload(inst), "objective": "latency", "objective_unit": "s",
            "method": solution.method, "makespan": sched.makespan, "order": [inst.op_names[i] for i in sched.order],
            "ops": ops, "transfers": transfers, "pieces": pieces, "devices": device_summary(inst, sched)}


def onnx_nodes(graph, ops) -> list[str]:
    """The ONNX nodes of ``ops``, in their order."""
    return [name for i in ops for name in graph.ops[i].onnx_nodes]


def method_result(r) -> dict[str, Any]:
    return {"method": r.method, "makespan": r.makespan, "status": r.status, "seconds": r.seconds,
            "bound": r.bound, "note": r.note}


def device_summary(inst: Instance, sched: Schedule) -> list[dict[str, Any]]:
    """Per device: busy seconds, op count, and memory (constraint 3.7's resident bytes)."""
    busy, memory = sched.busy(inst.k), sched.memory(inst)
    counts = np.bincount(sched.mapping, minlength=inst.k)
    return [{"name": name, "busy": float(busy[u]), "ops": int(counts[u]), "memory": float(memory[u]),
             "capacity": _finite(inst.capacity[u])} for u, name in enumerate(inst.device_names)]


def certificate(solution, sched: Schedule, model_sha256: str | None, options: dict[str, Any]) -> Certificate:
    """The shared certificate, ``problem: "schedule"``: upper bound = the emitted makespan, every bound."""
    inst = solution.instance
    return Certificate(problem="schedule",
                       instance_sha256=certificate_hash(inst, model_sha256, options.get("max_pieces")),
                       objective=OBJECTIVE, upper_bound=float(sched.makespan),
                       lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, "solver_makespan": solution.makespan,
                                "options": options, "methods": [method_result(r) for r in solution.results]})


def piece_models(loaded_model, graph, parts: list[Piece], inst: Instance, declare=None) -> dict[int, onnx.ModelProto]:
    """``{piece index: ModelProto}`` via :func:`onnxpart.parts.part_models`."""
    where = piece_of(inst, parts)
    return part_models(loaded_model, graph, where, len(parts), lambda p: piece_graph_name(graph, parts[p], inst),
                       declare)


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


def annotated_model(loaded_model, graph, inst: Instance, sched: Schedule) -> onnx.ModelProto:
    """The original model with the ``schedule`` device configuration and each node's device (module docstring)."""
    def fields(u: int, node: onnx.NodeProto) -> dict[str, Any]:
        return {"sharding_spec": [onnx.ShardingSpecProto(tensor_name=out, device=[u]) for out in node.output if out]}

    return annotate(loaded_model, graph, np.asarray(sched.mapping), CONFIGURATION, list(inst.device_names), fields,
                    per_node=True)


def slice_label(entry: dict[str, Any], span: float) -> str:
    """``"lo–hi"`` (inclusive) for a batch slice's bar that spans at least ``0.9 %`` of the chart per
    character (wide enough for its text at 7 pt on the 10-inch chart); ``""`` for latency ops or
    narrow bars."""
    if "inputs" not in entry or span <= 0:
        return ""
    lo, hi = entry["inputs"]
    text = f"{lo}–{hi - 1}" if hi - lo > 1 else f"{lo}"
    return text if (entry["end"] - entry["start"]) / span >= 0.009 * len(text) else ""


def gantt_png(devices: Sequence[str], ops: Sequence[dict[str, Any]], transfers: Sequence[dict[str, Any]],
              title: str) -> bytes:
    """A Gantt chart from the manifest's events (PNG bytes), for either objective: one row per device
    and one per used link; ``ops[]`` entries (name, device, start, end — for throughput a batch slice
    of Section 3.2, labelled with its input range by :func:`slice_label`) and ``transfers[]`` entries
    (from, to, start, end) as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row = {name: u for u, name in enumerate(devices)}
    links = sorted({(t["from"], t["to"]) for t in transfers}, key=lambda link: (row[link[0]], row[link[1]]))
    rows = list(devices) + [f"{a}→{b}" for a, b in links]
    span = max((e["end"] for e in [*ops, *transfers]), default=0.0)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * len(rows)), dpi=100)
    colors = plt.get_cmap("tab10")
    # one broken_barh per row (2,816 slices took 12 s drawn as single bars)
    bars: list[list[tuple[float, float]]] = [[] for _ in rows]
    for entry in ops:
        u = row[entry["device"]]
        bars[u].append((entry["start"], entry["end"] - entry["start"]))
        label = slice_label(entry, span)
        if label:
            ax.text((entry["start"] + entry["end"]) / 2, u, label, ha="center", va="center", fontsize=7)
    link_row = {link: len(devices) + n for n, link in enumerate(links)}
    for t in transfers:
        bars[link_row[(t["from"], t["to"])]].append((t["start"], t["end"] - t["start"]))
    for r, spans in enumerate(bars):
        device = r < len(devices)
        ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=colors(r % 10) if device else "lightgray",
                       edgecolor="black" if device else "dimgray", linewidth=0.3)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
