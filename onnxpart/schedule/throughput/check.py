"""Checking a throughput output folder without trusting the code that made it (``--check-certificate``).

``manifest.json`` is read through its schema (:class:`ThroughputManifest`) and checked to be made from
the model given and the certificate for this instance (objective and batch included). Every slice of
``ops[]`` is read back into a batched schedule — each op's slices tiling its batch in device order
(3.4) — and validated from scratch (:func:`.simulator.validate`: (3.5), transfers per overlapping input
range, no overlap, memory 3.7); then every field is recomputed from it — ``transfers[]``, ``pieces[]``
(:mod:`.pieces`), the devices, the batch makespan and throughput — and the certificate's upper bound and
its critical-path formula checked (:mod:`onnxpart.schedule.common.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from onnxpart.certificate import Certificate
from onnxpart.certificate_check import differences, hash_problems
from onnxpart.schedule.common.check import (ENTITIES, CertificateCheck, Manifest, OpEntry, TransferEntry,
                                            max_pieces)
from onnxpart.schedule.common.emit import piece_file
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.solution import Solution
from onnxpart.schedule.throughput import emit
from onnxpart.schedule.throughput.bounds import critical_path_bound
from onnxpart.schedule.throughput.model import ranges
from onnxpart.schedule.throughput.pieces import later_reads, pieces
from onnxpart.schedule.throughput.simulator import BatchSchedule, validate
from onnxpart.units import format_seconds
from onnxpart.validate import Count, NonNegative, validate as read_as

#: ``[lo, hi)``: a range of the batch's inputs
Inputs = Annotated[list[Count], Field(min_length=2, max_length=2)]


class SliceEntry(OpEntry):
    batch: Count
    input: Count
    inputs: Inputs


class SliceTransferEntry(TransferEntry):
    inputs: Inputs


class ThroughputManifest(Manifest):
    """``--objective throughput``'s (:func:`onnxpart.schedule.throughput.emit.manifest`): one entry per slice."""

    objective: Literal["throughput"]
    batch: Annotated[int, Field(ge=1)]
    throughput: NonNegative
    ops: list[SliceEntry]
    transfers: list[SliceTransferEntry]


def check_certificate(inst: Instance, graph, manifest: Any, cert: Certificate, model_sha256: str | None,
                      where: str, onnx_input: bool, axis: Callable[[], Any]) -> CertificateCheck:
    """Re-check an ``--objective throughput`` folder (module docstring); ``axis()`` gives the pieces' batch
    axis for ONNX input."""
    checked = read_as(ThroughputManifest, manifest, where)
    expected_hash = emit.certificate_hash(inst, model_sha256, checked.batch, max_pieces(cert, where))
    problems = hash_problems(cert, expected_hash, checked.model, model_sha256, "costs, system or batch")
    sched = _read_slices(inst, checked, problems)
    if sched is None:
        return CertificateCheck(float("nan"), problems)
    problems += validate(inst, sched)
    parts = pieces(inst, sched)
    files = {p.index: piece_file(p, inst) for p in parts} if onnx_input else {}
    expected = emit.manifest(Solution(inst, sched, checked.method), sched, parts, graph, checked.model.path,
                             model_sha256, files, axis() if onnx_input else None)
    problems += differences(manifest, expected, ENTITIES)
    problems += later_reads(inst, sched, parts)
    problems += cert.check(sched.makespan, {"critical-path": critical_path_bound(inst, sched.batch).value})
    return CertificateCheck(sched.makespan, problems)


def _read_slices(inst: Instance, manifest: ThroughputManifest, problems: list[str]):
    """The manifest's slices as a :class:`~.simulator.BatchSchedule` (None, with
    ``problems``, when they name unknown ops or devices, list a slice twice, disagree on a slice's
    ``batch``/``input``/``inputs``, or do not tile each op's batch in device order — constraint 3.4)."""
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
    problems = []
    for i, split in enumerate(splits):
        covered = [lohi for (j, _), lohi in listed.items() if j == i]
        missing = sorted(set(range(batch)) - {x for lo, hi in covered for x in range(lo, hi)})
        if missing:
            problems.append(f"ops[{inst.op_names[i]!r}]: the slices of inputs {missing} are missing")
        elif sum(split) != batch or any(ranges(tuple(split))[u] != listed[(i, u)] for u in range(inst.k) if split[u]):
            problems.append(f"ops[{inst.op_names[i]!r}]: the slices are not consecutive input ranges in device order")
    return problems


def ok_line(upper_bound: float) -> str:
    """What ``--check-certificate`` prints when the folder checks out."""
    return (f"certificate ok: batch makespan {format_seconds(upper_bound)} validated slice by slice from the "
            "manifest, every transfer, piece and device recomputed; every lower bound is at most it")
