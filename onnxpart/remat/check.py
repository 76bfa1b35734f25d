"""Checking a rematerialization without trusting the code that made it (``--check-certificate``):
sequence.json read through its schema (:class:`SequenceSchema`), re-simulated on the model and every field
of it recomputed (:func:`check_certificate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxpart.certificate import instance_hash
from onnxpart.certificate_check import ModelRef, differences, hash_problems
from onnxpart.remat.emit import sequence_payload
from onnxpart.remat.model import build_instance
from onnxpart.remat.sequence import InvalidSequence, baseline, simulate
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate


class EventSchema(ReadBackSchema):
    event: Count
    op: str
    recompute: Count
    duration: NonNegative
    memory_bytes: NonNegative


class SequenceSchema(ReadBackSchema):
    """``sequence.json`` (``onnxpart.remat.sequence/1``) as :func:`onnxpart.remat.emit.sequence_payload` writes it."""

    model: ModelRef
    graph: str
    method: str
    budget_bytes: Count
    baseline_peak_bytes: NonNegative
    peak_bytes: NonNegative
    peak_event: Count
    base_duration: NonNegative
    duration: NonNegative
    tdi: float
    recomputations: Count
    events: list[EventSchema]


class RematDetails(ReadBackSchema):
    """The certificate's ``details`` the instance hash depends on."""

    include_params: bool = False
    instance_order: list[Count] | None = None  # --order minmem/free: the order solved with


def check_certificate(graph, sequence: Any, certificate, model_sha256: str | None, where: str) -> list[str]:
    """``--check-certificate``: read ``sequence.json`` (from ``where``) through :class:`SequenceSchema`,
    check it was made for this model (its ``model.sha256``, the certificate's instance hash), re-simulate
    its events on ``graph`` without trusting the solver — every op computed, no read before a copy
    exists, the peak within the budget — and recompute every field of the file from that simulation (each
    event's op, copy, duration and memory; the peak, its event, the durations, TDI, recomputations, the
    file order's peak), naming the first that differs; the certificate's upper bound must be the
    duration and its ``no-recompute`` bound the sum of the op durations. Returns the problems found
    (empty: the certificate holds)."""
    checked = validate(SequenceSchema, sequence, where)
    details = validate(RematDetails, certificate.details, f"{Path(where).with_name('certificate.json')}: details")
    instance = build_instance(graph, details.include_params)
    budget = checked.budget_bytes
    order = tuple(instance.order if details.instance_order is None else details.instance_order)
    expected_hash = instance_hash(model_sha256 or instance.name, instance.durations, instance.value_sizes, order,
                                  budget, instance.constant_bytes)
    problems = hash_problems(certificate, expected_hash, checked.model, model_sha256, "costs or budget")
    where_op = {name: i for i, name in enumerate(instance.node_names[:instance.n_ops])}
    unknown = [e.op for e in checked.events if e.op not in where_op]
    if unknown:
        return problems + [f"sequence.json names op {unknown[0]!r}, which the model does not have"]
    try:
        profile = simulate(instance, [where_op[e.op] for e in checked.events])
    except InvalidSequence as exc:
        return problems + [f"the sequence is not valid: {exc}"]
    if profile.peak > budget:
        problems.append(f"the sequence peaks at {profile.peak:,.0f} B, over the budget {budget:,} B")
    expected = sequence_payload(graph, checked.model.path, profile, budget, baseline(instance), checked.method)
    problems += differences(sequence, expected)
    return problems + certificate.check(profile.duration, {"no-recompute": instance.base_duration})
