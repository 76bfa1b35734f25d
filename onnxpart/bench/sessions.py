"""How bench runs a file in onnxruntime: the provider, the threads, the graph optimizations, and the
seeded inputs at the costed dims.

The defaults are those of ``annotate --cost measured`` (:mod:`onnxpart.cost_models.measured`, via
:func:`onnxpart.runtime.session_options`): graph optimizations off and ``ExecutionOrder.PRIORITY_BASED``
(onnxruntime otherwise reorders nodes), sequential execution, onnxruntime's default intra-op threads
unless ``--threads``. ``--optimize`` runs with onnxruntime's own optimizations (ORT_ENABLE_ALL), what a
user deploys, so the distance the profile's setting makes can be measured.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnxpart import runtime
from onnxpart.errors import UserError


@dataclass(frozen=True)
class Settings:
    """One way of running: ``provider``, intra-op ``threads`` (0: onnxruntime's default), ``optimize``
    (onnxruntime's graph optimizations on), the ``seed`` of the inputs, the ``dims`` and ``shapes``
    (``--dim``, ``--input-shape``) the folder was costed at."""

    provider: str = "CPUExecutionProvider"
    threads: int = 0
    optimize: bool = False
    seed: int = 0
    dims: Mapping[str, int] = field(default_factory=dict)
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """What bench.json records of the settings."""
        return {"provider": self.provider, "threads": self.threads,
                "graph_optimizations": "ORT_ENABLE_ALL" if self.optimize else runtime.KEEP_ORDER,
                "seed": self.seed, "dims": dict(self.dims),
                "input_shapes": {k: list(v) for k, v in self.shapes.items()}}


def check_provider(provider: str) -> str:
    """``provider`` (``CPU`` or ``CPUExecutionProvider``) as onnxruntime names it; exit 2 when this
    machine's onnxruntime does not have it."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    name = provider if provider.endswith("ExecutionProvider") else f"{provider}ExecutionProvider"
    match = next((p for p in available if p.lower() == name.lower()), None)
    if match is None:
        raise UserError(f"--provider {provider}: this onnxruntime {ort.__version__} has no {name} (it has "
                        f"{', '.join(available)})")
    return match


def make_session(path: Path | str, settings: Settings, threads: int | None = None, memory_pattern: bool = True):
    """An onnxruntime session of the file at ``path`` run as ``settings`` say (``threads`` overrides theirs,
    for a pipeline worker pinned to its cores; ``memory_pattern`` False as remat.onnx must run)."""
    import onnxruntime as ort

    options = runtime.session_options(keep_order=not settings.optimize, memory_pattern=memory_pattern,
                                      threads=settings.threads if threads is None else threads)
    if settings.optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with runtime.user_model(path):
        return ort.InferenceSession(str(path), sess_options=options, providers=[settings.provider])


def graph_feeds(session, settings: Settings, have: Mapping[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    """Seeded inputs (:func:`onnxpart.runtime.random_inputs`) for the inputs of ``session`` not in ``have``
    (the model's own inputs, which no earlier unit makes), at the costed dims: a named dim from ``--dim``,
    a whole shape from ``--input-shape``; an unknown dim is an error naming it."""
    shapes = {}
    for arg in session.get_inputs():
        if arg.name in have:
            continue
        shapes[arg.name] = settings.shapes.get(arg.name) or [_dim(d, arg.name, axis, settings, label)
                                                             for axis, d in enumerate(arg.shape)]
    feeds = runtime.random_inputs(session, settings.seed, shapes=shapes)
    return {name: value for name, value in feeds.items() if name not in have}


def _dim(value: Any, name: str, axis: int, settings: Settings, label: str) -> int:
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value in settings.dims:
        return settings.dims[value]
    what = f"the symbolic dim {value!r}" if isinstance(value, str) else "an unnamed dim"
    fix = f"--dim {value}=N" if isinstance(value, str) else f"--input-shape {name}=DIMS"
    raise UserError(f"{label}: input {name!r} has {what} on axis {axis}: give the value the folder was planned at "
                    f"with {fix}")


def busy_neighbours(model: Path | None, settings: Settings, count: int):
    """A ``with`` block whose timings run beside ``count`` busy neighbours (:func:`onnxpart.neighbours.beside`),
    each running ``model`` — the folder's original — as ``settings`` say, on seeded inputs at the costed dims:
    the conditions ``annotate --cost measured --beside`` profiled in."""
    from onnxpart import neighbours

    def prepare():
        session = make_session(model, settings)
        return functools.partial(session.run, None, graph_feeds(session, settings, {}, Path(model).name))

    return neighbours.beside(count, settings.threads, prepare)


def free_cores() -> list[int]:
    """The cores this process may run on (``os.sched_getaffinity``), in order."""
    return sorted(os.sched_getaffinity(0))
