"""schedule folders (latency objective): each piece alone on the previous pieces' outputs, where this
machine has its device (:func:`onnxpart.bench.plans.schedule_units`), then the whole chain against the
makespan. Pieces planned on a device this run's provider is not are still run (the chain needs their
outputs) but not compared: their rows have no prediction and a note saying where they were planned."""

from __future__ import annotations

from onnxpart.bench.chain import run_chain
from onnxpart.bench.folder import model_file
from onnxpart.bench.plans import schedule_units
from onnxpart.bench.report import Row
from onnxpart.bench.sessions import busy_neighbours


def bench_schedule(folder, options) -> tuple[list[Row], dict]:
    original = model_file(folder.model_path, folder.model_sha256, options.model, needed=options.beside > 0)
    units, makespan, skipped = schedule_units(folder, options.settings.provider)
    with busy_neighbours(original, options.settings, options.beside):
        run = run_chain(folder, units, options.settings, options.warmup, options.runs, options.min_time)
    rows = [Row(u.name, "piece", None if u.name in skipped else u.predicted, t.median, t, file=u.file, note=u.note)
            for u, t in zip(units, run.timings)]
    away = f"{len(skipped)} of {len(units)} pieces were planned on other devices and ran here" if skipped else ""
    rows.append(Row("chain", "chain", makespan, run.chain.median, run.chain, note=away))
    compared = [r for r in rows if r.error is not None and r.kind == "piece"]
    return rows, {"makespan_predicted": makespan, "makespan_measured": run.chain.median,
                  "makespan_ratio": run.chain.median / makespan if makespan > 0 else None,
                  "worst_piece_error": max((abs(r.error) for r in compared), default=None),
                  "pieces_not_here": skipped}
