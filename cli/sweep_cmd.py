"""`onnxpart sweep`: many models × strategies × settings, each job the real strategy command, on this
machine or a Ray cluster; one progress bar, results.csv/jsonl, report.md, plots and a table per model.
The work lives in onnxpart.sweep; this module parses options and renders."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from onnxpart.cli.common import JsonOpt, console, err_console, handle_errors
from onnxpart.errors import UserError
from onnxpart.interrupts import exit_code
from onnxpart.sweep.job import SUCCEEDED
from onnxpart.units import format_seconds

#: Exit code when --fail-on-error is given and a job did not succeed (README, "Exit codes").
FAILED_JOBS_EXIT = 5

GRID_HELP = ('A {name} grid: OPTION=VALUES, space-separated, each option\'s values comma-separated, e.g. "{example}"; '
             "the jobs are every combination. Repeat for another grid.")


def _grid(name: str, example: str):
    return typer.Option(None, f"--{name}", help=GRID_HELP.format(name=name, example=example))


@handle_errors
def sweep(
    context: typer.Context,
    inputs: list[str] = typer.Argument(..., help="Models (paths or globs), or one sweep file (YAML/JSON with models: and the grids)."),
    output: Path = typer.Option(..., "--output", "-o", help="Sweep folder: one folder per job, results.csv/jsonl, report.md, plots/."),
    partition: Optional[list[str]] = _grid("partition", "k=2,4,8,16"),
    remat: Optional[list[str]] = _grid("remat", "budget=50%,70%,90%"),
    schedule: Optional[list[str]] = _grid("schedule", "system=a.yaml,b.yaml"),
    tile: Optional[list[str]] = _grid("tile", "mesh=2,4,8,2x4"),
    plan_grid: Optional[list[str]] = _grid("plan", "cluster=1x8:a100,2x8:a100 objective=latency,throughput"),
    annotate: Optional[list[str]] = _grid("annotate", "cost=measured runs=5"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.1, help="Each job's --time-limit [default: the sweep file's, else 60]."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Each job's --workers: its cores [default: the sweep file's, else 1]."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Each job's --seed [default: the sweep file's, else 0]."),
    jobs_at_once: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Jobs at once [default: local: cores / --workers; ray: as many as the cluster runs]."),
    job_timeout: Optional[float] = typer.Option(None, "--job-timeout", min=1.0, help="Kill a job after this many seconds [default: 2 × its time limit + 60]."),
    engine: str = typer.Option("local", "--engine", help="local (this machine) or ray (a Ray cluster; pip install onnxpart[cluster])."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: auto, HOST:PORT or ray://HOST:PORT [default: a fresh local Ray]."),
    shared_fs: bool = typer.Option(False, "--shared-fs", help="Ray: models, option files and -o are at the same paths on every node (else models travel through the object store, up to 1 GiB each)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the sweep in -o: run only the jobs it has not finished (a missing -o starts it)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="With --resume: also rerun the jobs that failed."),
    force: bool = typer.Option(False, "--force", help="Start over: replace an earlier sweep's folder."),
    fail_on_error: bool = typer.Option(False, "--fail-on-error", help=f"Exit {FAILED_JOBS_EXIT} when a job did not succeed (failed, infeasible, timed out, killed)."),
    knee: str = typer.Option("5%", "--knee", help="A curve's knee: the cheapest setting within this of the best."),
    as_json: JsonOpt = False,
) -> None:
    """Run strategies over many models and settings; say which setting is best, where the knee is, and what
    the certificates prove about the rest of the grid."""
    from onnxpart.cli.common import gap_limit
    from onnxpart.sweep.commands import Commands
    from onnxpart.sweep.folder import SweepFolder
    from onnxpart.sweep.plan import plan
    from onnxpart.sweep.runner import run_sweep

    version = _version()
    tolerance = gap_limit(knee)
    if retry_failed and not resume:
        raise UserError("--retry-failed goes with --resume")
    jobs = plan(inputs, {"partition": partition, "remat": remat, "schedule": schedule, "tile": tile,
                         "plan": plan_grid, "annotate": annotate},
                time_limit=time_limit, workers=workers, seed=seed, job_timeout=job_timeout, version=version,
                command=Commands(context.find_root().command))
    folder = SweepFolder(output, resume=resume, force=force, reads={path for job in jobs for path in job.reads})
    runner = _engine(engine, jobs, address, shared_fs, jobs_at_once)
    view = _View(jobs, as_json)
    rows, interrupted = [], None
    try:
        with view.live():
            rows = run_sweep(jobs, folder, runner, view, version=version, retry_failed=retry_failed)
    except KeyboardInterrupt as interrupt:
        interrupted = interrupt
        rows = [r for r in (folder.records().get(job.key) for job in jobs) if r is not None]
    finally:
        getattr(runner, "close", lambda: None)()
    _finish(jobs, rows, folder, tolerance, as_json, interrupted is not None)
    if interrupted is not None:
        err_console.print(f"[yellow]interrupted[/]: {len(rows)} of {len(jobs)} jobs finished and kept in {output}; "
                          "--resume runs the rest", highlight=False, soft_wrap=True)
        raise typer.Exit(exit_code(interrupted))
    if fail_on_error and any(r["status"] not in SUCCEEDED for r in rows):
        raise typer.Exit(FAILED_JOBS_EXIT)


def _version() -> str:
    from importlib.metadata import version

    return version("onnxpart")


def _engine(name: str, jobs: list, address: Optional[str], shared_fs: bool, slots: Optional[int]):
    from onnxpart.sweep.engine_local import LocalEngine

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if name == "local":
        needing = next((job for job in jobs if job.resources), None)
        if needing is not None:
            raise UserError(f"job {needing.name} asks for resources {needing.resources}: only --engine ray "
                            "places jobs by resources")
        if address is not None or shared_fs:
            raise UserError("--address and --shared-fs are for --engine ray")
        return LocalEngine(slots or max(1, cores // max(job.workers for job in jobs)))
    if name == "ray":
        from onnxpart.sweep.engine_ray import RayEngine

        return RayEngine(jobs, address, shared_fs=shared_fs, slots=slots, local_cpus=cores)
    raise UserError(f"unknown --engine {name!r}: use local or ray")


def _finish(jobs: list, rows: list[dict], folder, tolerance: float, as_json: bool, interrupted: bool) -> None:
    """report.md and plots (also after Ctrl-C, for what finished), then the tables."""
    from onnxpart.sweep.curves import curves
    from onnxpart.sweep.report import write_report

    found = curves(jobs, rows, tolerance)
    write_report(folder.path, found, rows, len(jobs), tolerance)
    if not as_json and not interrupted:
        _print_tables(found, rows, len(jobs), folder.path)


class _View:
    """The live terminal view (one bar: done / running / failed, and the best answer so far per model and
    strategy), or one JSON line per job with --json."""

    def __init__(self, jobs: list, as_json: bool):
        self.as_json = as_json
        self.running = self.failed = self.done = 0
        self.best: dict[str, dict[str, tuple[float, str]]] = {}
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err_console)
        self.task = self.progress.add_task("sweep", total=len(jobs))
        self.best_text = Text()

    def live(self):
        if self.as_json or not err_console.is_terminal:
            return contextlib.nullcontext()
        return Live(Group(self.progress, self.best_text), console=err_console, transient=True)

    def resumed(self, row: dict) -> None:
        self.finished(row, resumed=True)

    def started(self, job) -> None:
        self.running += 1
        self._refresh()

    def interrupted(self, job) -> None:
        self.running -= 1
        self._refresh()

    def finished(self, row: dict, resumed: bool = False) -> None:
        if not resumed:
            self.running -= 1
        self.done += 1
        self.failed += row["status"] not in SUCCEEDED
        if row["upper_bound"] is not None:
            current = self.best.setdefault(row["model"], {}).get(row["strategy"])
            if current is None or row["upper_bound"] < current[0]:
                self.best[row["model"]][row["strategy"]] = (row["upper_bound"], row["job"])
        if self.as_json:
            sys.stdout.write(json.dumps(row) + "\n")
            sys.stdout.flush()
        self._refresh()

    def _refresh(self) -> None:
        self.progress.update(self.task, completed=self.done,
                             description=f"done {self.done} · running {self.running} · failed {self.failed}")
        self.best_text.plain = "\n".join(
            f"  {model}: " + " · ".join(f"{strategy} {format_seconds(value)} ({job})"
                                       for strategy, (value, job) in sorted(best.items()))
            for model, best in self.best.items())


def _print_tables(found: list, rows: list[dict], total: int, path: Path) -> None:
    """One table per curve: each setting's status, answer, proven bound, gap and seconds, best and knee
    marked; then what the certificates prove about them."""
    from onnxpart.sweep.report import percent_text, seconds_text, verdicts

    for curve in found:
        table = Table(title=curve.title, title_justify="left")
        for column in ("setting", "status", "best found", "proven ≥", "gap", "seconds", ""):
            table.add_column(column, justify="left" if column in ("setting", "status", "") else "right")
        for point in curve.points:
            row = point.row
            marks = [mark for mark, hit in (("best", point is curve.best), ("knee", point is curve.knee)) if hit]
            table.add_row(point.label, row["status"], seconds_text(point.upper), seconds_text(point.lower),
                          percent_text(row["gap"]), f"{row['seconds']:.1f}",
                          " ".join(marks) or _short(row["error"] or ""))
        console.print(table)
        for line in verdicts(curve):
            console.print(line, highlight=False, soft_wrap=True)
    failed = sum(r["status"] not in SUCCEEDED for r in rows)
    console.print(f"{len(rows)} of {total} jobs finished ({failed} did not succeed); wrote {path}", highlight=False)


def _short(text: str, width: int = 32) -> str:
    """A table cell's first words of an error (the whole line is in report.md and results.csv)."""
    return text if len(text) <= width else text[:width - 1] + "…"
