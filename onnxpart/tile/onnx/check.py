"""``onnxpart tile --check-certificate``: a plan.json read back and recomputed from what it says.

The file is validated first (pydantic models of ``onnxpart.tile-plan/1``: the fields the check reads, with
their types; a list, an empty object, a wrong type or a missing field is one problem naming the field).
Then every value is recomputed from the plan's own statements, never re-derived from the algorithm names
alone:

* each tensor's ``layout`` must be one of its candidates on this mesh;
* each op's ``inputs``/``outputs`` slots (tensor and layout) must be those of the model's op, and their
  layouts exactly those of an algorithm the catalog offers that op, the one the plan names — a Softmax
  sharded along its own axis, or a slot layout changed by hand, names the op;
* each op's ``compute_seconds`` and ``seconds`` (its compute plus the reshardings between the stored
  layouts and its slots) and every entry of ``reshardings`` (tensor, from, to, op, slot, seconds) must be
  what those layouts cost: a resharding the plan runs but does not list, or lists but does not run, names
  its op and tensor;
* the totals (step time, one-device time), the certificate's upper bound (the recomputed step time) and
  closed-form bound (re-derived; :meth:`~onnxpart.certificate.Certificate.check`), its lower bounds (none above
  it) and ``--device-memory`` must agree.

Numbers compare by the one tolerance rule of :mod:`onnxpart.certificate` (:func:`~onnxpart.certificate.same_value`).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal, Optional

from pydantic import Field

from onnxpart.certificate import Certificate, above, instance_hash, same_value
from onnxpart.errors import UserError
from onnxpart.tile.onnx.build import parse_layout
from onnxpart.tile.onnx.emit import SCHEMA, instance_digest, reshardings
from onnxpart.tile.onnx.model import LayoutInstance, Plan
from onnxpart.validate import ReadBackSchema, validate

class Slot(ReadBackSchema):
    tensor: str
    layout: str


class TensorEntry(ReadBackSchema):
    name: str
    layout: str


class OpEntry(ReadBackSchema):
    name: str
    algorithm: str
    inputs: list[Slot]
    outputs: list[Slot]
    compute_seconds: float
    seconds: float


class ReshardingEntry(ReadBackSchema):
    tensor: str
    source: str = Field(alias="from")
    to: str
    op: Optional[str]
    slot: str
    seconds: float


class Totals(ReadBackSchema):
    step_time_s: float
    one_device_s: float


class PlanFile(ReadBackSchema):
    schema_: Literal[SCHEMA] = Field(alias="schema")
    outputs: Literal["gathered", "sharded"]
    tensors: list[TensorEntry]
    ops: list[OpEntry]
    reshardings: list[ReshardingEntry]
    totals: Totals


def parse_plan_file(payload) -> PlanFile:
    """plan.json -> :class:`PlanFile`; UserError naming the first fields that are missing or wrong."""
    return validate(PlanFile, payload, f"plan.json (an {SCHEMA} plan)")


def check_plan(inst: LayoutInstance, payload, cert: Certificate, model_sha: str | None) -> tuple[float | None, list[str]]:
    """Recompute the step time from plan.json's own statements (module docstring) and hold the certificate
    to it; -> (the recomputed step time, or None when the file does not describe a plan of this model;
    problems)."""
    problems = []
    if cert.instance_sha256 != instance_hash(model_sha, instance_digest(inst)):
        problems.append("the certificate is for another model, mesh or option set (instance hash differs)")
    try:
        read = parse_plan_file(payload)
        plan = _plan(inst, read)
    except UserError as exc:
        return None, problems + [str(exc)]
    if (read.outputs == "sharded") != inst.sharded_outputs:
        problems.append(f"plan.json's outputs are {read.outputs}, this run's "
                        f"{'sharded' if inst.sharded_outputs else 'gathered'} (--sharded-outputs)")
    problems += _ops(inst, read, plan) + _reshardings(inst, read, plan)
    value = inst.plan_cost(plan)
    problems += cert.check(value, {"tile-closed-form": inst.closed_form_bound()})
    if not _same(value, read.totals.step_time_s):
        problems.append(f"plan.json step time {read.totals.step_time_s} differs from the step time recomputed from "
                        f"plan.json, {value}")
    if not _same(inst.one_device, read.totals.one_device_s):
        problems.append(f"plan.json's one-device time {read.totals.one_device_s} differs from the model's, "
                        f"{inst.one_device}")
    lower = cert.best_lower_bound
    if lower is not None and above(lower, value):
        problems.append(f"the lower bound {lower} exceeds the recomputed step time {value}")
    if not inst.fits(plan.layouts):
        problems.append("the layouts exceed --device-memory")
    return value, problems


def _same(a: float, b) -> bool:
    """``b`` (read back) is a finite number equal to the recomputed ``a`` by the one tolerance rule
    (:func:`onnxpart.certificate.same_value`)."""
    return isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) and same_value(a, b)


def _plan(inst: LayoutInstance, read: PlanFile) -> Plan:
    """The plan's stored layouts and, per op, the algorithm whose slot layouts are the plan's (UserError
    naming the tensor or op that is not of this model, or whose slots no algorithm of the op has)."""
    axes = len(inst.mesh.shape)
    names = [t.name for t in read.tensors]
    if sorted(names) != sorted(t.name for t in inst.tensors):
        missing = sorted({t.name for t in inst.tensors} - set(names))
        extra = sorted(set(names) - {t.name for t in inst.tensors}) + [n for n, c in Counter(names).items() if c > 1]
        raise UserError(f"plan.json's tensors are not the model's: missing {missing[:3]}, unknown or repeated "
                        f"{extra[:3]}")
    layouts = {}
    for entry in read.tensors:
        layout = parse_layout(entry.layout, axes)
        if layout not in inst.tensor(entry.name).domain:
            raise UserError(f"tensor {entry.name}: layout {entry.layout} is not among its candidates "
                            f"({', '.join(map(str, inst.tensor(entry.name).domain))})")
        layouts[entry.name] = layout
    said, model = [o.name for o in read.ops], [op.name for op in inst.ops]
    if said != model:
        i = next((i for i, (a, b) in enumerate(zip(said, model)) if a != b), min(len(said), len(model)))
        raise UserError(f"plan.json's ops are not the model's, in its order: entry {i} is "
                        f"{said[i] if i < len(said) else 'missing'}, the model's {model[i] if i < len(model) else 'none'}")
    return Plan(layouts, {op.name: _choice(op, entry, axes) for op, entry in zip(inst.ops, read.ops)})


def _choice(op, entry: OpEntry, axes: int) -> int:
    """The index of the op's algorithm named ``entry.algorithm``, whose slot layouts must be the entry's."""
    if [s.tensor for s in entry.inputs] != list(op.inputs) or [s.tensor for s in entry.outputs] != list(op.outputs):
        raise UserError(f"op {op.name} ({op.op_type}): its slots name tensors {[s.tensor for s in entry.inputs]} -> "
                        f"{[s.tensor for s in entry.outputs]}, the model's op reads {list(op.inputs)} -> "
                        f"{list(op.outputs)}")
    slots = (tuple(parse_layout(s.layout, axes) for s in entry.inputs),
             tuple(parse_layout(s.layout, axes) for s in entry.outputs))
    offered = [c for c, choice in enumerate(op.choices) if (choice.inputs, choice.outputs) == slots]
    named = [c for c in offered if op.choices[c].name == entry.algorithm]
    if not named:
        said = f"{', '.join(map(str, slots[0]))} -> {', '.join(map(str, slots[1]))}"
        also = f" ({op.choices[offered[0]].name} does)" if offered else " (no algorithm of the catalog does)"
        raise UserError(f"op {op.name} ({op.op_type}): algorithm {entry.algorithm!r} does not read and write "
                        f"{said}{also}")
    return named[0]


def _ops(inst: LayoutInstance, read: PlanFile, plan: Plan) -> list[str]:
    problems = []
    for op, entry in zip(inst.ops, read.ops):
        c = plan.algorithms[op.name]
        for what, claimed, value in (("compute_seconds", entry.compute_seconds, op.choices[c].seconds),
                                     ("seconds", entry.seconds, inst.choice_cost(op, c, plan.layouts))):
            if not _same(value, claimed):
                problems.append(f"op {op.name} ({op.op_type}): {what} {claimed} differs from the recomputed {value}")
    return problems


def _reshardings(inst: LayoutInstance, read: PlanFile, plan: Plan) -> list[str]:
    """The reshardings the plan's layouts run against those it lists, by (tensor, from, to, op, slot)."""
    runs = {(r["tensor"], r["from"], r["to"], r["op"], r["slot"]): r["seconds"] for r in reshardings(inst, plan)}
    listed = {(r.tensor, r.source, r.to, r.op, r.slot): r.seconds for r in read.reshardings}
    problems = []
    for k in runs.keys() - listed.keys():
        problems.append(f"op {k[3] or '(final gather)'}: the resharding of {k[0]} {k[1]} -> {k[2]} ({k[4]}) that its "
                        "layouts need is missing from reshardings")
    for k in listed.keys() - runs.keys():
        problems.append(f"op {k[3] or '(final gather)'}: reshardings lists {k[0]} {k[1]} -> {k[2]} ({k[4]}), "
                        "which the plan's layouts do not run")
    for k in runs.keys() & listed.keys():
        if not _same(runs[k], listed[k]):
            problems.append(f"op {k[3] or '(final gather)'}: the resharding of {k[0]} {k[1]} -> {k[2]} is listed at "
                            f"{listed[k]} s, recomputed {runs[k]} s")
    if len(read.reshardings) != len(listed):
        problems.append("reshardings lists one resharding twice")
    return sorted(problems)
