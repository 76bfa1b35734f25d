"""remat folders: ``remat.onnx`` against the original model, both run in file order with the memory-pattern
planner off (the session options remat.onnx must run with: :data:`onnxpart.remat.emit.SESSION_OPTIONS`).

Rows: the original's time against ``base_duration`` and remat.onnx's against ``duration``
(sequence.json), the measured duration increase against the predicted one (a ratio), and each model's peak
as onnxruntime's profiler measures it (the CPU arena's ``mem_in_use_peak``:
:func:`onnxpart.remat.verify.measured_run`) against the predicted activation peaks. The arena also holds
what the prediction leaves out (weights built at run time, kernel scratch), so the peaks' *ratio* —
remat.onnx's peak over the original's, measured and predicted — is the comparison that means something.
"""

from __future__ import annotations

import functools

from onnxpart.bench.folder import RematSequence, model_file, read_schema
from onnxpart.bench.report import Row
from onnxpart.bench.sessions import busy_neighbours, graph_feeds, make_session
from onnxpart.bench.timing import time_rounds


def bench_remat(folder, options) -> tuple[list[Row], dict]:
    seq = read_schema(RematSequence, folder.manifest, folder.path / "sequence.json")
    original = model_file(folder.model_path, folder.model_sha256, options.model, needed=True)
    remat = folder.file("remat.onnx")
    peaks, calls = {}, []
    feeds = None
    for name, path in (("original", original), ("remat", remat)):
        session = make_session(path, options.settings, memory_pattern=False)
        feeds = feeds or graph_feeds(session, options.settings, {}, path.name)
        calls.append(functools.partial(session.run, None, feeds))
        peaks[name] = _peak(path, feeds, options.settings.provider)
    with busy_neighbours(original, options.settings, options.beside):
        timed = time_rounds(calls, options.warmup, options.runs, options.min_time)
    timings = dict(zip(("original", "remat"), timed))
    increase = timings["remat"].median / timings["original"].median
    rows = [Row("original", "original", seq.base_duration, timings["original"].median, timings["original"],
                file=str(original)),
            Row("remat.onnx", "remat", seq.duration, timings["remat"].median, timings["remat"], file="remat.onnx"),
            Row("duration increase", "remat-duration-ratio", seq.duration / seq.base_duration if seq.base_duration
                else None, increase, quantity="ratio"),
            Row("original peak", "original-peak", seq.baseline_peak_bytes, peaks["original"], quantity="bytes"),
            Row("remat.onnx peak", "remat-peak", seq.peak_bytes, peaks["remat"], quantity="bytes")]
    measured_ratio = peaks["remat"] / peaks["original"] if peaks["remat"] and peaks["original"] else None
    rows.append(Row("peak ratio", "remat-peak-ratio", seq.peak_bytes / seq.baseline_peak_bytes
                    if seq.baseline_peak_bytes else None, measured_ratio, quantity="ratio"))
    return rows, {"duration_increase_predicted": rows[2].predicted, "duration_increase_measured": increase,
                  "peak_ratio_predicted": rows[-1].predicted, "peak_ratio_measured": measured_ratio,
                  "budget_bytes": seq.budget_bytes}


def _peak(path, feeds, provider: str):
    """onnxruntime's measured arena peak of one run (CPU only: the profiler's memory records are the CPU
    arena's); None on another provider."""
    from onnxpart import runtime
    from onnxpart.remat.verify import measured_run

    if provider != "CPUExecutionProvider":
        return None
    with runtime.user_model(path):
        return measured_run(str(path), feeds)[1]
