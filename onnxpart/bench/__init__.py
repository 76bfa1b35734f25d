"""``onnxpart bench``: run what a command emitted on this machine and measure it against what its manifest
predicts (issue 42).

:func:`bench` detects the command that made a folder (:mod:`onnxpart.bench.folder`), runs its units the way
``annotate --cost measured`` profiles (:mod:`onnxpart.bench.sessions`) and returns the rows and the
bench.json document (:mod:`onnxpart.bench.report`). One module per kind of folder: ``stages`` (partition,
plan: stages alone, then the pipeline), ``schedule`` (pieces and the chain), ``remat`` (remat.onnx against
the original), ``tile`` (each virtual device's shard of every op). The library logs; the command line owns the terminal (``cli/bench_cmd.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from onnxpart.bench.sessions import Settings

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Options:
    """How to bench: ``runs`` timed runs after ``warmup``, the onnxruntime ``settings``, ``micro_batches``
    streamed through a pipeline, the ``engine`` (local processes or Ray actors; ``address`` of a Ray cluster,
    None: a local one started and stopped), ``model``: the model the folder was made from, where its
    recorded path is not right, ``max_ops``: the ops of a tile folder timed (those predicted slowest),
    ``min_time``: seconds each set of compared files (stages, pieces, remat's two models) and the pipeline's
    stream are timed for at least (:mod:`onnxpart.bench.timing`), ``beside``: busy neighbours running the
    original model while stages, pieces and remat's models are timed
    (:func:`onnxpart.bench.sessions.busy_neighbours`)."""

    runs: int = 20
    warmup: int = 3
    settings: Settings = field(default_factory=Settings)
    micro_batches: int = 32
    engine: str = "local"
    address: Optional[str] = None
    model: Optional[Path] = None
    max_ops: int = 400  # onnxpart.bench.tile.MAX_OPS
    min_time: float = 0.0
    beside: int = 0


@dataclass
class Result:
    folder: Any  # onnxpart.bench.folder.Folder
    rows: list  # onnxpart.bench.report.Row
    summary: dict
    document: dict  # bench.json


def bench(path: Path, options: Options) -> Result:
    """Measure the units of the output folder at ``path`` (module docstring)."""
    from onnxpart.bench import machine
    from onnxpart.bench.folder import Folder, detect
    from onnxpart.bench.report import payload
    from onnxpart.errors import UserError

    kind, _, manifest = detect(path)
    if options.beside and (kind == "tile" or options.engine == "ray"):
        raise UserError(f"--beside: {'a tile folder' if kind == 'tile' else '--engine ray'} times its units without "
                        "busy neighbours; use it on partition, plan, schedule and remat folders, local engine")
    model = manifest.get("model")
    recorded = model if isinstance(model, dict) else {"path": model, "sha256": manifest.get("model_sha256")}
    folder = Folder(path, kind, manifest, recorded.get("path"), recorded.get("sha256"))
    about = machine.describe()  # before the runs: the load average is the machine's, not bench's own
    rows, summary = _RUNNERS[kind](folder, options)
    settings = {**options.settings.describe(), "runs": options.runs, "warmup": options.warmup,
                "min_time_s": options.min_time, "beside": options.beside,
                "micro_batches": options.micro_batches}
    return Result(folder, rows, summary, payload(folder, about, settings, rows, summary, options.engine))


def _stages(folder, options: Options):
    from onnxpart.bench.folder import model_file
    from onnxpart.bench.plans import partition_units, plan_units
    from onnxpart.bench.stages import bench_stages

    original = model_file(folder.model_path, folder.model_sha256, options.model, needed=options.beside > 0)
    units, prediction = (partition_units if folder.kind == "partition" else plan_units)(folder)
    return bench_stages(folder, units, prediction, options, original)


def _schedule(folder, options: Options):
    from onnxpart.bench.schedule import bench_schedule

    return bench_schedule(folder, options)


def _remat(folder, options: Options):
    from onnxpart.bench.remat import bench_remat

    return bench_remat(folder, options)


def _tile(folder, options: Options):
    from onnxpart.bench.tile import bench_tile

    return bench_tile(folder, options)


_RUNNERS = {"partition": _stages, "plan": _stages, "schedule": _schedule, "remat": _remat, "tile": _tile}
