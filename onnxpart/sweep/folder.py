"""A sweep's output folder, and what makes a sweep resumable and nothing lost::

    sweep/
      sweep.json          the grid (schema onnxpart.sweep/1): every job's key, name, model, strategy, options
      jobs/NAME/          a job's files, exactly as the strategy command writes them (its -o)
      jobs/NAME.json      a finished job's row, written atomically when it ends: what --resume reads
      jobs/NAME.log       the command's stderr, for a job that did not end with exit 0
      results.csv         one row per finished job of the grid, in grid order (columns: pandas.json_normalize
      results.jsonl       of the jsonl rows: options.k, summary.budget_bytes, ...)
      report.md, plots/   written by onnxpart.sweep.report and onnxpart.sweep.plots

Every file is written atomically (onnxpart.files); results.csv and results.jsonl are rewritten after each
finished job, so a killed sweep leaves them current.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any, Iterable

from onnxpart.errors import UserError
from onnxpart.files import atomic_write_bytes, write_json
from onnxpart.output_guard import output_parent

SCHEMA = "onnxpart.sweep/1"
MARKER = "sweep.json"
#: results.csv's leading columns; then options.* and summary.* as the rows have them.
COLUMNS = ("job", "model", "model_sha256", "strategy", "status", "exit_code", "error", "upper_bound",
           "best_lower_bound", "gap", "proven_optimal", "seconds", "peak_rss_bytes", "folder", "node",
           "onnxpart_version", "key")


class SweepFolder:
    """The folder ``path``, checked when made (before any job starts): a new folder's parent must exist;
    an existing one is continued with ``resume``, replaced with ``force`` only if it is a sweep folder
    (it holds sweep.json), and otherwise refused. An empty folder counts as new."""

    def __init__(self, path: Path, *, resume: bool = False, force: bool = False, reads: Iterable[Path] = ()):
        if resume and force:
            raise UserError("--resume continues a sweep and --force replaces it: give one of them")
        _refuse_inputs_inside(path, reads)
        self.path = path
        self.jobs = path.resolve() / "jobs"  # absolute: commands run with the jobs folder as their cwd
        output_parent(path)  # the folder it goes into exists, and takes its name
        self.existing = path.exists() and (not path.is_dir() or any(path.iterdir()))
        if path.exists() and not path.is_dir():
            raise UserError(f"output path {path} exists and is not a folder")
        self.replace = False
        if self.existing:
            ours = (path / MARKER).is_file()
            if not ours and (resume or force):
                raise UserError(f"{path} is not an onnxpart sweep folder (no {MARKER}): refusing to "
                                f"{'resume' if resume else 'replace'} it")
            if not (resume or force):
                raise UserError(f"output folder {path} already exists; pass --resume to continue that "
                                "sweep or --force to start it over")
            self.replace = force

    def open(self, jobs: list, version: str) -> None:
        """Create (or replace) the folder, record the grid, clear what a killed run left half-done: the
        staging folders of commands that never finished."""
        if self.replace:
            shutil.rmtree(self.path)
        self.jobs.mkdir(parents=True, exist_ok=True)
        self.clear_staging()
        write_json(self.path / MARKER, {"schema": SCHEMA, "onnxpart_version": version, "jobs": [
            {"key": job.key, "name": job.name, "model": job.model, "strategy": job.strategy,
             "options": job.options} for job in jobs]})

    def records(self) -> dict[str, dict]:
        """Rows of the jobs finished in earlier runs, by key (an unreadable record is a job to rerun)."""
        found = {}
        for path in sorted(self.jobs.glob("*.json")) if self.jobs.is_dir() else []:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(record, dict) and "key" in record:
                found[record["key"]] = record
        return found

    def job_dir(self, name: str) -> Path:
        return self.jobs / name

    def clear(self, name: str) -> None:
        """Remove what an unfinished earlier run of job ``name`` left (a committed folder with no row)."""
        clear_job(self.jobs, name)
        (self.jobs / f"{name}.log").unlink(missing_ok=True)

    def clear_staging(self) -> None:
        """Remove the staging folders of commands a killed sweep left behind (their cleanup never ran)."""
        for path in self.jobs.glob(".*"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)

    def save(self, name: str, row: dict, stderr: str) -> None:
        """A finished job's row (and the command's stderr unless it ended with exit 0)."""
        if row["exit_code"] != 0 and stderr:
            atomic_write_bytes(self.jobs / f"{name}.log", stderr.encode())
        write_json(self.jobs / f"{name}.json", row)

    def write_results(self, rows: Iterable[dict]) -> None:
        rows = list(rows)
        atomic_write_bytes(self.path / "results.jsonl",
                           "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows).encode())
        atomic_write_bytes(self.path / "results.csv", csv_text(rows).encode())


def _refuse_inputs_inside(folder: Path, reads: Iterable[Path]) -> None:
    """A sweep clears and replaces what is under its folder: no input (a model, a system file) may be there."""
    target = folder.resolve()
    for path in reads:
        resolved = Path(path).resolve()
        if resolved == target or target in resolved.parents:
            raise UserError(f"the output folder {folder} holds {path}, an input of the sweep: choose another -o")


def clear_job(jobs: Path, name: str) -> None:
    """Remove job ``name``'s folder under ``jobs`` and any staging folder its command left: what a job
    does before it runs (again: after a kill, or on another node after its node was lost)."""
    for path in (jobs / name, *staging_folders(jobs, name)):
        shutil.rmtree(path, ignore_errors=True)


def staging_folders(jobs: Path, name: str) -> list[Path]:
    """The hidden folders job ``name``'s command stages its output in (``OutputDir``'s mkdtemp names)."""
    return [*jobs.glob(f".{name}.????????"), *jobs.glob(f".{name}.old.????????")]


def csv_text(rows: list[dict]) -> str:
    """Rows flattened the way ``pandas.json_normalize`` flattens them (``options.k``); lists as JSON."""
    flat = [_flatten(r) for r in rows]
    extra = list(dict.fromkeys(name for r in flat for name in r if name not in COLUMNS))
    out = io.StringIO()
    writer = csv.DictWriter(out, [*COLUMNS, *extra], lineterminator="\n")
    writer.writeheader()
    for r in flat:
        writer.writerow({name: _cell(value) for name, value in r.items()})
    return out.getvalue()


def _flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in record.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return json.dumps(value)
    return value
