"""Which command made an output folder, and what it predicts: the units ``onnxpart bench`` runs.

A folder is recognised by the schema of the file its command writes (README, each command's "out/"):
``manifest.json`` with ``onnxpart.partition-manifest/1``, ``onnxpart.plan-manifest/1`` or
``onnxpart.schedule-manifest/1``; ``sequence.json`` with ``onnxpart.remat.sequence/1``; ``plan.json`` with
``onnxpart.tile-plan/1``. Each is read through a pydantic schema of the fields bench uses (a missing or
mistyped field is one error line naming it), and turned into :class:`Unit` s — a runnable file with the
tensors it reads and makes and the seconds the manifest predicts for it — in the order they run.

The model a folder was made from is the one its manifest names (``model.path``, relative to where the
command ran) unless ``--model`` names it; a model whose sha256 differs from the recorded one is refused:
the folder was made from another model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from onnxpart.errors import UserError
from onnxpart.files import read_json
from onnxpart.units import SECONDS
from onnxpart.validate import OpenSchema, number, validate

Seconds = number(SECONDS)

#: (file, schema) -> the command that writes it
SCHEMAS = {
    ("manifest.json", "onnxpart.partition-manifest/1"): "partition",
    ("manifest.json", "onnxpart.plan-manifest/1"): "plan",
    ("manifest.json", "onnxpart.schedule-manifest/1"): "schedule",
    ("sequence.json", "onnxpart.remat.sequence/1"): "remat",
    ("plan.json", "onnxpart.tile-plan/1"): "tile",
}


@dataclass(frozen=True)
class Unit:
    """One thing bench times: ``file`` (in the folder) reads ``inputs`` and makes ``outputs``; the
    manifest predicts ``predicted`` seconds for it; ``ops`` are its op names (for ``--calibrate``)."""

    name: str
    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    predicted: float
    ops: tuple[str, ...] = ()
    note: str = ""


@dataclass
class Folder:
    """An output folder: the command that made it, its manifest, the model it names and its units."""

    path: Path
    kind: str
    manifest: dict[str, Any]
    model_path: Optional[str]
    model_sha256: Optional[str]
    units: list[Unit] = field(default_factory=list)

    def file(self, name: str) -> Path:
        """A file of the folder, which must exist (else the folder is not whole)."""
        path = self.path / name
        if not path.is_file():
            raise UserError(f"{self.path}: {name} is missing (the {self.kind} folder is not whole)")
        return path


class _Model(OpenSchema):
    path: Optional[str] = None
    sha256: Optional[str] = None


class _StageFile(OpenSchema):
    """What partition's and plan's stages and schedule's pieces all say: the file and what it holds, reads and
    makes."""

    index: int
    file: Optional[str] = None
    ops: list[str] = []
    inputs: list[str] = []
    outputs: list[str] = []


class _StageEntry(_StageFile):
    work: Seconds = 0.0
    cost: Seconds = 0.0
    io_in: Seconds = 0.0


class PartitionManifest(OpenSchema):
    """The fields of ``onnxpart.partition-manifest/1`` bench reads."""

    model: _Model = _Model()
    graph: str = "graph"
    cost_model: Optional[str] = None
    device: Optional[str] = None
    bottleneck: Seconds
    bottleneck_stage: int
    stages: list[_StageEntry]


class _PlanStage(_StageFile):
    compute_s: Seconds
    period_s: Seconds
    mesh: dict[str, Any] = {}


class PlanManifest(OpenSchema):
    """The fields of ``onnxpart.plan-manifest/1`` bench reads."""

    model: _Model = _Model()
    graph: str = "graph"
    cost_model: Optional[str] = None
    device: Optional[str] = None
    stages: list[_PlanStage]
    totals: dict[str, Any]


class _Piece(_StageFile):
    device: str


class _ScheduledOp(OpenSchema):
    name: str
    start: Seconds
    end: Seconds
    piece: int


class ScheduleManifest(OpenSchema):
    """The fields of ``onnxpart.schedule-manifest/1`` (latency objective) bench reads."""

    model: _Model = _Model()
    graph: str = "graph"
    objective: str = "latency"
    makespan: Seconds
    system: dict[str, Any] = {}
    ops: list[_ScheduledOp]
    pieces: list[_Piece]


class RematSequence(OpenSchema):
    """The fields of ``onnxpart.remat.sequence/1`` bench reads."""

    model: _Model = _Model()
    graph: str = "graph"
    base_duration: Seconds
    duration: Seconds
    peak_bytes: float
    baseline_peak_bytes: float
    budget_bytes: float


def detect(path: Path) -> tuple[str, str, dict[str, Any]]:
    """-> (command, the file that says so, its parsed JSON) for an output folder; exit 2 for anything else."""
    if not path.exists():
        raise UserError(f"{path} does not exist: give an output folder of partition, plan, schedule, remat or tile")
    if not path.is_dir():
        raise UserError(f"{path} is a file: give the output folder of partition, plan, schedule, remat or tile")
    for name in ("manifest.json", "sequence.json", "plan.json"):
        if (path / name).is_file():
            data = read_json(path / name, name)
            schema = data.get("schema") if isinstance(data, dict) else None
            kind = SCHEMAS.get((name, schema))
            if kind is None:
                raise UserError(f"{path / name} has schema {schema!r}, which bench does not run (it runs "
                                f"{', '.join(sorted({s for _, s in SCHEMAS}))})")
            return kind, name, data
    raise UserError(f"{path} is not an onnxpart output folder (no manifest.json, sequence.json or plan.json): "
                    "give the -o folder of partition, plan, schedule, remat or tile")


def model_file(recorded: Optional[str], sha256: Optional[str], given: Optional[Path], needed: bool) -> Optional[Path]:
    """The model the folder was made from: ``given`` (``--model``) or the recorded path; its sha256 must be
    the recorded one. None when neither exists and the run can do without it (``needed`` False)."""
    from onnxpart.onnx_io import file_sha256

    path = given if given is not None else (Path(recorded) if recorded else None)
    if path is None or not path.is_file():
        if given is not None:
            raise UserError(f"--model {given} does not exist")
        if needed:
            raise UserError(f"the folder was made from {recorded or 'a model it does not name'}, which is not there: "
                            "pass --model PATH")
        return None
    if sha256 and file_sha256(path) != sha256:
        raise UserError(f"{path} is not the model this folder was made from (its sha256 differs from the "
                        f"manifest's {sha256[:12]}…): the folder was made from another model")
    return path


def read_schema(schema, data: dict[str, Any], source: Path):
    """``data`` validated against ``schema`` (one error line naming ``source`` and the field)."""
    return validate(schema, data, str(source))
