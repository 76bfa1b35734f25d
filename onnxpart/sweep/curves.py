"""A sweep's rows as curves: per model and strategy, the objective against the swept setting (k for
partition, the budget for remat, the mesh for tile, the system for schedule), with the best setting, the
knee and what the certificates prove about them.

Every strategy minimizes a time (bottleneck, duration, makespan, step time), so on a curve:

* the **best** setting has the least upper bound (the best answer found);
* no finished setting can beat a setting ``s`` by more than its **margin** ``1 − min_t LB_t / UB_s``
  (``LB_t`` each setting's proven bound; infeasible settings excluded; unknown while a finished setting
  has no bound): a certified "the rest of the grid cannot do more than X% better";
* the **knee** is the cheapest setting — fewest stages, least memory, fewest devices — whose answer is
  within ``tolerance`` of the best: more resources buy less than that. Systems have no order, so
  schedule curves over systems have no knee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from onnxpart.errors import UserError

#: The option each strategy's curves run along (the first the grid sets), and whether its settings are
#: ordered by cost (a knee exists).
AXES: dict[str, tuple[str, ...]] = {"partition": ("stages",), "remat": ("budget",), "tile": ("mesh", "devices"),
                                    "schedule": ("system", "batch"), "plan": ("cluster", "objective")}
_UNORDERED = ("system", "cluster", "objective")


@dataclass
class Point:
    """One setting on a curve: its row, its label (``k=4``) and position (None: categorical)."""

    row: dict
    label: str
    x: Optional[float]

    @property
    def upper(self) -> Optional[float]:
        return self.row.get("upper_bound")

    @property
    def lower(self) -> Optional[float]:
        return self.row.get("best_lower_bound")

    @property
    def solved(self) -> bool:
        return self.upper is not None


@dataclass
class Curve:
    """A model × strategy × the grid's other options, along ``axis``."""

    model: str
    strategy: str
    axis: Optional[str]
    fixed: dict[str, Any]
    points: list[Point] = field(default_factory=list)
    best: Optional[Point] = None
    knee: Optional[Point] = None

    @property
    def title(self) -> str:
        rest = " ".join(f"{name}={_text(value)}" for name, value in self.fixed.items())
        return f"{self.model} — {self.strategy}" + (f" ({rest})" if rest else "")

    def margin(self, point: Point) -> Optional[float]:
        """``1 − min LB / UB(point)`` over the finished, feasible settings (None: some have no bound)."""
        finished = [p for p in self.points if p.solved]
        if point.upper is None or not finished or any(p.lower is None for p in finished) or point.upper <= 0:
            return None
        return max(0.0, 1.0 - min(p.lower for p in finished) / point.upper)


def curves(jobs: list, rows: list[dict], tolerance: float) -> list[Curve]:
    """Group the finished rows of ``jobs`` into curves (in grid order) and mark best and knee."""
    by_key = {row["key"]: row for row in rows}
    found: dict[tuple, Curve] = {}
    for job in jobs:
        row = by_key.get(job.key)
        if row is None or job.strategy not in AXES:  # annotate: a costs file, no objective
            continue
        axis = next((name for name in AXES.get(job.strategy, ()) if name in job.axis), None)
        axis = axis or next(iter(job.axis), None)
        fixed = {name: value for name, value in job.axis.items() if name != axis}
        ident = (job.model, job.strategy, axis, repr(sorted(fixed.items())))
        curve = found.setdefault(ident, Curve(job.model, job.strategy, axis, fixed))
        value = job.axis.get(axis) if axis else None
        curve.points.append(Point(row, f"{axis}={_text(value)}" if axis else job.strategy, None))
    for curve in found.values():
        _place(curve)
        _mark(curve, tolerance)
    return list(found.values())


def _place(curve: Curve) -> None:
    """Positions along the axis (k, budget bytes, devices of a mesh), sorted; settings with no position
    (a failed job's unresolved budget) go last. An unordered axis (systems) keeps the grid's order."""
    if curve.axis in _UNORDERED:
        return
    baseline = next((p.row.get("summary", {}).get("baseline_peak_bytes") for p in curve.points
                     if p.row.get("summary", {}).get("baseline_peak_bytes")), None)
    for point in curve.points:
        point.x = _position(curve.axis, point, baseline)
    curve.points.sort(key=lambda point: (point.x is None, point.x or 0.0))


def _position(axis: Optional[str], point: Point, baseline: Optional[float]) -> Optional[float]:
    value = point.row.get("options", {}).get(axis) if axis else None
    if axis == "budget":
        budget = point.row.get("summary", {}).get("budget_bytes")
        return float(budget) if budget is not None else _budget(value, baseline)
    if axis == "mesh" and isinstance(value, str):
        try:
            return float(math.prod(int(size) for size in value.lower().split("x")))
        except ValueError:
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _budget(text: Any, baseline: Optional[float]) -> Optional[float]:
    """A budget the job did not resolve (it failed): bytes as given, a percentage of the model's baseline
    peak (from a job that ran), else no position."""
    from onnxpart.units import parse_percent_or_bytes

    try:
        kind, value = parse_percent_or_bytes(str(text))
    except UserError:
        return None
    if kind == "fraction":
        return value * baseline if baseline else None
    return value if kind == "bytes" else None


def _mark(curve: Curve, tolerance: float) -> None:
    solved = [point for point in curve.points if point.solved]
    if not solved:
        return
    curve.best = min(solved, key=lambda point: point.upper)
    placed = [point for point in solved if point.x is not None]
    if len(placed) < 2:
        return
    limit = curve.best.upper * (1 + tolerance)
    curve.knee = next((point for point in placed if point.upper <= limit), None)


def _text(value: Any) -> str:
    from pathlib import Path

    if isinstance(value, list):
        return "+".join(map(_text, value))
    if isinstance(value, str) and ("/" in value or value.lower().endswith((".yaml", ".yml", ".json"))):
        return Path(value).stem
    return str(value).lower() if isinstance(value, bool) else str(value)
