"""The options by which every planning command reads and costs its model (``--costs``, ``--cost``,
``--device``, ``--input-shape``, ``--force-shape``, ``--dim``, ``--coarsen``, ``--format``), declared once.

A command names one parameter ``source: ModelSource``; :func:`takes_model_source` puts the fields of
:class:`ModelSource` into the command's signature in its place (Typer builds the options from the
signature, so ``--help`` lists them where the parameter stands) and hands the command one ModelSource.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from pathlib import Path
from typing import Any, Callable

from onnxpart.cli.common import (CoarsenOpt, CostOpt, CostsOpt, DeviceOpt, DimOpt, ForceShapeOpt, FormatOpt,
                                 InputShapeOpt, load_costed)


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


def takes_model_source(command: Callable) -> Callable:
    """``command`` with its ``ModelSource`` parameter spelt out as options in its signature; called with
    those options, it receives them as one ModelSource under that parameter's name."""
    signature = inspect.signature(command, eval_str=True)
    name = next(p.name for p in signature.parameters.values() if p.annotation is ModelSource)
    hints = typing.get_type_hints(ModelSource, include_extras=True)
    fields = [f.name for f in dataclasses.fields(ModelSource)]
    options = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
               for f in dataclasses.fields(ModelSource)]
    parameters = []
    for parameter in signature.parameters.values():
        parameters += options if parameter.name == name else [parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)]

    @functools.wraps(command)
    def with_source(**given: Any) -> Any:
        source = ModelSource(**{field: given.pop(field) for field in fields})
        return command(**given, **{name: source})

    with_source.__signature__ = signature.replace(parameters=parameters)
    return with_source
