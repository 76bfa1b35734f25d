"""``--verify``: run remat.onnx in onnxruntime the way it must be run (priority-based execution order,
graph optimizations off, memory-pattern planner off), compare its outputs with the original model's on
seeded random inputs, and read onnxruntime's own measured memory peak.

onnxruntime's profiler records, per kernel, ``mem_in_use_peak``: the CPU arena's bytes in use (activations,
the weights that nodes such as ``ConstantOfShape`` build at run time, and kernel scratch space; not the
caller's input buffers). Its maximum is reported next to the predicted activation peak; the two differ
by those extras and the arena's alignment, so the meaningful comparison is against the original model
run the same way.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass

import onnx

from onnxpart import runtime


@dataclass(frozen=True)
class VerifyReport:
    outputs: int
    max_abs_error: float
    seed: int
    ort_peak_bytes: float | None  # remat.onnx, measured by onnxruntime
    ort_original_peak_bytes: float | None  # the original, same session options
    predicted_peak_bytes: float  # activations by the simulator (what the budget bounds)
    session_options: str

    def to_dict(self) -> dict:
        return asdict(self)


def measured_run(model: onnx.ModelProto, feeds: dict) -> tuple[dict, float | None]:
    """Outputs and onnxruntime's peak arena bytes for one run in file order (profiling on)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="onnxpart-ort-") as folder:
        options = runtime.session_options(keep_order=True, memory_pattern=False, profile=True)
        options.profile_file_prefix = os.path.join(folder, "profile")
        session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                       providers=["CPUExecutionProvider"])
        wanted = {arg.name for arg in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
        with open(session.end_profiling()) as handle:
            events = json.load(handle)
    peaks = [float(e["args"]["mem_in_use_peak"]) for e in events
             if e.get("cat") == "Node" and "mem_in_use_peak" in e.get("args", {})]
    return dict(zip(names, values)), (max(peaks) if peaks else None)


def verify(original: onnx.ModelProto, remat: onnx.ModelProto, predicted_peak: float, seed: int = 0) -> VerifyReport:
    from onnxpart.remat.emit import SESSION_OPTIONS

    feeds = runtime.random_inputs(runtime.make_session(original), seed=seed)
    reference, original_peak = measured_run(original, feeds)
    outputs, peak = measured_run(remat, feeds)
    return VerifyReport(
        outputs=len(reference),
        max_abs_error=runtime.max_abs_error(reference, outputs),
        seed=seed,
        ort_peak_bytes=peak,
        ort_original_peak_bytes=original_peak,
        predicted_peak_bytes=predicted_peak,
        session_options=", ".join(f"{k}={v}" for k, v in SESSION_OPTIONS.items()),
    )
