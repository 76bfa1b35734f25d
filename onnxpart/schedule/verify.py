"""Checking a schedule's output folder without trusting the code that made it (``--check-certificate``).

Both objectives read ``manifest.json`` through its schema (:class:`LatencyManifest`,
:class:`ThroughputManifest`), check it was made from the model given and the certificate for this
instance (:func:`onnxpart.certificate_check.hash_problems`), and rebuild the schedule from the entries'
plain fields — every op (latency) or slice (throughput) exactly once, on a device of the system. The
schedule read is validated from scratch under the thesis's cost semantics (Ghannane 2023, Section 2.3;
../shared/papers/heterogeneous-scheduling-milp-split.txt): every duration the cost of its op on the
device named, every input arriving after its producer ends plus the link's (or route's) ``latency +
bytes / bandwidth``, no two ops overlapping on a device (links are contention-free in this model), the
memory (3.7). Then every field of the manifest is recomputed from the model and compared
(:func:`onnxpart.certificate_check.differences`), naming the first wrong entry: each op's start and end
(latency: the list schedule of the manifest's mapping and order, :func:`simulator.simulate`), every
transfer — present, its bytes, start and end, none extra —, the pieces, the per-device summary, the
makespan (and throughput); the certificate's upper bound must be the makespan, and the closed-form
bounds (critical path, work, device path) must re-derive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import numpy as np
from pydantic import Field

from onnxpart.certificate import Certificate
from onnxpart.certificate_check import ModelRef, differences, hash_problems, mismatch
from onnxpart.schedule import bounds as _bounds
from onnxpart.schedule.model import Instance
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate as read_as

#: ``[lo, hi)``: a range of the batch's inputs
Inputs = Annotated[list[Count], Field(min_length=2, max_length=2)]


class OpEntry(ReadBackSchema):
    name: str
    device: str
    start: NonNegative
    end: NonNegative


class SliceEntry(OpEntry):
    batch: Count
    input: Count
    inputs: Inputs


class TransferEntry(ReadBackSchema):
    src_op: str
    dst_op: str
    from_: str = Field(alias="from")
    to: str
    start: NonNegative
    end: NonNegative
    bytes: NonNegative


class SliceTransferEntry(TransferEntry):
    inputs: Inputs


class DeviceEntry(ReadBackSchema):
    name: str
    busy: NonNegative
    ops: Count
    memory: NonNegative
    capacity: NonNegative | None


class _Manifest(ReadBackSchema):
    """What both objectives' ``manifest.json`` (``onnxpart.schedule-manifest/1``) hold."""

    model: ModelRef
    method: str
    makespan: NonNegative
    pieces: list[dict[str, Any]]
    devices: list[DeviceEntry]


class LatencyManifest(_Manifest):
    """``--objective latency``'s manifest (:func:`onnxpart.schedule.emit.manifest`)."""

    objective: Literal["latency"]
    order: list[str]
    ops: list[OpEntry]
    transfers: list[TransferEntry]


class ThroughputManifest(_Manifest):
    """``--objective throughput``'s (:func:`onnxpart.schedule.emit_batch.manifest`): one entry per slice."""

    objective: Literal["throughput"]
    batch: Annotated[int, Field(ge=1)]
    throughput: NonNegative
    ops: list[SliceEntry]
    transfers: list[SliceTransferEntry]


class _Options(ReadBackSchema):
    max_pieces: Annotated[int, Field(ge=1)] | None = None


class CertificateDetails(ReadBackSchema):
    """The certificate's ``details`` the instance hash depends on (``--max-pieces``)."""

    options: _Options = Field(default_factory=_Options)


#: how the diff names the entries of the manifest's lists (a throughput entry by its device or inputs too)
ENTITIES = {
    "ops": lambda e: f"ops[{e.get('name')!r}" + (f"@{e.get('device')}" if "inputs" in e else "") + "]",
    "transfers": lambda t: (f"transfers['{t.get('src_op')}→{t.get('dst_op')} {t.get('from')}→{t.get('to')}"
                            + (f" inputs {t['inputs']}" if "inputs" in t else "") + "']"),
    "devices": lambda d: f"devices[{d.get('name')!r}]",
}


@dataclass
class CertificateCheck:
    upper_bound: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_certificate(inst: Instance, graph, manifest: Any, cert: Certificate, model_sha256: str | None,
                      where: str, onnx_input: bool) -> CertificateCheck:
    """Re-check a latency folder (module docstring): ``manifest`` read from ``where``; ``graph`` is the
    OpGraph ``inst`` was built from; ``onnx_input`` says whether piece files were written."""
    from onnxpart.schedule import Solution, emit
    from onnxpart.schedule.pieces import later_reads, piece_of, pieces
    from onnxpart.schedule.simulator import Schedule, simulate, transfers_of, validate

    checked = read_as(LatencyManifest, manifest, where)
    problems = hash_problems(cert, emit.certificate_hash(inst, model_sha256, _max_pieces(cert, where)),
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
    parts = pieces(mapping, order)
    files = {p.index: emit.piece_file(p, inst) for p in parts} if onnx_input else {}
    expected = emit.manifest(Solution(inst, sched, checked.method), sched, parts, graph, checked.model.path,
                             model_sha256, files)
    problems += differences(manifest, expected, ENTITIES)
    problems += later_reads(inst, piece_of(inst, parts))
    problems += mismatch("certificate upper bound", cert.upper_bound, sched.makespan)
    formulas = {"critical-path": _bounds.critical_path_bound(inst).value, "work": _bounds.work_bound(inst).value,
                "device-path": _bounds.device_path_bound(inst).value}
    problems += _formula_problems(cert, formulas)
    return CertificateCheck(sched.makespan, problems)


def _max_pieces(cert: Certificate, where: str) -> int | None:
    """The ``--max-pieces`` the certificate was made with (part of its instance hash)."""
    details = read_as(CertificateDetails, cert.details, f"{Path(where).with_name('certificate.json')}: details")
    return details.options.max_pieces


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


def _formula_problems(cert: Certificate, formulas: dict[str, float]) -> list[str]:
    """Each closed-form bound of the certificate re-derived."""
    return [p for b in cert.lower_bounds if b.method in formulas
            for p in mismatch(f"{b.method} bound", b.value, formulas[b.method])]


# ------------------------------------------------------------------------------------- throughput
def check_batch_certificate(inst: Instance, graph, manifest: Any, cert: Certificate, model_sha256: str | None,
                            where: str, onnx_input: bool, batch_axis: Callable[[], Any]) -> CertificateCheck:
    """Re-check an ``--objective throughput`` folder: every slice of ``ops[]`` read back into a batched
    schedule, validated from scratch (:func:`onnxpart.schedule.batch.validate_batch`: (3.4), (3.5),
    transfers per overlapping input range, no overlap, memory), then every field recomputed from it —
    ``transfers[]``, ``pieces[]`` (:mod:`onnxpart.schedule.batch_pieces`; ``batch_axis()`` gives the
    pieces' axis for ONNX input), the devices, the batch makespan and throughput — and the critical-path
    formula and the instance hash checked."""
    from onnxpart.schedule import Solution, batch_pieces, emit, emit_batch
    from onnxpart.schedule.batch import critical_path_bound, validate_batch

    checked = read_as(ThroughputManifest, manifest, where)
    expected_hash = emit_batch.certificate_hash(inst, model_sha256, checked.batch, _max_pieces(cert, where))
    problems = hash_problems(cert, expected_hash, checked.model, model_sha256, "costs, system or batch")
    sched = _read_slices(inst, checked, problems)
    if sched is None:
        return CertificateCheck(float("nan"), problems)
    problems += validate_batch(inst, sched)
    parts = batch_pieces.pieces(inst, sched)
    files = {p.index: emit.piece_file(p, inst) for p in parts} if onnx_input else {}
    expected = emit_batch.manifest(Solution(inst, sched, checked.method), sched, parts, graph, checked.model.path,
                                   model_sha256, files, batch_axis() if onnx_input else None)
    problems += differences(manifest, expected, ENTITIES)
    problems += batch_pieces.later_reads(inst, sched, parts)
    problems += mismatch("certificate upper bound", cert.upper_bound, sched.makespan)
    problems += _formula_problems(cert, {"critical-path": critical_path_bound(inst, sched.batch).value})
    return CertificateCheck(sched.makespan, problems)


def _read_slices(inst: Instance, manifest: ThroughputManifest, problems: list[str]):
    """The manifest's slices as a :class:`~onnxpart.schedule.batch.BatchSchedule` (None, with
    ``problems``, when they name unknown ops or devices, list a slice twice, disagree on a slice's
    ``batch``/``input``/``inputs``, or do not tile each op's batch in device order — constraint 3.4)."""
    from onnxpart.schedule.batch import BatchSchedule

    where = {name: i for i, name in enumerate(inst.op_names)}
    devices = {name: u for u, name in enumerate(inst.device_names)}
    splits = [[0] * inst.k for _ in range(inst.n)]
    start, end, order, listed = {}, {}, [], {}
    found = []
    for entry in manifest.ops:
        name = f"ops[{entry.name!r}@{entry.device}]"
        if entry.name not in where or entry.device not in devices:
            found.append(f"{name}: the model has no such op or the system no such device")
            continue
        key = (where[entry.name], devices[entry.device])
        lo, hi = entry.inputs
        if key in listed:
            found.append(f"{name} is listed twice")
        elif not lo < hi <= manifest.batch:
            found.append(f"{name}: inputs {entry.inputs} are not a range of the batch's {manifest.batch} inputs")
        elif entry.batch != hi - lo or entry.input != lo:
            found.append(f"{name}: batch {entry.batch} and input {entry.input} disagree with inputs {entry.inputs}")
        else:
            splits[key[0]][key[1]] = hi - lo
            start[key], end[key], listed[key] = entry.start, entry.end, (lo, hi)
            order.append(key)
    if not found:
        found += _untiled(inst, manifest.batch, splits, listed)[:1]
    problems += found
    return None if found else BatchSchedule(manifest.batch, [tuple(s) for s in splits], start, end, order)


def _untiled(inst: Instance, batch: int, splits: list[list[int]], listed: dict) -> list[str]:
    """The ops whose slices do not split the batch into consecutive input ranges in device order (3.4)."""
    from onnxpart.schedule.batch import ranges

    problems = []
    for i, split in enumerate(splits):
        covered = [lohi for (j, _), lohi in listed.items() if j == i]
        missing = sorted(set(range(batch)) - {x for lo, hi in covered for x in range(lo, hi)})
        if missing:
            problems.append(f"ops[{inst.op_names[i]!r}]: the slices of inputs {missing} are missing")
        elif sum(split) != batch or any(ranges(tuple(split))[u] != listed[(i, u)] for u in range(inst.k) if split[u]):
            problems.append(f"ops[{inst.op_names[i]!r}]: the slices are not consecutive input ranges in device order")
    return problems
