"""Checking a latency output folder without trusting the code that made it (``--check-certificate``).

``manifest.json`` is read through its schema (:class:`LatencyManifest`), checked to be made from the
model given and the certificate for this instance (:func:`onnxpart.certificate_check.hash_problems`), and
the schedule is rebuilt from the entries' plain fields — every op exactly once, on a device of the
system. It is validated from scratch under the thesis's cost semantics (Ghannane 2023, Section 2.3;
../shared/papers/heterogeneous-scheduling-milp-split.txt): every duration the cost of its op on the
device named, every input arriving after its producer ends plus the link's (or route's) ``latency +
bytes / bandwidth``, no two ops overlapping on a device (links are contention-free in this model), the
memory (3.7). Then every field of the manifest is recomputed from the model and compared
(:func:`onnxpart.certificate_check.differences`), naming the first wrong entry: each op's start and end
(the list schedule of the manifest's mapping and order, :func:`.simulator.simulate`), every transfer —
present, its bytes, start and end, none extra —, the pieces, the per-device summary, the makespan; the
certificate's upper bound must be the makespan, and the closed-form bounds (critical path, work, device
path) must re-derive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from onnxpart.certificate import Certificate
from onnxpart.certificate_check import differences, hash_problems
from onnxpart.schedule.common.check import (ENTITIES, CertificateCheck, Manifest, OpEntry, TransferEntry,
                                            max_pieces)
from onnxpart.schedule.common.emit import piece_file
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.solution import Solution
from onnxpart.schedule.latency import bounds as _bounds
from onnxpart.schedule.latency import emit
from onnxpart.schedule.latency.pieces import later_reads, piece_of, pieces
from onnxpart.schedule.latency.simulator import Schedule, simulate, transfers_of, validate
from onnxpart.units import format_seconds
from onnxpart.validate import validate as read_as


class LatencyManifest(Manifest):
    """``--objective latency``'s manifest (:func:`onnxpart.schedule.latency.emit.manifest`)."""

    objective: Literal["latency"]
    order: list[str]
    ops: list[OpEntry]
    transfers: list[TransferEntry]


def check_certificate(inst: Instance, graph, manifest: Any, cert: Certificate, model_sha256: str | None,
                      where: str, onnx_input: bool, axis: Callable[[], Any] | None = None) -> CertificateCheck:
    """Re-check a latency folder (module docstring): ``manifest`` read from ``where``; ``graph`` is the
    OpGraph ``inst`` was built from; ``onnx_input`` says whether piece files were written (``axis``:
    throughput's batch axis, unused here)."""
    checked = read_as(LatencyManifest, manifest, where)
    problems = hash_problems(cert, emit.certificate_hash(inst, model_sha256, max_pieces(cert, where)),
                             checked.model, model_sha256, "costs or system")
    read = _read_ops(inst, checked.ops, problems)
    if read is None:
        return CertificateCheck(float("nan"), problems)
    mapping, start, end = read
    order = _read_order(inst, checked.order, problems)
    if order is None:
        return CertificateCheck(float("nan"), problems)
    problems += validate(inst, Schedule(mapping, start, end, order, transfers_of(inst, mapping, end)))
    try:
        sched = simulate(inst, mapping, order)
    except ValueError as exc:
        return CertificateCheck(float("nan"), problems + [f"the manifest's schedule is infeasible: {exc}"])
    parts = pieces(inst, mapping, order)
    files = {p.index: piece_file(p, inst) for p in parts} if onnx_input else {}
    expected = emit.manifest(Solution(inst, sched, checked.method), sched, parts, graph, checked.model.path,
                             model_sha256, files)
    problems += differences(manifest, expected, ENTITIES)
    problems += later_reads(inst, piece_of(inst, parts))
    formulas = {"critical-path": _bounds.critical_path_bound(inst).value, "work": _bounds.work_bound(inst).value,
                "device-path": _bounds.device_path_bound(inst).value}
    problems += cert.check(sched.makespan, formulas)
    return CertificateCheck(sched.makespan, problems)


def _read_ops(inst: Instance, entries: list[OpEntry], problems: list[str]):
    """(mapping, start, end) from ``ops[]``: every op exactly once, on a device of the system (None,
    with ``problems``, otherwise)."""
    where = {name: i for i, name in enumerate(inst.op_names)}
    devices = {name: u for u, name in enumerate(inst.device_names)}
    mapping = np.full(inst.n, -1, dtype=np.int64)
    start, end = np.zeros(inst.n), np.zeros(inst.n)
    found = []
    for entry in entries:
        if entry.name not in where:
            found.append(f"ops[{entry.name!r}]: the model has no such op")
        elif entry.device not in devices:
            found.append(f"ops[{entry.name!r}] is on {entry.device!r}, which the system does not have")
        elif mapping[where[entry.name]] >= 0:
            found.append(f"ops[{entry.name!r}] is listed twice")
        else:
            i = where[entry.name]
            mapping[i], start[i], end[i] = devices[entry.device], entry.start, entry.end
    missing = [inst.op_names[i] for i in np.flatnonzero(mapping < 0)]
    if missing and not found:
        found.append(f"ops[{missing[0]!r}] is missing ({len(missing)} ops have no entry)")
    problems += found
    return None if found else (mapping, start, end)


def _read_order(inst: Instance, names: list[str], problems: list[str]) -> list[int] | None:
    """``order`` as op ids: every op once (None, with ``problems``, otherwise)."""
    where = {name: i for i, name in enumerate(inst.op_names)}
    order = [where.get(name, -1) for name in names]
    if sorted(order) != list(range(inst.n)):
        problems.append("the manifest's order does not list every op of the model once")
        return None
    return order


def ok_line(upper_bound: float) -> str:
    """What ``--check-certificate`` prints when the folder checks out."""
    return (f"certificate ok: makespan {format_seconds(upper_bound)} re-simulated from the manifest's mapping and "
            "order, every transfer, piece and device recomputed; every lower bound is at most it")
