"""What partition's, plan's and schedule's manifests predict, as :class:`~onnxpart.bench.folder.Unit` s and
the pipeline's numbers.

* **partition**: a stage's unit is its file, predicted at its ``work`` (Σ of its ops' seconds: what the
  stage alone computes; the transfers ``io_in``/``io_out`` are paid between workers, not inside a run). The
  pipeline's period is the manifest's ``bottleneck`` (Eq. 3 of Archer et al.: work + transfers + overflow),
  its latency Σ (work + io_in) over the stages.
* **plan**: a stage's unit is predicted at ``compute_s`` on its sub-mesh (a stage on more than one device runs
  whole here: its note says so); period ``totals.max_period_s``, latency ``totals.latency_s``.
* **schedule** (latency objective): a piece is predicted at Σ (end − start) of its ops; the chain at the
  ``makespan``. A piece runs where this machine has its device (a device whose spec is ``cpu`` on the
  CPU provider); the others are rows with a note, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from onnxpart.bench.folder import (Folder, PartitionManifest, PlanManifest, ScheduleManifest, Unit, read_schema)
from onnxpart.errors import UserError


@dataclass(frozen=True)
class PipelinePrediction:
    """The manifest's pipeline: its period (seconds per input at steady state) and one input's latency."""

    period: float
    latency: float

    @property
    def speed_up(self) -> float | None:
        """One input at a time (the latency) over the streamed period: the pipeline's predicted gain."""
        return self.latency / self.period if self.period > 0 else None


def partition_units(folder: Folder) -> tuple[list[Unit], PipelinePrediction]:
    m = read_schema(PartitionManifest, folder.manifest, folder.path / "manifest.json")
    units = [Unit(f"stage_{s.index}", s.file, tuple(s.inputs), tuple(s.outputs), s.work, tuple(s.ops))
             for s in m.stages if s.file]
    latency = sum(s.work + s.io_in for s in m.stages)
    return _some(units, folder), PipelinePrediction(m.bottleneck, latency)


def plan_units(folder: Folder) -> tuple[list[Unit], PipelinePrediction]:
    m = read_schema(PlanManifest, folder.manifest, folder.path / "manifest.json")
    units = []
    for s in m.stages:
        if not s.file:
            continue
        devices = int(s.mesh.get("devices", 1)) * int(s.mesh.get("nodes", 1))
        note = f"planned on a {s.mesh.get('name', devices)} mesh, run whole on one device here" if devices > 1 else ""
        units.append(Unit(f"stage_{s.index}", s.file, tuple(s.inputs), tuple(s.outputs), s.compute_s, tuple(s.ops),
                          note))
    period = float(m.totals.get("max_period_s") or max(s.period_s for s in m.stages))
    latency = float(m.totals.get("latency_s") or sum(s.period_s for s in m.stages))
    return _some(units, folder), PipelinePrediction(period, latency)


def schedule_units(folder: Folder, provider: str) -> tuple[list[Unit], float, dict[str, str]]:
    """(units in execution order, the predicted makespan, {piece: why it is not run here})."""
    m = read_schema(ScheduleManifest, folder.manifest, folder.path / "manifest.json")
    if m.objective != "latency":
        raise UserError(f"{folder.path}: bench runs schedule folders of the latency objective (this one is "
                        f"{m.objective!r}: its pieces are batch slices)")
    busy: dict[int, float] = {}
    for op in m.ops:
        busy[op.piece] = busy.get(op.piece, 0.0) + (op.end - op.start)
    specs = {d.get("name"): d.get("spec") for d in m.system.get("devices", [])}
    units, skipped = [], {}
    for piece in m.pieces:
        if not piece.file:
            continue
        reason = _not_here(specs.get(piece.device), piece.device, provider)
        unit = Unit(f"piece_{piece.index}", piece.file, tuple(piece.inputs), tuple(piece.outputs),
                    busy.get(piece.index, 0.0), tuple(piece.ops), reason or "")
        units.append(unit)
        if reason:
            skipped[unit.name] = reason
    return _some(units, folder), m.makespan, skipped


def _not_here(spec: Optional[str], device: str, provider: str) -> Optional[str]:
    """Why a piece on ``device`` (of ``spec``) is not timed with ``provider``; None when it is."""
    on_cpu = (spec or device.split(":")[0]) == "cpu"
    if on_cpu == (provider == "CPUExecutionProvider"):
        return None
    return f"planned on {device} ({spec or 'no spec'}), which this run's {provider} is not"


def _some(units: list[Unit], folder: Folder) -> list[Unit]:
    if not units:
        raise UserError(f"{folder.path}: the manifest lists no runnable file (a graph-only run writes none)")
    return units
