"""``--verify``: run remat.onnx in onnxruntime the way it must be run (priority-based execution order,
graph optimizations off, memory-pattern planner off), compare its outputs with the original model's on
seeded random inputs (at the costed dims, and at twice each dynamic dim: :mod:`onnxpart.verify`), and
read onnxruntime's own measured memory peak.

onnxruntime's profiler records, per kernel, ``mem_in_use_peak``: the CPU arena's bytes in use (activations,
the weights that nodes such as ``ConstantOfShape`` build at run time, and kernel scratch space; not the
caller's input buffers). Its maximum is reported next to the predicted activation peak; the two differ
by those extras and the arena's alignment, so the meaningful comparison is against the original model
run the same way.

``--check-certificate`` (:func:`check_certificate`, :class:`SequenceSchema`): sequence.json re-simulated
on the model and every field of it recomputed, without trusting the solver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxpart import runtime
from onnxpart.certificate_check import ModelRef
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate
from onnxpart.verify import DEFAULT_TOLERANCE, VerifyReport, add_size, check_dims, reference_run

#: --verify notes a measured peak further than this fraction from the predicted one
MEMORY_AGREEMENT = 0.10


def measured_run(model, feeds: dict, folder=None) -> tuple[dict, float | None]:
    """Outputs and onnxruntime's peak arena bytes for one run in file order (profiling on); ``model`` is a
    file or an in-memory model whose external data is in ``folder``."""
    with runtime.profiling_session(model, folder, keep_order=True, memory_pattern=False) as (session, profile):
        wanted = {arg.name for arg in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
        events = profile()
    peaks = [float(e["args"]["mem_in_use_peak"]) for e in events
             if e.get("cat") == "Node" and "mem_in_use_peak" in e.get("args", {})]
    return dict(zip(names, values)), (max(peaks) if peaks else None)


def verify(reference, remat_path, predicted_peak: float, seed: int = 0,
           tolerance: float = DEFAULT_TOLERANCE, freeze: bool = False) -> dict[str, Any]:
    """Run ``remat_path`` against the original model ``reference`` (a LoadedModel) at every
    :func:`onnxpart.verify.check_dims` (``freeze``: ``--freeze-dims``, the costed dims only), and compare onnxruntime's measured arena peak with the plan's."""
    from onnxpart.remat.emit import SESSION_OPTIONS

    report = VerifyReport(seed=seed, tolerance=tolerance)
    memory: dict[str, Any] = {}
    count = 0
    with runtime.user_model(reference.path):
        original = runtime.make_session(reference.model, reference.folder)
    for dims in check_dims(reference, freeze):
        feeds, expected = reference_run(original, reference, dims, seed, report)
        if expected is None:
            continue
        outputs, peak = measured_run(remat_path, feeds)
        add_size(report, dims, runtime.compare(expected, outputs, tolerance))
        count = count or len(expected)
        if not memory:
            with runtime.user_model(reference.path):
                _, original_peak = measured_run(reference.model, feeds, reference.folder)
            memory = memory_check(predicted_peak, peak, original_peak)
    return {**report.to_dict(), "outputs": count, **memory,
            "session_options": ", ".join(f"{k}={v}" for k, v in SESSION_OPTIONS.items())}


def memory_check(predicted: float, measured: float | None, original: float | None) -> dict[str, Any]:
    """The measured arena peak beside the prediction, and a note when they differ by more than 10%."""
    out = {"predicted_peak_bytes": predicted, "ort_peak_bytes": measured, "ort_original_peak_bytes": original,
           "memory_note": None}
    if measured is not None and predicted > 0 and abs(measured - predicted) > MEMORY_AGREEMENT * predicted:
        out["memory_note"] = (f"onnxruntime's measured arena peak {measured:,.0f} B differs from the predicted "
                              f"activation peak {predicted:,.0f} B by {abs(measured / predicted - 1):.0%}: its arena "
                              "also holds weights built at run time, kernel scratch space and allocator rounding")
    return out


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
    from onnxpart.certificate import instance_hash
    from onnxpart.certificate_check import differences, hash_problems, mismatch
    from onnxpart.remat.emit import sequence_payload
    from onnxpart.remat.model import build_instance
    from onnxpart.remat.sequence import InvalidSequence, baseline, simulate

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
    problems += mismatch("certificate upper bound", certificate.upper_bound, profile.duration)
    for bound in certificate.lower_bounds:
        if bound.method == "no-recompute":
            problems += mismatch("no-recompute bound", bound.value, instance.base_duration)
    return problems
