"""Curves from rows: best setting, knee, certified margins, budget positions; the results files and the
report that read them."""

from __future__ import annotations

import csv
import io
import json

import pytest

from onnxpart.sweep.curves import curves
from onnxpart.sweep.folder import csv_text
from onnxpart.sweep.plots import _pareto
from onnxpart.sweep.report import write_report
from tests.sweep.test_grid import SYSTEM, jobs_of


def rows_for(jobs, values, **summary):
    """A finished row per job: values[i] = (upper, lower) or None for a job that failed."""
    rows = []
    for job, value in zip(jobs, values):
        upper, lower = value if value is not None else (None, None)
        rows.append({"key": job.key, "job": job.name, "model": job.model, "strategy": job.strategy,
                     "options": job.options, "status": "ok" if value else "infeasible", "exit_code": 0 if value else 4,
                     "error": None if value else "budget below what every sequence needs", "upper_bound": upper,
                     "best_lower_bound": lower, "gap": None if value is None or lower is None else 1 - lower / upper,
                     "seconds": 1.0, "peak_rss_bytes": 1 << 27, "folder": None, "summary": dict(summary)})
    return rows


def test_knee_is_the_cheapest_setting_within_tolerance_and_margins_are_certified():
    jobs = jobs_of({"partition": ["k=8,2,4,16"]})  # grid order is not the axis order
    rows = rows_for(jobs, [(10.2, 9.9), (30.0, 30.0), (10.4, 10.0), (10.0, 9.5)])
    (curve,) = curves(jobs, rows, tolerance=0.05)
    assert [p.label for p in curve.points] == ["stages=2", "stages=4", "stages=8", "stages=16"]
    assert curve.best.label == "stages=16" and curve.knee.label == "stages=4"
    # nothing in the grid is proven below 9.5: the best can be beaten by at most 1 - 9.5/10
    assert curve.margin(curve.best) == pytest.approx(0.05)
    assert curve.margin(curve.knee) == pytest.approx(1 - 9.5 / 10.4)
    assert curves(jobs, rows, tolerance=0.01)[0].knee.label == "stages=16"


def test_a_setting_without_a_bound_leaves_nothing_certified():
    jobs = jobs_of({"partition": ["k=2,4"]})
    (curve,) = curves(jobs, rows_for(jobs, [(3.0, 3.0), (2.0, None)]), tolerance=0.05)
    assert curve.best.label == "stages=4" and curve.margin(curve.best) is None


def test_budgets_are_placed_by_bytes_and_failed_ones_by_the_baseline():
    jobs = jobs_of({"remat": ["budget=90%,50%,70%"]})
    rows = rows_for(jobs, [(1.0, 1.0), None, (1.3, 1.2)], baseline_peak_bytes=1000.0)
    rows[0]["summary"]["budget_bytes"], rows[2]["summary"]["budget_bytes"] = 900, 700
    (curve,) = curves(jobs, rows, tolerance=0.05)
    assert [(p.label, p.x) for p in curve.points] == [("budget=50%", 500.0), ("budget=70%", 700.0),
                                                      ("budget=90%", 900.0)]
    assert curve.best.label == "budget=90%" and curve.knee.label == "budget=90%"
    assert curve.margin(curve.points[1]) == pytest.approx(1 - 1.0 / 1.3)


def test_systems_have_no_order_so_no_knee(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(SYSTEM.read_text() + "\n# another system\n")
    jobs = jobs_of({"schedule": [f"system={SYSTEM},{other}"]})
    (curve,) = curves(jobs, rows_for(jobs, [(2.0, 2.0), (1.0, 1.0)]), tolerance=0.5)
    assert [p.label for p in curve.points] == ["system=cpu_t4_a100", "system=other"]
    assert curve.best.label == "system=other" and curve.knee is None


def test_other_grid_options_make_separate_curves():
    jobs = jobs_of({"partition": ["k=2,4 bounds=simple,exact"]})
    found = curves(jobs, rows_for(jobs, [(2.0, 1.0)] * 4), tolerance=0.05)
    assert [(c.fixed, [p.label for p in c.points]) for c in found] == [
        ({"bounds": "simple"}, ["stages=2", "stages=4"]), ({"bounds": "exact"}, ["stages=2", "stages=4"])]


def test_pareto_front_keeps_only_undominated_budgets():
    assert _pareto([(3, 1.0), (1, 5.0), (2, 5.5), (4, 1.0), (2.5, 2.0)]) == [(1, 5.0), (2.5, 2.0), (3, 1.0)]


def test_results_csv_is_the_jsonl_flattened():
    jobs = jobs_of({"remat": ["budget=90% dim=a=1 dim=b=2"]})
    rows = rows_for(jobs, [(1.0, 0.5)], budget_bytes=10)
    table = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert table[0]["options.budget"] == "90%" and table[0]["summary.budget_bytes"] == "10"
    assert json.loads(table[0]["options.dim"]) == ["a=1", "b=2"]
    assert table[0]["error"] == "" and float(table[0]["upper_bound"]) == 1.0


def test_report_has_a_section_and_a_chart_per_curve(tmp_path):
    jobs = jobs_of({"partition": ["k=2,4"], "remat": ["budget=50%,90%"]})
    rows = rows_for(jobs, [(2.0, 2.0), (1.0, 0.9), None, (1.5, 1.4)], baseline_peak_bytes=1000.0,
                    base_duration=1.0)
    write_report(tmp_path, curves(jobs, rows, 0.05), rows, total=5, tolerance=0.05)
    report = (tmp_path / "report.md").read_text()
    assert "4 of 5 jobs finished: 1 infeasible, 3 ok." in report
    assert report.count("## ") == 3 and "## Jobs that did not succeed" in report
    assert "best: stages=4, 1 s; no finished setting is proven better by more than 10.0%." in report
    charts = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert charts == ["01-diamond-partition.png", "02-diamond-remat.png"]
    assert all((tmp_path / "plots" / c).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for c in charts)
