"""Running a sweep on an engine: skip what earlier runs finished (``--resume``), run the rest, and keep
every finished job — its row saved the moment it ends, results.csv/jsonl rewritten — whatever stops the
sweep afterwards (a failed job, Ctrl-C, a kill)."""

from __future__ import annotations

from typing import Any, Protocol

from onnxpart.sweep.folder import SweepFolder, clear_job
from onnxpart.sweep.grid import Job
from onnxpart.sweep.job import SUCCEEDED, Outcome, row


class Listener(Protocol):
    """What a front end hears: a job taken from an earlier run, started, finished (its row), or
    interrupted (not recorded: a resumed sweep runs it again)."""

    def resumed(self, row: dict) -> None: ...
    def started(self, job: Job) -> None: ...
    def finished(self, row: dict) -> None: ...
    def interrupted(self, job: Job) -> None: ...


def run_sweep(jobs: list[Job], folder: SweepFolder, engine: Any, listener: Listener, *, version: str,
              retry_failed: bool = False) -> list[dict]:
    """Run the grid's unfinished jobs on ``engine``; -> the rows of every finished job, in grid order.
    A KeyboardInterrupt propagates after the running jobs are cancelled and results are written."""
    folder.open(jobs, version)
    earlier = folder.records()
    rows: dict[str, dict] = {}
    for job in jobs:
        record = earlier.get(job.key)
        if record is not None and not (retry_failed and record["status"] not in SUCCEEDED):
            rows[job.key] = record
            listener.resumed(record)
    folder.write_results(_in_order(jobs, rows))

    def finished(job: Job, outcome: Outcome, node: str) -> None:
        if outcome.exit_code not in (0, 3):  # the command wrote nothing, or was stopped: no folder
            clear_job(folder.jobs, job.name)
        if outcome.status == "interrupted":
            listener.interrupted(job)
            return
        written = folder.job_dir(job.name).is_dir()
        rows[job.key] = row(job, outcome, f"jobs/{job.name}" if written else None, node, version)
        folder.save(job.name, rows[job.key], outcome.stderr)
        folder.write_results(_in_order(jobs, rows))
        listener.finished(rows[job.key])

    engine.run([job for job in jobs if job.key not in rows], folder, listener.started, finished)
    return _in_order(jobs, rows)


def _in_order(jobs: list[Job], rows: dict[str, dict]) -> list[dict]:
    return [rows[job.key] for job in jobs if job.key in rows]
