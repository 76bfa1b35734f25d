"""A throughput result as files (``--objective throughput``): the manifest and the certificate of a
batched schedule (Sections 3.1–3.2 of the thesis, ../shared/papers/heterogeneous-scheduling-milp-split.txt).

A batched schedule splits each op's ``L`` inputs into slices over the devices (data parallelism) and
orders every slice (model parallelism). The manifest's ``ops[]`` lists every slice — name, device,
start, end, ``batch`` (its size), ``input`` (its first input) and ``inputs`` ``[lo, hi)`` — and
``transfers[]`` every tensor move between slices on two devices that share inputs (precedence per
input, 3.3; each timed by :meth:`~onnxpart.schedule.model.Instance.delay_count`), so the batch makespan
``C`` can be recomputed; the certificate bounds ``C`` (minimized), and ``details`` gives the
throughput ``L/C`` and the proven ceiling ``L/LB``. ``gantt.png`` is drawn from the same events
(:func:`onnxpart.schedule.emit.gantt_png`). No per-device ONNX pieces are written: a piece holding a
slice of a batch would need the batch cut and joined around it, which the shared parts emitter does
not do.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.schedule.batch import BatchSchedule, ranges, slice_transfers
from onnxpart.schedule.emit import MANIFEST_SCHEMA, edge_tensors, instance_digest, method_result, system_payload
from onnxpart.schedule.model import Instance

OBJECTIVE = "throughput: batch makespan C (s), throughput = batch / C"


def certificate_hash(inst: Instance, model_sha256: str | None, batch: int) -> str:
    """Instance sha256: model file + the instance's costs and system + the objective and batch."""
    return instance_hash(model_sha256, instance_digest(inst), "throughput", batch)


def device_summary(inst: Instance, sched: BatchSchedule) -> list[dict[str, Any]]:
    """Per device: busy seconds, ops with a slice there, and (3.7)'s resident bytes with batching (an
    op's weights once, its activations per input: ``mem_i + act_mem_i·(x − 1)`` for ``x`` inputs)."""
    busy, memory = sched.busy(inst.k), np.zeros(inst.k)
    ops = np.zeros(inst.k, dtype=np.int64)
    for i, split in enumerate(sched.splits):
        for u, x in enumerate(split):
            if x > 0:
                ops[u] += 1
                memory[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
    return [{"name": name, "busy": float(busy[u]), "ops": int(ops[u]), "memory": float(memory[u]),
             "capacity": float(inst.capacity[u]) if math.isfinite(inst.capacity[u]) else None}
            for u, name in enumerate(inst.device_names)]


def manifest(solution, graph, model_path: str | None, model_sha256: str | None) -> dict[str, Any]:
    """The throughput manifest (module docstring): ``ops[]`` has one entry per slice, ``transfers[]`` one
    per :func:`~onnxpart.schedule.batch.slice_transfers` entry."""
    inst, sched = solution.instance, solution.schedule
    names = inst.device_names
    ops = []
    for i, u in sorted(sched.start, key=lambda key: (sched.start[key], key)):
        lo, hi = ranges(sched.splits[i])[u]
        ops.append({"name": inst.op_names[i], "device": names[u], "start": float(sched.start[(i, u)]),
                    "end": float(sched.end[(i, u)]), "batch": hi - lo, "input": lo, "inputs": [lo, hi]})
    transfers = []
    for t in slice_transfers(inst, sched):
        tensors = edge_tensors(graph, t.src[0], t.dst[0])
        transfers.append({"tensor": ",".join(tensors), "tensors": tensors, "from": names[t.src[1]],
                          "to": names[t.dst[1]], "src_op": inst.op_names[t.src[0]],
                          "dst_op": inst.op_names[t.dst[0]], "start": float(t.start), "end": float(t.end),
                          "bytes": float(t.bytes), "inputs": list(t.inputs)})
    return {"schema": MANIFEST_SCHEMA, "model": {"path": model_path, "sha256": model_sha256}, "graph": graph.name,
            "system": system_payload(inst), "objective": "throughput", "objective_unit": "inputs/s",
            "batch": sched.batch, "method": solution.method, "makespan": sched.makespan,
            "throughput": sched.throughput, "ops": ops, "transfers": transfers,
            "devices": device_summary(inst, sched)}


def certificate(solution, model_sha256: str | None, options: dict[str, Any]) -> Certificate:
    """``problem: "schedule"``, the batch makespan ``C`` as the upper bound, every proven bound of ``C``."""
    inst, sched = solution.instance, solution.schedule
    cert = Certificate(problem="schedule", instance_sha256=certificate_hash(inst, model_sha256, sched.batch),
                       objective=OBJECTIVE, upper_bound=float(sched.makespan),
                       lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, "batch": sched.batch, "throughput": sched.throughput,
                                "options": options, "methods": [method_result(r) for r in solution.results]})
    lb = cert.best_lower_bound
    cert.details["throughput_ceiling"] = sched.batch / lb if lb else None  # proven: no schedule does better
    return cert
