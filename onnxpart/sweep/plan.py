"""From what the user typed to the checked list of jobs: a sweep file, or models with ``--partition`` /
``--remat`` / ``--schedule`` / ``--tile`` / ``--plan`` grids; settings from the command line over the file's; every
model checked to load. Anything wrong is one :class:`UserError` before any job starts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from onnxpart.errors import UserError
from onnxpart.sweep.commands import Commands
from onnxpart.sweep.grid import Job, ModelSpec, Settings, expand, expand_models, parse_strategy_spec
from onnxpart.sweep.models import model_files

#: Seconds a job may run past its --time-limit (loading, bounds, emitting) before it is killed: the
#: default --job-timeout is 2 × time limit + this.
TIMEOUT_MARGIN = 60.0


def plan(inputs: list[str], specs: dict[str, list[str]], *, time_limit: Optional[float] = None,
         workers: Optional[int] = None, seed: Optional[int] = None, job_timeout: Optional[float] = None,
         version: str, command: Commands) -> list[Job]:
    """The jobs of a sweep of ``command``'s strategies. ``inputs``: one sweep file, or models (paths,
    globs); ``specs``: strategy -> its command-line grids. Each job's timeout is ``job_timeout``, else 2 × its time limit + 60 s."""
    cwd = Path.cwd()
    given = {name: texts for name, texts in specs.items() if texts}
    if len(inputs) == 1 and is_sweep_file(Path(inputs[0])):
        if given:
            raise UserError("give the grid either in the sweep file or as --partition/--remat/--schedule/--tile/--plan "
                            "with models, not both")
        from onnxpart.sweep.sweep_file import read_sweep_file

        path = Path(inputs[0])
        read = read_sweep_file(path, command)
        models, grids, base = read.models, read.grids, path.resolve().parent
        settings = read.settings(time_limit, workers, seed)
        job_timeout = job_timeout if job_timeout is not None else read.values.get("job_timeout")
    else:
        if any(is_sweep_file(Path(text)) for text in inputs):
            raise UserError("a sweep file comes alone: give one sweep file, or models")
        models, base = expand_models(inputs, cwd), cwd
        grids = [parse_strategy_spec(name, text, command) for name, texts in given.items() for text in texts]
        settings = Settings(**{key: value for key, value in
                               {"time_limit": time_limit, "workers": workers, "seed": seed}.items() if value is not None})
    _check_models(models)
    jobs = expand(models, grids, settings, base, version, command)
    return [dataclasses.replace(job, timeout=job_timeout if job_timeout is not None
                                else 2 * float(job.options.get("time_limit", settings.time_limit)) + TIMEOUT_MARGIN)
            for job in jobs]


def is_sweep_file(path: Path) -> bool:
    """A ``.yaml``/``.yml`` file, or a ``.json`` file whose top level has ``models`` (a graph file has not)."""
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return True
    if suffix != ".json" or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "models" in data


def _check_models(models: list[ModelSpec]) -> None:
    for model in models:
        model_files(model.path)
