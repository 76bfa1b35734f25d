"""``remat --budget min`` (issue 26, part 5): phase 2 starts from the sequence phase 1 found, so it never
reports that no sequence fits the budget --budget min chose; and the result says what was proven about
the budget apart from what was proven about the duration."""

from __future__ import annotations

import math
from dataclasses import replace

from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.onnx_io import load_graph
from onnxpart.remat import moccasin
from onnxpart.remat.model import build_instance
from onnxpart.remat.moccasin import MoccasinOptions, smallest_peak
from onnxpart.remat.sequence import baseline, simulate
from tests.conftest import FIXTURES, SHARED, requires_shared

G1 = SHARED / "benchmarks" / "moccasin-graphs" / "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json"


def test_phase2_starts_from_the_sequence_phase1_reached(monkeypatch):
    """At the peak phase 1 reached, with a greedy warm start that does not fit and no time to search
    (CP-SAT stops at once), phase 2 still returns a sequence within the budget: phase 1's."""
    instance = build_instance(load_graph(FIXTURES / "transformer_block.onnx")[0])
    options = MoccasinOptions(time_limit=2, workers=2, lp_bound=False)
    reached = smallest_peak(instance, instance.min_budget()[0], options)
    budget = math.ceil(reached.peak)
    assert budget < baseline(instance).peak  # the input order does not fit: something must be recomputed
    monkeypatch.setattr(moccasin, "greedy_sequence", lambda *args, **kwargs: None)
    no_time = replace(options, time_limit=1e-3, deterministic=True, start=reached)
    result = moccasin.solve_moccasin(instance, budget, no_time)
    assert result.sequence is not None and simulate(instance, result.sequence).peak <= budget


@requires_shared
def test_budget_search_stopped_on_its_limit_is_not_called_proven():
    """G1's smallest peak is far from proven in a second: the line says the budget is the smallest found,
    not proven, whatever phase 2 proves about the duration at that budget."""
    result = CliRunner().invoke(app, ["remat", str(G1), "--budget", "min", "--time-limit", "1", "--deterministic"])
    assert result.exit_code == 0, result.output
    assert "is the smallest peak found, not proven the smallest" in result.output
    assert "at this budget" in result.output


def test_budget_min_above_the_models_size_is_the_least_peak_the_greedy_reaches(monkeypatch):
    """Above MODEL_NODES (Moccasin's model skipped) --budget min was refused (exit 2). Now the greedy's
    first answer searches the budget: one it reaches (a sequence within it is the answer), below the input
    order's peak where recomputing helps, and proven only down to the memory floor ('heuristic')."""
    import onnxpart.remat as remat

    instance = build_instance(load_graph(FIXTURES / "transformer_block.onnx")[0])
    monkeypatch.setattr(remat, "MODEL_NODES", 10)
    solution = remat.solve(instance, remat.Options(budget=("min", 0), workers=1), seconds=5)
    search = solution.budget_search
    assert search["status"] == "heuristic" and search["proven_min_bytes"] == instance.min_budget()[0]
    assert search["proven_min_bytes"] <= solution.budget == search["budget_bytes"] < baseline(instance).peak
    assert simulate(instance, solution.best.sequence).peak <= solution.budget
    assert solution.best.notes["skipped"].startswith("moccasin's model skipped")
