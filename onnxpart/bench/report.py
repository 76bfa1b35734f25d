"""``bench.json`` (schema ``onnxpart.bench/1``): the machine, the settings, and one row per unit the
folder's manifest predicts — predicted against measured, with the spread of the measurement and the
error in %. :class:`BenchFile` is the schema it is read back through (pydantic), like every other file
onnxpart writes.

A row's ``error`` is ``measured / predicted − 1`` (+0.25: the unit took 25% longer than predicted); None
where nothing was predicted or measured (a unit skipped, with its ``note`` saying why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from onnxpart.bench.timing import Timing
from onnxpart.validate import ReadBackSchema, validate

SCHEMA = "onnxpart.bench/1"


@dataclass
class Row:
    """One unit: ``kind`` says what it is (``stage``, ``piece``, ``chain``, ``pipeline-period``,
    ``pipeline-latency``, ``pipeline-speed-up``, ``one-worker-period``, ``pipeline-stage``, ``remat``,
    ``original``, ``remat-peak``, ``shard`` …), ``quantity`` what is compared (seconds, bytes, or a ratio;
    the spread's numbers are named ``median_s`` … for seconds, ``median`` … otherwise)."""

    unit: str
    kind: str
    predicted: Optional[float]
    measured: Optional[float]
    spread: Optional[Timing] = None
    quantity: str = "seconds"
    file: Optional[str] = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> Optional[float]:
        if self.predicted is None or self.measured is None or self.predicted <= 0:
            return None
        return self.measured / self.predicted - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "kind": self.kind, "quantity": self.quantity, "file": self.file,
                "predicted": self.predicted, "measured": self.measured, "error": self.error,
                "spread": None if self.spread is None else self.spread.to_dict("_s" if self.quantity == "seconds"
                                                                               else ""),
                "note": self.note, **self.extra}


def payload(folder, machine: dict, settings: dict, rows: list[Row], summary: dict, engine: str,
            calibration: Optional[dict] = None) -> dict[str, Any]:
    """The bench.json document."""
    return {"schema": SCHEMA, "folder": str(folder.path), "command": folder.kind,
            "model": {"path": folder.model_path, "sha256": folder.model_sha256},
            "graph": folder.manifest.get("graph"), "cost_model": folder.manifest.get("cost_model"),
            "device": folder.manifest.get("device"), "engine": engine, "machine": machine, "settings": settings,
            "rows": [row.to_dict() for row in rows], "summary": summary, "calibration": calibration}


class BenchRow(ReadBackSchema):
    unit: str
    kind: str
    quantity: str
    file: Optional[str] = None
    predicted: Optional[float] = None
    measured: Optional[float] = None
    error: Optional[float] = None
    spread: Optional[dict[str, float]] = None
    note: str = ""


class BenchFile(ReadBackSchema):
    """``bench.json`` read back (tests, tools): the fields every reader may rely on."""

    schema_id: str = Field(alias="schema")
    folder: str
    command: str
    engine: str
    machine: dict[str, Any]
    settings: dict[str, Any]
    rows: list[BenchRow]
    summary: dict[str, Any]
    calibration: Optional[dict[str, Any]] = None


def read_bench(data: Any, source: str = "bench.json") -> BenchFile:
    """``data`` (parsed bench.json) validated; its schema must be :data:`SCHEMA`."""
    from onnxpart.errors import UserError

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{source} is not an onnxpart bench file (schema {SCHEMA})")
    return validate(BenchFile, data, source)
