"""A sweep's grid — models × strategies × option settings — expanded into jobs.

A grid comes from the command line (``--partition "k=2,4,8 bounds=simple,exact"``: the cartesian product
of each option's comma-separated values) or from a sweep file (:mod:`onnxpart.sweep.sweep_file`). Every
option is resolved against the strategy command's own options (:mod:`onnxpart.sweep.commands`) and every
job's command line is parsed once before any job starts, so a bad grid is one error, not a hundred failed
jobs.

A job's key — sha256 of the model file's sha256, the strategy, its normalized options (a file option by
its content's sha256) and the onnxpart version — is what ``--resume`` matches: a finished job with the
same key is not run again.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from onnxpart.errors import UserError
from onnxpart.sweep.commands import Command, Commands, Option, Value

#: Option values that name files: they must exist, jobs get their absolute path, keys their content hash.
_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".onnx")


@dataclass(frozen=True)
class Settings:
    """What every job of a sweep shares unless its grid sets it: the strategy commands' ``--time-limit``,
    ``--workers`` (cores per job, at least 1: jobs run side by side) and ``--seed``."""

    time_limit: float = 60.0
    workers: int = 1
    seed: int = 0

    def options(self) -> dict[str, Value]:
        return {"time_limit": _number(self.time_limit), "workers": str(self.workers), "seed": str(self.seed)}


@dataclass(frozen=True)
class ModelSpec:
    """A model as the user named it (``shown``), its absolute path and the options every job of it takes
    (e.g. ``dim``)."""

    shown: str
    path: Path
    options: dict[str, Value] = field(default_factory=dict)


@dataclass(frozen=True)
class StrategyGrid:
    """One strategy's grid: option (as spelled) -> the values to sweep (one value: fixed), and the Ray
    resources its jobs need (``{"a100": 1}``)."""

    strategy: str
    axes: dict[str, list[Value]]
    resources: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """One run of one strategy command on one model. ``options`` maps canonical option names to values as
    the user wrote them (what results show); ``argv`` is the command line after the model, with absolute
    paths (without ``-o`` and ``--json``, which the engine adds)."""

    key: str
    name: str
    model: str
    model_path: Path
    model_sha256: str
    strategy: str
    options: dict[str, Value]
    argv: tuple[str, ...]
    workers: int
    resources: dict[str, float]
    axis: dict[str, Value]  # the options the grid set (what tells this job from its neighbours)
    reads: tuple[Path, ...] = ()  # the model and the files its options name
    timeout: float = 0.0    # seconds before the job is killed (onnxpart.sweep.plan sets it)


def parse_strategy_spec(strategy: str, text: str, command: Commands) -> StrategyGrid:
    """``"k=2,4,8 bounds=simple"`` -> a grid of ``command(strategy)``'s options (a bare ``NAME`` is a flag
    set to true; a repeatable option named twice gets both values on every job)."""
    axes: dict[str, list[Value]] = {}
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UserError(f"--{strategy} {text!r}: {exc}") from None
    for word in words:
        name, sep, values = word.partition("=")
        if not name:
            raise UserError(f"--{strategy} {text!r}: {word!r} is not NAME=VALUES")
        option = command(strategy).option(name)
        parsed: list[Value] = [True] if not sep else [v.strip() for v in values.split(",") if v.strip()]
        if not parsed:
            raise UserError(f"--{strategy} {text!r}: {name} has no values")
        if option.multiple and name in axes:  # dim=a=1 dim=b=2: both on every job
            axes[name] = [[*previous, value] for previous in axes[name] for value in parsed]
            continue
        axes[name] = [[v] for v in parsed] if option.multiple else parsed
    return StrategyGrid(strategy, axes)


def expand_models(patterns: list[str], base: Path, options: Optional[list[dict]] = None) -> list[ModelSpec]:
    """Model paths or glob patterns (relative to ``base``) -> models in the order given, each glob sorted;
    a pattern that matches nothing or a missing file is a :class:`UserError`."""
    models, seen = [], set()
    for n, pattern in enumerate(patterns):
        full = Path(pattern).expanduser()
        full = full if full.is_absolute() else base / full
        matches = sorted(glob.glob(str(full))) if glob.has_magic(pattern) else [str(full)]
        if not matches:
            raise UserError(f"no model matches {pattern!r}")
        for match in matches:
            path = Path(match).resolve()
            if not path.is_file():
                raise UserError(f"model file {match} does not exist")
            if path not in seen:
                seen.add(path)
                shown = pattern if not glob.has_magic(pattern) or Path(pattern).is_absolute() \
                    else os.path.relpath(match, base)
                models.append(ModelSpec(shown, path, dict((options or [{}] * len(patterns))[n])))
    return models


def expand(models: list[ModelSpec], grids: list[StrategyGrid], settings: Settings, base: Path,
           version: str, command: Commands) -> list[Job]:
    """Every job of the grid, in order (model, grid, cartesian product), duplicates dropped; each job's
    command line parsed once by its command (a bad value is a :class:`UserError` before any job runs)."""
    if not models:
        raise UserError("the sweep has no models")
    if not grids:
        raise UserError("the sweep has no strategies: give --partition, --remat, --schedule, --tile or --plan "
                        "(or their keys in a sweep file)")
    files = _FileHashes(base)
    checked: set[tuple] = set()
    jobs: dict[str, Job] = {}
    for model in models:
        model_sha = files.sha256(model.path)
        for grid in grids:
            for point in itertools.product(*grid.axes.values()):
                axis = dict(zip(grid.axes, point))
                job = _job(model, model_sha, grid, axis, settings, files, version, command(grid.strategy))
                if (job.strategy, job.argv) not in checked:
                    command(job.strategy).check(list(job.argv))
                    checked.add((job.strategy, job.argv))
                jobs.setdefault(job.key, job)
    if not jobs:
        raise UserError("the grid is empty: an option has no values")
    return _unique_names(list(jobs.values()))


def _job(model: ModelSpec, model_sha: str, grid: StrategyGrid, axis: dict[str, Value], settings: Settings,
         files: "_FileHashes", version: str, cmd: Command) -> Job:
    """One job of ``cmd``: settings (those the command takes), then the model's options, then the grid's
    values (later ones win)."""
    options: dict[str, Value] = {}
    resolved: dict[str, tuple[Option, Value]] = {}
    shared = {name: value for name, value in settings.options().items() if cmd.has(name)}
    for layer in (shared, model.options, axis):
        for spelled, value in layer.items():
            option = cmd.option(spelled)
            resolved[option.name] = (option, _normal(option, value))
    argv: list[str] = []
    keyed: dict[str, Value] = {}
    reads = [model.path]
    for name, (option, value) in resolved.items():
        options[name] = value
        argv += option.argv(files.argument(value))
        keyed[name] = files.keyed(value)
        reads += [path for item in (value if isinstance(value, list) else [value])
                  if (path := files.path(item)) is not None]
    workers = int(options.get("workers", 1))
    if workers < 1:
        raise UserError(f"{grid.strategy} jobs need workers ≥ 1 (cores per job: sweep jobs run side by side), "
                        f"got {workers}")
    key = _key(model_sha, grid.strategy, keyed, version)
    shown_axis = {cmd.option(spelled).name: _normal(cmd.option(spelled), v) for spelled, v in axis.items()}
    name = _name(model.path, grid.strategy, {s: _normal(cmd.option(s), v) for s, v in axis.items()})
    return Job(key, name, model.shown, model.path, model_sha, grid.strategy, options, tuple(argv), workers,
               dict(grid.resources), shown_axis, tuple(reads))


def _key(model_sha: str, strategy: str, options: dict[str, Value], version: str) -> str:
    """sha256 of what decides a job's result: model, strategy, options (sorted), onnxpart version."""
    text = json.dumps({"model": model_sha, "strategy": strategy, "options": options, "version": version},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _normal(option: Option, value: Value) -> Value:
    """A value as text (numbers as written by ``%g``), flags as booleans, repeatable options as lists."""
    if option.is_flag:
        if isinstance(value, str):
            lowered = value.lower()
            if lowered not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
                raise UserError(f"{option.flag} is a flag: give true or false, got {value!r}")
            return lowered in ("true", "yes", "1", "on")
        return bool(value)
    if option.multiple:
        return [_text(v) for v in (value if isinstance(value, list) else [value])]
    if isinstance(value, list):
        raise UserError(f"{option.flag} takes one value per job, got the list {value!r}")
    return _text(value)


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return _number(value) if isinstance(value, float) else str(value).strip()


def _number(value: float) -> str:
    return f"{value:g}"


class _FileHashes:
    """Option values that name files (``system=sys.yaml``): resolved against the grid's folder, checked
    to exist, passed to jobs as absolute paths and keyed by content; each file hashed once."""

    def __init__(self, base: Path):
        self.base = base
        self._hashes: dict[Path, str] = {}

    def sha256(self, path: Path) -> str:
        if path not in self._hashes:
            from onnxpart.onnx_io import file_sha256

            try:
                self._hashes[path] = file_sha256(path)
            except OSError as exc:
                raise UserError(f"cannot read {path}: {exc.strerror}") from None
        return self._hashes[path]

    def path(self, value: Value) -> Optional[Path]:
        if not isinstance(value, str) or not ("/" in value or value.lower().endswith(_FILE_SUFFIXES)):
            return None
        full = Path(value).expanduser()
        full = (full if full.is_absolute() else self.base / full).resolve()
        if not full.is_file():
            raise UserError(f"file {value} does not exist (looked for {full})")
        return full

    def argument(self, value: Value) -> Value:
        if isinstance(value, list):
            return [self.argument(v) for v in value]
        path = self.path(value)
        return str(path) if path is not None else value

    def keyed(self, value: Value) -> Value:
        if isinstance(value, list):
            return [self.keyed(v) for v in value]
        path = self.path(value)
        return f"sha256:{self.sha256(path)}" if path is not None else value


_UNSAFE = re.compile(r"[^A-Za-z0-9_.=+-]+")


def _name(model: Path, strategy: str, axis: dict[str, Value]) -> str:
    """``transformer_block-partition-k=4``: the model's stem, the strategy and the grid's values (files by
    stem, ``%`` as ``pct``), safe as a folder name."""
    parts = [model.stem.removesuffix(".onnx"), strategy]
    for spelled, value in axis.items():
        values = value if isinstance(value, list) else [value]
        text = "+".join(Path(v).stem if isinstance(v, str) and ("/" in v or v.lower().endswith(_FILE_SUFFIXES))
                        else str(v).lower() if isinstance(v, bool) else str(v) for v in values)
        parts.append(f"{spelled.lstrip('-')}={text.replace('%', 'pct')}")
    return slug("-".join(parts))


def slug(text: str) -> str:
    """``text`` safe as a file or folder name (letters, digits, ``_ . = + -``), at most 120 characters."""
    return _UNSAFE.sub("_", text).strip("._")[:120]


def _unique_names(jobs: list[Job]) -> list[Job]:
    """Jobs whose names collide (two models with one stem) get their key's first 8 digits appended."""
    import collections
    import dataclasses

    counts = collections.Counter(job.name for job in jobs)
    return [job if counts[job.name] == 1 else dataclasses.replace(job, name=f"{job.name}-{job.key[:8]}")
            for job in jobs]
