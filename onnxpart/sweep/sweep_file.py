"""The sweep file (``onnxpart sweep sweep.yaml``): the grid in YAML or JSON, validated by a pydantic schema;
an error is one line naming the file, the key and its line.

::

    models:                                   # paths or globs, relative to this file
      - models/*.onnx
      - {path: bert.onnx, dim: [batch=1, sequence=128]}   # options every job of this model takes
    time_limit: 60                            # per job (--time-limit); also workers, seed, job_timeout
    partition: {k: [2, 4, 8, 16]}             # a list sweeps; a scalar is fixed
    remat: {budget: [50%, 70%, 90%]}
    tile: {mesh: ["2", "4", "2x4"]}
    plan: {cluster: ["1x8:a100", "2x8:a100"], objective: [latency, throughput]}
    schedule:                                 # several grids for one strategy: a list of mappings
      - {system: [systems/a.yaml, systems/b.yaml], resources: {a100: 1}}   # Ray resources per job
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from onnxpart.errors import UserError
from onnxpart.files import read_text
from onnxpart.sweep.commands import STRATEGIES, Commands
from onnxpart.sweep.grid import ModelSpec, Settings, StrategyGrid, expand_models
from onnxpart.validate import compose_yaml, load_yaml

Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]


class _Grid(BaseModel):
    """One strategy grid: option -> value or list of values; ``resources`` for Ray."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Union[Scalar, list[Union[Scalar, list[Scalar]]]]]
    resources: dict[str, float] = Field(default_factory=dict)


class _Model(BaseModel):
    """A model with options for all its jobs (a list: a repeatable option's occurrences, e.g. ``dim``)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Union[Scalar, list[Scalar]]]
    path: StrictStr


class _SweepFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[Union[StrictStr, _Model]] = Field(min_length=1)
    partition: Union[_Grid, list[_Grid], None] = None
    remat: Union[_Grid, list[_Grid], None] = None
    schedule: Union[_Grid, list[_Grid], None] = None
    tile: Union[_Grid, list[_Grid], None] = None
    plan: Union[_Grid, list[_Grid], None] = None
    annotate: Union[_Grid, list[_Grid], None] = None
    time_limit: Optional[float] = Field(None, gt=0)
    workers: Optional[int] = Field(None, ge=1)
    seed: Optional[int] = None
    job_timeout: Optional[float] = Field(None, gt=0)


class SweepFile:
    """A read sweep file: models, grids, and the settings it gives (None where it is silent)."""

    def __init__(self, models: list[ModelSpec], grids: list[StrategyGrid], values: dict[str, Any]):
        self.models = models
        self.grids = grids
        self.values = values

    def settings(self, time_limit: Optional[float], workers: Optional[int], seed: Optional[int]) -> Settings:
        """The command line's values where given, else the file's, else the defaults."""
        given = {"time_limit": time_limit, "workers": workers, "seed": seed}
        chosen = {key: value if value is not None else self.values.get(key) for key, value in given.items()}
        return Settings(**{key: value for key, value in chosen.items() if value is not None})


def read_sweep_file(path: Path, command: Commands) -> SweepFile:
    """Parse and validate ``path`` (its grids name options of ``command``'s strategies); models and files
    resolve against its folder."""
    text = read_text(path, "sweep file")
    node = compose_yaml(text, str(path))  # within the input files' depth and alias limits
    data = load_yaml(text, str(path))
    try:
        parsed = _SweepFile.model_validate(data)
    except ValidationError as exc:
        raise UserError(_one_line(path, node, exc)) from None
    _check_options(path, node, parsed, command)
    base = path.resolve().parent
    entries = [model if isinstance(model, str) else model.path for model in parsed.models]
    options = [{} if isinstance(model, str) else dict(model.model_extra) for model in parsed.models]
    models = expand_models(entries, base, options)
    grids = [StrategyGrid(strategy, _axes(grid), dict(grid.resources))
             for strategy in STRATEGIES for grid in _as_list(getattr(parsed, strategy))]
    return SweepFile(models, grids, parsed.model_dump(include={"time_limit", "workers", "seed", "job_timeout"}))


def _check_options(path: Path, node: Optional[yaml.Node], parsed: _SweepFile, command: Commands) -> None:
    """Every option a grid or a model names must be one its strategies take: else the key and its line."""
    strategies = [name for name in STRATEGIES if getattr(parsed, name) is not None]
    places = [([name, n] if isinstance(getattr(parsed, name), list) else [name], name, grid)
              for name in strategies for n, grid in enumerate(_as_list(getattr(parsed, name)))]
    places += [(["models", n], name, model) for n, model in enumerate(parsed.models) if not isinstance(model, str)
               for name in strategies]
    for loc, strategy, entry in places:
        for option in entry.model_extra:
            try:
                command(strategy).option(option)
            except UserError as exc:
                raise UserError(f"{path}: {'.'.join(map(str, loc + [option]))} (line {_line(node, loc + [option])}): "
                                f"{exc}") from None


def _as_list(value: Any) -> list:
    return [] if value is None else value if isinstance(value, list) else [value]


def _axes(grid: _Grid) -> dict[str, list]:
    """A list sweeps (each item one job's value; a repeatable option's item may itself be a list), a
    scalar is one value."""
    return {name: value if isinstance(value, list) else [value] for name, value in grid.model_extra.items()}


def _one_line(path: Path, node: Optional[yaml.Node], exc: ValidationError) -> str:
    """The first validation error as ``FILE: KEY (line N): what``."""
    error = exc.errors()[0]
    loc = [part for part in error["loc"] if not _is_union_tag(part)]
    key = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p)) for n, p in enumerate(loc))
    line = _line(node, loc)
    where = (key or "(top level)") + (f" (line {line})" if line else "")
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = f"unknown key: use models, {', '.join(STRATEGIES)}, time_limit, workers, seed or job_timeout"
    elif len(loc) < len(error["loc"]):  # a union: say what each place takes, not the first member's complaint
        message = ("expected a model path, or a mapping with path and options" if loc[:1] == ["models"] and
                   len(loc) == 2 else "expected a value (text, number, true/false) or a list of values")
    return f"{path}: {where}: {message}"


def _is_union_tag(part: Any) -> bool:
    """pydantic names the union member it tried (``str``, ``_Grid``, ``list[_Grid]``) inside ``loc``."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or part.startswith(("_", "list[")))


def _line(node: Optional[yaml.Node], loc: list) -> Optional[int]:
    """The 1-based line of the deepest key or item along ``loc`` in the composed YAML."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((key, value) for key, value in node.value if key.value == str(part)), None)
            if pair is None:
                break
            line, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
