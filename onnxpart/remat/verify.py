"""``--verify``: run remat.onnx in onnxruntime the way it must be run (priority-based execution order,
graph optimizations off, memory-pattern planner off), compare its outputs with the original model's on
seeded random inputs (at the costed dims, and at twice each dynamic dim: :mod:`onnxpart.verify`), and
read onnxruntime's own measured memory peak.

onnxruntime's profiler records, per kernel, ``mem_in_use_peak``: the CPU arena's bytes in use (activations,
the weights that nodes such as ``ConstantOfShape`` build at run time, and kernel scratch space; not the
caller's input buffers). Its maximum is reported next to the predicted activation peak; the two differ
by those extras and the arena's alignment, so the meaningful comparison is against the original model
run the same way.
"""

from __future__ import annotations

from typing import Any

from onnxpart import runtime
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
