"""One PNG per curve (matplotlib, Agg): the best answer found against the swept setting, the band down to
the proven lower bound, best and knee marked, settings that did not finish as red crosses.

* partition: bottleneck against k;
* remat: duration overhead (duration / the file order's duration − 1) against the budget, with the Pareto
  front (no other budget both smaller and cheaper);
* tile: step time against the mesh's devices;
* plan: the plan's objective against the cluster;
* schedule: makespan — or throughput, batch / batch makespan — against the system (or batch).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

from onnxpart.files import atomic_write_bytes
from onnxpart.sweep.curves import Curve, Point

_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def plot_curve(curve: Curve, path: Path) -> None:
    """Draw ``curve`` into ``path`` (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measure = _Measure(curve)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    solved = [p for p in curve.points if p.solved]
    xs = [measure.x(p) for p in solved]
    upper = [measure.y(p.upper, p) for p in solved]
    lower = [measure.y(p.lower, p) if p.lower is not None else measure.y(p.upper, p) for p in solved]
    ax.fill_between(xs, lower, upper, color="tab:blue", alpha=0.18, lw=0, label="proven band")
    ax.plot(xs, upper, "o-", color="tab:blue", lw=1.4, ms=4, label="best found")
    ax.plot(xs, lower, "--", color="tab:blue", lw=0.9, label="proven bound")
    if curve.strategy == "remat" and solved:
        front = _pareto(list(zip(xs, upper)))
        ax.step([x for x, _ in front], [y for _, y in front], where="post", color="tab:green", lw=1.2,
                label="Pareto front")
    for name, point, style in (("best", curve.best, "*"), ("knee", curve.knee, "D")):
        if point is not None:
            ax.plot([measure.x(point)], [measure.y(point.upper, point)], style, color="tab:red", ms=9,
                    label=f"{name}: {point.label}")
    failed = [p for p in curve.points if not p.solved]
    if failed:
        bottom = min(lower) if lower else 0.0
        ax.plot([measure.x(p) for p in failed], [bottom] * len(failed), "x", color="tab:red", ms=8,
                label="did not finish")
    measure.axes(ax)
    ax.set_title(curve.title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


class _Measure:
    """What a curve's axes show: positions (or the settings in order), and the objective in a readable
    unit (remat: overhead %, schedule throughput: inputs/s)."""

    def __init__(self, curve: Curve):
        self.curve = curve
        self.ordered = all(p.x is not None for p in curve.points)
        self.index = {id(p): n for n, p in enumerate(curve.points)}
        self.mib = curve.axis == "budget"
        rows = [p.row for p in curve.points if p.solved]
        self.throughput = bool(rows) and all("throughput" in r.get("summary", {}) for r in rows)
        times = [p.upper for p in curve.points if p.solved] or [1.0]
        self.scale, self.unit = next(((s, u) for u, s in _TIME_UNITS if max(times) >= s), (1e-9, "ns"))

    def x(self, point: Point) -> float:
        if not self.ordered:
            return float(self.index[id(point)])
        return point.x / 2**20 if self.mib else point.x

    def y(self, value: float, point: Point) -> float:
        summary = point.row.get("summary", {})
        if self.curve.strategy == "remat" and summary.get("base_duration"):
            return 100.0 * (value / summary["base_duration"] - 1.0)
        if self.throughput:
            return summary.get("batch", 1) / value if value > 0 else 0.0
        return value / self.scale

    def axes(self, ax) -> None:
        if not self.ordered:
            ax.set_xticks(range(len(self.curve.points)), [p.label for p in self.curve.points], rotation=20,
                          fontsize=7)
        label = {"stages": "k (pipeline stages)", "budget": "memory budget (MiB)", "mesh": "devices in the mesh",
                 "devices": "devices"}.get(self.curve.axis or "", self.curve.axis or "setting")
        ax.set_xlabel(label)
        if self.curve.strategy == "remat":
            ax.set_ylabel("duration overhead (%)")
        elif self.throughput:
            ax.set_ylabel("throughput (inputs/s; band: proven ceiling)")
        else:
            ax.set_ylabel(f"{_objective(self.curve)} ({self.unit})")


def _objective(curve: Curve) -> str:
    return {"partition": "bottleneck stage", "tile": "step time", "schedule": "makespan",
            "plan": "plan objective"}.get(curve.strategy, "objective")


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both coordinates (smaller x and smaller y), by x."""
    front: list[tuple[float, float]] = []
    best: Optional[float] = None
    for x, y in sorted(points):
        if best is None or y < best:
            front.append((x, y))
            best = y
    return front
