"""``report.md`` and ``plots/``: per curve (model × strategy × the grid's other options) a chart, a table
of every setting, the best setting with its certified margin over the rest of the grid, and the knee;
then the jobs that did not succeed with their first error line."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Optional

from onnxpart.files import atomic_write_bytes
from onnxpart.sweep.curves import AXES, Curve, Point
from onnxpart.sweep.grid import slug
from onnxpart.sweep.job import SUCCEEDED
from onnxpart.sweep.plots import plot_curve
from onnxpart.units import format_bytes, format_seconds


def write_report(folder: Path, curves: list[Curve], rows: list[dict], total: int, tolerance: float) -> None:
    """Write ``plots/*.png`` and ``report.md`` into the sweep's folder."""
    (folder / "plots").mkdir(exist_ok=True)
    counts = collections.Counter(row["status"] for row in rows)
    lines = ["# onnxpart sweep", "",
             f"{len(rows)} of {total} jobs finished: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".",
             f"Rows: [results.csv](results.csv), [results.jsonl](results.jsonl). A setting's *margin* is certified: "
             f"no finished setting of its curve can be better by more than that (1 − the least proven bound / its "
             f"answer). The *knee* is the cheapest setting within {tolerance:.0%} of the best.", ""]
    for n, curve in enumerate(curves, 1):
        name = slug("-".join([f"{n:02d}", Path(curve.model).stem, curve.strategy,
                              *(f"{k}={v}" for k, v in curve.fixed.items())]))
        plot_curve(curve, folder / "plots" / f"{name}.png")
        lines += _curve_section(curve, f"plots/{name}.png")
    others = [row for row in rows if row["strategy"] not in AXES and row["status"] in SUCCEEDED]
    if others:
        lines += ["## Jobs without a curve", "", "| job | status | seconds | folder |", "|---|---|---:|---|"]
        lines += [f"| {row['job']} | {row['status']} | {row['seconds']:.1f} | [{row['folder']}]({row['folder']}) |"
                  for row in others]
        lines.append("")
    failed = [row for row in rows if row["status"] not in SUCCEEDED]
    if failed:
        lines += ["## Jobs that did not succeed", "", "| job | status | exit code | error |", "|---|---|---:|---|"]
        lines += [f"| {row['job']} | {row['status']} | {row['exit_code']} | {_cell(row['error'] or '')} |"
                  for row in failed]
    atomic_write_bytes(folder / "report.md", ("\n".join(lines) + "\n").encode())


def _curve_section(curve: Curve, plot: str) -> list[str]:
    lines = [f"## {curve.title}", "", f"![{curve.title}]({plot})", "",
             "| setting | status | best found | proven ≥ | gap | margin | seconds | peak RSS | folder |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for point in curve.points:
        row = point.row
        mark = "".join(f" **{name}**" for name, hit in (("best", point is curve.best), ("knee", point is curve.knee))
                       if hit)
        folder = f"[{row['folder']}]({row['folder']})" if row["folder"] else "-"
        lines.append(f"| {point.label}{mark} | {row['status']} | {seconds_text(point.upper)} | {seconds_text(point.lower)} "
                     f"| {percent_text(row['gap'])} | {percent_text(curve.margin(point))} | {row['seconds']:.1f} "
                     f"| {format_bytes(row['peak_rss_bytes'])} | {folder} |")
    return lines + [""] + [f"- {line}" for line in verdicts(curve)] + [""]


def verdicts(curve: Curve) -> list[str]:
    """What the curve says: its best setting and its knee, each with what the certificates prove."""
    lines = [f"best: {verdict(curve, curve.best)}"] if curve.best is not None else []
    if curve.knee is curve.best and curve.knee is not None:
        lines.append("knee: the best itself (every cheaper setting is further than the tolerance from it)")
    elif curve.knee is not None:
        lines.append(f"knee: {verdict(curve, curve.knee)}")
    return lines


def verdict(curve: Curve, point: Point) -> str:
    """``k=8, 12.3 µs (+2.0% over the best); no finished setting is proven better by more than 1.5%.``"""
    margin = curve.margin(point)
    proof = (f"no finished setting is proven better by more than {margin:.1%}" if margin is not None
             else "a finished setting has no proven bound, so nothing is certified")
    over = f" ({point.upper / curve.best.upper - 1:+.1%} over the best)" if curve.best and point is not curve.best else ""
    return f"{point.label}, {format_seconds(point.upper)}{over}; {proof}."


def seconds_text(value: Optional[float]) -> str:
    return "-" if value is None else format_seconds(value)


def percent_text(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]
