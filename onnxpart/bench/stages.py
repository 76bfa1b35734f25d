"""partition and plan folders: each stage alone (:mod:`onnxpart.bench.chain`), then the real pipeline
(:mod:`onnxpart.bench.pipeline`, or Ray actors with ``--engine ray``: :mod:`onnxpart.bench.ray_engine`), each
against what the manifest predicts (:mod:`onnxpart.bench.plans`).

Rows: one ``stage`` row per stage file; ``pipeline-period`` (seconds per input at steady state, against the
predicted bottleneck), ``pipeline-latency`` (one input through the empty pipeline), ``pipeline-speed-up`` (a
ratio: one input at a time over the streamed period, measured in turns, against the predicted latency over
period) and ``one-worker-period`` (all stages in one worker, against Σ predicted stage times); one
``pipeline-stage`` row per stage: its worker's busy time per micro-batch while the pipeline streamed, against
the same prediction as the stage alone (the summary's ``pipeline_slowdown`` is the most a stage slowed beside
the others). The summary has the
bottleneck's measured / predicted ratio, whether the predicted bottleneck stage is the measured one, the worst
stage error, the pipeline's throughput against the prediction and against one worker, and its speed-up.
"""

from __future__ import annotations

import dataclasses

from onnxpart.bench.chain import run_chain
from onnxpart.bench.folder import Folder, Unit
from onnxpart.bench.plans import PipelinePrediction
from onnxpart.bench.report import Row
from onnxpart.bench.timing import Streamed, Timing


def bench_stages(folder: Folder, units: list[Unit], prediction: PipelinePrediction, options,
                 original=None) -> tuple[list[Row], dict]:
    """Rows and summary of a partition or plan folder (module docstring); ``original``: the model the folder
    was made from, which ``--beside``'s neighbours run."""
    if options.engine == "ray":
        from onnxpart.bench.ray_engine import ray_stages

        timings, pipe, serial, layout = ray_stages(folder, units, options)
    else:
        timings, pipe, serial, layout = _local(folder, units, options, original)
    rows = [Row(u.name, "stage", u.predicted, t.median, t, file=u.file, note=u.note) for u, t in zip(units, timings)]
    rows += [Row("pipeline", "pipeline-period", prediction.period, pipe.period.median, pipe.period),
             Row("pipeline", "pipeline-latency", prediction.latency, pipe.latency.median, pipe.latency),
             Row("pipeline", "pipeline-speed-up", prediction.speed_up, pipe.speed_up.median, pipe.speed_up,
                 quantity="ratio"),
             Row("one worker", "one-worker-period", sum(u.predicted for u in units), serial.median, serial)]
    rows += [Row(u.name, "pipeline-stage", u.predicted, b.median, b, file=u.file) for u, b in zip(units, pipe.busy)]
    slowdown = max((b.median / t.median for b, t in zip(pipe.busy, timings) if t.median > 0), default=None)
    return rows, {**summary(units, timings, prediction, pipe, serial), "pipeline_layout": layout,
                  "pipeline_slowdown": slowdown}


def _local(folder: Folder, units: list[Unit], options, original):
    from onnxpart.bench.pipeline import plan_workers, run_pipeline
    from onnxpart.bench.sessions import busy_neighbours

    with busy_neighbours(original, options.settings, options.beside):
        chain = run_chain(folder, units, options.settings, options.warmup, options.runs, options.min_time)
    stages = [(str(folder.file(u.file)), u.inputs, u.outputs) for u in units]
    workers, pinned = plan_workers(stages, [[i] for i in range(len(units))], options.settings)
    pipe = run_pipeline(workers, options.settings, chain.feeds, options.warmup, options.runs, options.micro_batches,
                        options.min_time)
    one, _ = plan_workers(stages, [list(range(len(units)))], options.settings)
    one = [dataclasses.replace(one[0], cores=workers[0].cores, threads=workers[0].threads)]
    serial = run_pipeline(one, options.settings, chain.feeds, options.warmup, options.runs, options.micro_batches,
                          options.min_time).period
    return chain.timings, pipe, serial, layout(workers, pinned)


def layout(workers, pinned: bool) -> str:
    """How the workers sat on the cores, for the pipeline rows' note."""
    where = "; ".join(f"worker {i}: cores {list(w.cores)}, {w.threads} threads" for i, w in enumerate(workers))
    return where if pinned else f"not pinned ({len(workers)} workers share {len(workers[0].cores)} cores): {where}"


def summary(units: list[Unit], timings: list[Timing], prediction: PipelinePrediction, pipe: Streamed,
            serial: Timing) -> dict:
    """The numbers the issue asks per folder: bottleneck measured / predicted, the bottleneck stage right,
    the worst stage error, the pipeline's throughput against the prediction and one worker, and its speed-up
    over one input at a time, measured in turns, against the predicted one (latency over period)."""
    measured = [t.median for t in timings]
    predicted = [u.predicted for u in units]
    worst_m = max(range(len(units)), key=measured.__getitem__)
    worst_p = max(range(len(units)), key=predicted.__getitem__)
    errors = [abs(m / p - 1) for m, p in zip(measured, predicted) if p > 0]
    period = pipe.period
    throughput = 1 / period.median if period.median > 0 else None
    return {"bottleneck_predicted": predicted[worst_p], "bottleneck_measured": measured[worst_m],
            "bottleneck_ratio": measured[worst_m] / predicted[worst_p] if predicted[worst_p] > 0 else None,
            "bottleneck_stage_predicted": units[worst_p].name, "bottleneck_stage_measured": units[worst_m].name,
            "bottleneck_stage_right": worst_m == worst_p, "worst_stage_error": max(errors, default=None),
            "throughput_measured": throughput,
            "throughput_predicted": 1 / prediction.period if prediction.period > 0 else None,
            "throughput_one_worker": 1 / serial.median if serial.median > 0 else None,
            "speed_up_over_one_worker": serial.median / period.median if period.median > 0 else None,
            "speed_up_in_turns": pipe.speed_up.median,
            "speed_up_in_turns_predicted": prediction.speed_up}
