"""Checking a schedule's output folder without trusting the code that made it (``--check-certificate``).

:func:`check_certificate` rebuilds the mapping and the execution order from ``manifest.json``'s plain
fields, re-simulates them with :func:`onnxpart.schedule.simulator.simulate` under the thesis's cost
semantics (Ghannane 2023, Section 2.3; ../shared/papers/heterogeneous-scheduling-milp-split.txt),
validates the result independently, and checks: every op's start/end and the makespan equal the
manifest's, the certificate's upper bound equals the makespan, every lower bound is at most it, the
closed-form bounds (critical path, work, device path) re-derive, the pieces are the device-contiguous
runs of the order and no piece reads a later piece's tensor, and the instance hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.certificate import Certificate, above, same_value
from onnxpart.schedule import bounds as _bounds
from onnxpart.schedule.emit import certificate_hash
from onnxpart.schedule.model import Instance
from onnxpart.schedule.pieces import later_reads, piece_of, pieces
from onnxpart.schedule.simulator import simulate, validate


@dataclass
class CertificateCheck:
    upper_bound: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_certificate(inst: Instance, manifest: dict[str, Any], cert: Certificate,
                      model_sha256: str | None) -> CertificateCheck:
    """Re-simulate the manifest's mapping and order and re-check the certificate (module docstring)."""
    problems: list[str] = []
    mapping, order = _read_mapping(inst, manifest, problems)
    if problems:
        return CertificateCheck(float("nan"), problems)
    try:
        sched = simulate(inst, mapping, order)
    except ValueError as exc:
        return CertificateCheck(float("nan"), [f"the manifest's schedule is infeasible: {exc}"])
    problems += validate(inst, sched)
    upper = sched.makespan
    by_name = {entry["name"]: entry for entry in manifest["ops"]}
    for i in range(inst.n):
        entry = by_name[inst.op_names[i]]
        if not (same_value(entry["start"], sched.start[i]) and same_value(entry["end"], sched.end[i])):
            problems.append(f"op {inst.op_names[i]}: manifest says [{entry['start']}, {entry['end']}], "
                            f"re-simulated [{sched.start[i]}, {sched.end[i]}]")
            break
    if not same_value(float(manifest["makespan"]), upper):
        problems.append(f"manifest makespan {manifest['makespan']} != re-simulated {upper}")
    if not same_value(cert.upper_bound, upper):
        problems.append(f"certificate upper bound {cert.upper_bound} != re-simulated makespan {upper}")
    problems += _check_bounds(inst, cert, upper)
    problems += _check_pieces(inst, manifest, mapping, order)
    options = cert.details.get("options", {}) if isinstance(cert.details, dict) else {}
    if cert.instance_sha256 != certificate_hash(inst, model_sha256, options.get("max_pieces")):
        problems.append("instance sha256 differs: the certificate was made for another model, costs or system")
    return CertificateCheck(upper, problems)


def _read_mapping(inst: Instance, manifest: dict[str, Any], problems: list[str]) -> tuple[np.ndarray, list[int]]:
    """(mapping, order) from the manifest's ``ops`` and ``order``; names checked against the instance."""
    where = {name: i for i, name in enumerate(inst.op_names)}
    devices = {name: u for u, name in enumerate(inst.device_names)}
    mapping = np.full(inst.n, -1, dtype=np.int64)
    try:
        for entry in manifest["ops"]:
            if entry["name"] not in where:
                problems.append(f"manifest lists op {entry['name']!r}, which the model does not have")
            elif entry["device"] not in devices:
                problems.append(f"op {entry['name']!r} is on {entry['device']!r}, which the system does not have")
            else:
                mapping[where[entry["name"]]] = devices[entry["device"]]
        order = [where[name] for name in manifest["order"] if name in where]
    except (KeyError, TypeError) as exc:
        problems.append(f"manifest is not an onnxpart schedule manifest: {exc}")
        return mapping, []
    if (mapping < 0).any():
        problems.append(f"{int((mapping < 0).sum())} ops have no device in the manifest")
    if sorted(order) != list(range(inst.n)):
        problems.append("the manifest's order does not list every op once")
    return mapping, order


def _check_bounds(inst: Instance, cert: Certificate, upper: float) -> list[str]:
    problems = []
    formulas = {"critical-path": _bounds.critical_path_bound(inst).value, "work": _bounds.work_bound(inst).value,
                "device-path": _bounds.device_path_bound(inst).value}
    for bound in cert.lower_bounds:
        if bound.method in formulas and bound.value is not None and not same_value(bound.value, formulas[bound.method]):
            problems.append(f"{bound.method} bound {bound.value} != recomputed {formulas[bound.method]}")
        if bound.value is not None and above(bound.value, upper):
            problems.append(f"lower bound {bound.method} = {bound.value} exceeds the makespan {upper}")
    return problems


def _check_pieces(inst: Instance, manifest: dict[str, Any], mapping: np.ndarray, order: list[int]) -> list[str]:
    runs = pieces(mapping, order)
    listed = [list(p.get("ops", [])) for p in manifest.get("pieces", [])]
    if listed != [[inst.op_names[i] for i in p.ops] for p in runs]:
        return ["the manifest's pieces are not the device-contiguous runs of its order"]
    return later_reads(inst, piece_of(inst, runs))


# ------------------------------------------------------------------------------------- throughput
def check_batch_certificate(inst: Instance, manifest: dict[str, Any], cert: Certificate,
                            model_sha256: str | None) -> CertificateCheck:
    """``--check-certificate`` for an ``--objective throughput`` folder: rebuild every slice from the
    manifest's ``ops[]``, validate the batched schedule from scratch (:func:`onnxpart.schedule.batch.validate_batch`:
    (3.4), (3.5), transfers per overlapping input range, no overlap, memory), check ``transfers[]``
    against the recomputed transfers (:func:`_check_transfers`) and ``pieces[]`` against the pieces of
    the slices (:func:`_check_batch_pieces`), and check the batch makespan and throughput, the
    certificate's upper bound, every lower bound against it, the critical-path formula and the instance
    hash."""
    from onnxpart.schedule import batch as B
    from onnxpart.schedule.emit_batch import certificate_hash as batch_hash

    problems: list[str] = []
    sched = _read_slices(inst, manifest, problems)
    if sched is None:
        return CertificateCheck(float("nan"), problems)
    problems += B.validate_batch(inst, sched)
    problems += _check_transfers(inst, manifest, sched)
    problems += _check_batch_pieces(inst, manifest, sched)
    upper = sched.makespan
    for name, value, recomputed in (("manifest makespan", manifest.get("makespan"), upper),
                                    ("manifest throughput", manifest.get("throughput"), sched.throughput),
                                    ("certificate upper bound", cert.upper_bound, upper)):
        if not isinstance(value, (int, float)) or not same_value(float(value), recomputed):
            problems.append(f"{name} {value} != recomputed {recomputed}")
    path = B.critical_path_bound(inst, sched.batch).value
    for bound in cert.lower_bounds:
        if bound.method == "critical-path" and bound.value is not None and not same_value(bound.value, path):
            problems.append(f"critical-path bound {bound.value} != recomputed {path}")
        if bound.value is not None and above(bound.value, upper):
            problems.append(f"lower bound {bound.method} = {bound.value} exceeds the batch makespan {upper}")
    options = cert.details.get("options", {}) if isinstance(cert.details, dict) else {}
    if cert.instance_sha256 != batch_hash(inst, model_sha256, sched.batch, options.get("max_pieces")):
        problems.append("instance sha256 differs: the certificate was made for another model, costs, system or batch")
    return CertificateCheck(upper, problems)


def _read_slices(inst: Instance, manifest: dict[str, Any], problems: list[str]):
    """The manifest's ``ops[]`` (one entry per slice) as a :class:`~onnxpart.schedule.batch.BatchSchedule`
    (None, with ``problems``, when they name unknown ops or devices, miss an op, disagree on a slice's
    ``batch``/``input``/``inputs``, or do not tile each op's batch in device order — constraint 3.4)."""
    from onnxpart.schedule.batch import BatchSchedule, ranges

    where = {name: i for i, name in enumerate(inst.op_names)}
    devices = {name: u for u, name in enumerate(inst.device_names)}
    splits = [[0] * inst.k for _ in range(inst.n)]
    start, end, order, listed = {}, {}, [], {}
    try:
        batch = int(manifest["batch"])
        for entry in manifest["ops"]:
            if entry["name"] not in where or entry["device"] not in devices:
                problems.append(f"slice of {entry['name']!r} on {entry['device']!r}: unknown op or device")
                continue
            key = (where[entry["name"]], devices[entry["device"]])
            lo, hi = (int(v) for v in entry["inputs"])
            if int(entry["batch"]) != hi - lo or int(entry["input"]) != lo:
                problems.append(f"slice of {entry['name']} on {entry['device']}: batch/input disagree with inputs")
            splits[key[0]][key[1]] = hi - lo
            start[key], end[key], listed[key] = float(entry["start"]), float(entry["end"]), (lo, hi)
            order.append(key)
    except (KeyError, TypeError, ValueError) as exc:
        problems.append(f"manifest is not an onnxpart throughput manifest: {exc}")
        return None
    tiled = all(ranges(tuple(splits[i]))[u] == lohi for (i, u), lohi in listed.items())
    if not tiled or any(sum(s) != batch for s in splits):
        problems.append("the slices do not split every op's batch into consecutive input ranges in device order")
    return None if problems else BatchSchedule(batch, [tuple(s) for s in splits], start, end, order)


def _check_transfers(inst: Instance, manifest: dict[str, Any], sched) -> list[str]:
    """Every listed transfer is one the slices need, with the recomputed start (producer slice end), end
    (start + :meth:`Instance.delay_count`, as :func:`~onnxpart.schedule.batch.validate_batch` charges)
    and bytes; none needed is missing; none is listed twice (precedence per input with transfers, 3.3)."""
    from onnxpart.schedule.batch import slice_transfers

    names, ops = inst.device_names, inst.op_names
    want = {(ops[t.src[0]], ops[t.dst[0]], names[t.src[1]], names[t.dst[1]], t.inputs): t
            for t in slice_transfers(inst, sched)}
    problems, seen = [], set()
    try:
        for entry in manifest["transfers"]:
            key = (entry["src_op"], entry["dst_op"], entry["from"], entry["to"], tuple(int(v) for v in entry["inputs"]))
            t = want.get(key)
            if t is None or key in seen:
                problems.append(f"transfer {key[0]}→{key[1]} {key[2]}→{key[3]} inputs {list(key[4])}: "
                                + ("listed twice" if t else "no slice pair needs it"))
            elif not all(same_value(float(entry[f]), getattr(t, f)) for f in ("start", "end", "bytes")):
                problems.append(f"transfer {key[0]}→{key[1]} {key[2]}→{key[3]}: manifest says "
                                f"[{entry['start']}, {entry['end']}] {entry['bytes']} B, recomputed "
                                f"[{t.start}, {t.end}] {t.bytes} B")
            seen.add(key)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"manifest is not an onnxpart throughput manifest: transfers: {exc}"]
    problems += [f"transfer {k[0]}→{k[1]} {k[2]}→{k[3]} inputs {list(k[4])} is missing from the manifest"
                 for k in want if k not in seen]
    return problems


def _check_batch_pieces(inst: Instance, manifest: dict[str, Any], sched) -> list[str]:
    """``pieces[]`` are the pieces :func:`onnxpart.schedule.batch_pieces.pieces` makes of the slices (ops,
    device, ``slice``, in order), and none reads a later piece."""
    from onnxpart.schedule.batch_pieces import later_reads, pieces

    runs = pieces(inst, sched)
    want = [([inst.op_names[i] for i in p.ops], inst.device_names[p.device], list(p.inputs)) for p in runs]
    try:
        listed = [(list(p["ops"]), p["device"], [int(v) for v in p["slice"]]) for p in manifest["pieces"]]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"manifest is not an onnxpart throughput manifest: pieces: {exc}"]
    if listed != want:
        return ["the manifest's pieces are not the lane runs of its slices in execution order"]
    return later_reads(inst, sched, runs)
