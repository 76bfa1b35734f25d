"""Units run one after another, each alone in onnxruntime on the previous units' real outputs: partition's
and plan's stages, schedule's pieces.

Each unit's file gets the tensors earlier units made (their outputs from one untimed run) and, for the
model's own inputs, seeded inputs at the costed dims (:func:`onnxpart.bench.sessions.graph_feeds`); then
warm-up and ``runs`` timed runs, in rounds over the units (:func:`onnxpart.bench.timing.time_rounds`). A file
whose inputs or outputs are not those its manifest lists was not written with it (exit 2, naming it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.bench.folder import Folder, Unit
from onnxpart.bench.sessions import Settings, graph_feeds, make_session
from onnxpart.bench.timing import Timing, time_calls, time_rounds
from onnxpart.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class ChainRun:
    """What running the units in order gave: each unit's timing, the model inputs made for them, and the
    timing of the whole chain run end to end."""

    timings: list[Timing]
    feeds: dict[str, np.ndarray]
    chain: Timing


def run_chain(folder: Folder, units: Sequence[Unit], settings: Settings, warmup: int, runs: int,
              min_seconds: float = 0.0) -> ChainRun:
    """Each unit alone, chained (module docstring), for ``runs`` rounds and at least ``min_seconds``, then the
    chain end to end (``runs`` times)."""
    values: dict[str, np.ndarray] = {}
    model_inputs: dict[str, np.ndarray] = {}
    sessions, calls = [], []
    for unit in units:
        session = make_session(folder.file(unit.file), settings)
        check_io(session, unit)
        fresh = graph_feeds(session, settings, values, unit.file)
        model_inputs.update(fresh)
        values.update(fresh)
        feeds = {arg.name: values[arg.name] for arg in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        values.update(zip(names, session.run(names, feeds)))
        calls.append(functools.partial(session.run, names, feeds))
        sessions.append((session, names))
    timings = time_rounds(calls, warmup, runs, min_seconds)
    for unit, timing in zip(units, timings):
        log.info("%s: median %.3g s", unit.name, timing.median)
    return ChainRun(timings, model_inputs, _time_chain(sessions, model_inputs, warmup, runs))


def _time_chain(sessions, model_inputs: dict[str, np.ndarray], warmup: int, runs: int) -> Timing:
    """The units run in order on fresh model inputs, as one call (what one worker does per input)."""

    def chain() -> None:
        values = dict(model_inputs)
        for session, names in sessions:
            feeds = {arg.name: values[arg.name] for arg in session.get_inputs()}
            values.update(zip(names, session.run(names, feeds)))

    return time_calls(chain, warmup, runs)


def check_io(session, unit: Unit) -> None:
    """The file reads only tensors its manifest lists for it and makes every one the manifest says it makes
    (a file held as a constant under ``--freeze-dims`` reads fewer)."""
    reads = {arg.name for arg in session.get_inputs()}
    makes = {arg.name for arg in session.get_outputs()}
    extra = sorted(reads - set(unit.inputs))
    missing = sorted(set(unit.outputs) - makes)
    if extra or missing:
        what = f"reads {extra[0]!r}" if extra else f"does not make {missing[0]!r}"
        raise UserError(f"{unit.file} {what}, unlike what the folder's manifest lists for it: the file was not "
                        "written with this manifest (a folder from another model or run?)")
