"""Options that several commands share, each group declared once as a frozen dataclass whose fields are
the options: :class:`ModelSource` (how the model is read and costed: ``--costs``, ``--cost``, ``--device``,
``--input-shape``, ``--force-shape``, ``--dim``, ``--coarsen``, ``--format``), :class:`Search` (``--seed``,
``--workers``, ``--max-gap``) and :class:`OutputMode` (``--force``, ``--clean``, ``--json``).

A command names one parameter per group (``source: ModelSource``); :func:`takes_option_groups` puts the
group's fields into the command's signature in its place (Typer builds the options from the signature, so
``--help`` lists them where the parameter stands) and hands the command one object per group.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from pathlib import Path
from typing import Any, Callable

from onnxpart.cli.common import (CleanOpt, CoarsenOpt, CostOpt, CostsOpt, DeviceOpt, DimOpt, ForceOpt, ForceShapeOpt,
                                 FormatOpt, InputShapeOpt, JsonOpt, MaxGapOpt, SeedOpt, WorkersOpt, load_costed)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """How a command reads its model and costs its ops; each field is the command-line option of its type."""

    costs: CostsOpt = None
    cost: CostOpt = "analytic"
    device: DeviceOpt = "a100"
    input_shape: InputShapeOpt = None
    force_shape: ForceShapeOpt = False
    dim: DimOpt = None
    coarsen: CoarsenOpt = False
    graph_format: FormatOpt = "auto"

    def load(self, model: Path):
        """The model read, shapes resolved and every op costed (:func:`onnxpart.cli.common.load_costed`)."""
        return load_costed(model, fmt=self.graph_format, input_shape=self.input_shape, force_shape=self.force_shape,
                           dim=self.dim, coarsen=self.coarsen, costs=self.costs, cost=self.cost, device=self.device)


@dataclasses.dataclass(frozen=True)
class Search:
    """How the solvers search: their seed, their cores and the gap the command must certify (exit 3)."""

    seed: SeedOpt = 0
    workers: WorkersOpt = 0
    max_gap: MaxGapOpt = None


@dataclasses.dataclass(frozen=True)
class OutputMode:
    """How the result is delivered: over an existing output folder or not, as JSON on stdout or not."""

    force: ForceOpt = False
    clean: CleanOpt = False
    as_json: JsonOpt = False


GROUPS = (ModelSource, Search, OutputMode)


def takes_option_groups(command: Callable) -> Callable:
    """``command`` with each parameter of a :data:`GROUPS` type spelt out as that group's options in its
    signature; called with those options, it receives one object per group under the parameter's name."""
    signature = inspect.signature(command, eval_str=True)
    groups = {p.name: p.annotation for p in signature.parameters.values() if p.annotation in GROUPS}
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.name not in groups:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        hints = typing.get_type_hints(parameter.annotation, include_extras=True)
        parameters += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                         annotation=hints[f.name]) for f in dataclasses.fields(parameter.annotation)]

    @functools.wraps(command)
    def with_groups(**given: Any) -> Any:
        for name, group in groups.items():
            given[name] = group(**{f.name: given.pop(f.name) for f in dataclasses.fields(group)})
        return command(**given)

    with_groups.__signature__ = signature.replace(parameters=parameters)
    with_groups.__annotations__ = {p.name: p.annotation for p in parameters}  # what checked_options reads
    return with_groups
