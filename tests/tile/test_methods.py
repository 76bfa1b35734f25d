"""What tile's two problems share on the strategy base (onnxpart.strategy): registries, greedy's deterministic
trials from the declared limit, the dispatcher, and a solve that offers every answer and bound to the board."""

from __future__ import annotations

import pytest

from onnxpart import tile
from onnxpart.board import Board
from onnxpart.loading import load_costed
from onnxpart.tile.onnx import REGISTRY as LAYOUT_REGISTRY
from onnxpart.tile.onnx import LayoutOptions, LayoutSolution
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.program import REGISTRY as PROGRAM_REGISTRY
from onnxpart.tile.program import ProgramOptions, ProgramSolution
from onnxpart.tile.program.programs import paper_program
from tests.tile.onnx.onnx_models import mlp


def test_greedy_trials_are_its_part_of_the_declared_limit_not_of_the_solve_seconds(tmp_path, monkeypatch):
    """The command hands the solve what loading left of --time-limit (``seconds``); greedy's deterministic
    trials still come from the declared limit and the methods' weights (half of it beside exact, all of it
    alone), so one limit gives one plan however long loading took."""
    from onnxpart.tile.onnx import heuristics

    seen = []
    real = heuristics.greedy
    monkeypatch.setattr(heuristics, "greedy", lambda *a, **kw: seen.append(kw["trials"]) or real(*a, **kw))
    inst = build_layout_instance(load_costed(mlp(tmp_path / "mlp.onnx"), cost="analytic", device="a100").graph, 2)
    for methods in (("local", "greedy", "exact"), ("local", "greedy")):
        tile.solve(inst, LayoutOptions(methods, time_limit=10.0, workers=1), seconds=2.5)
    assert seen == [heuristics.TRIALS_PER_SECOND * 5.0, heuristics.TRIALS_PER_SECOND * 10.0]


def test_every_registered_method_has_a_kind_and_a_help_line():
    for registry in (LAYOUT_REGISTRY, PROGRAM_REGISTRY):
        for method in registry:
            assert method.kind in ("heuristic", "exact") and method.help
    assert LAYOUT_REGISTRY.names == LayoutOptions.methods
    assert set(ProgramOptions.methods) <= set(PROGRAM_REGISTRY.names)


def test_a_matrix_program_offers_every_tiling_and_bound_to_the_board():
    board = Board()
    solution = tile.solve(paper_program("random-2", 1, "one"), ProgramOptions(workers=1), board)
    assert isinstance(solution, ProgramSolution)
    assert board.incumbent == solution.cost and board.found_by == solution.method
    assert [b.method for b in board.bounds] == [b.method for b in solution.lower_bounds] and board.bounds
    assert board.lower == pytest.approx(solution.best_lower_bound)


def test_a_layout_instance_goes_to_the_layout_problem(tmp_path):
    graph = load_costed(mlp(tmp_path / "mlp.onnx"), cost="analytic", device="a100").graph
    board = Board()
    solution = tile.solve(build_layout_instance(graph, 2), LayoutOptions(time_limit=5.0, workers=1), board)
    assert isinstance(solution, LayoutSolution)
    assert board.incumbent == pytest.approx(solution.cost, rel=1e-12)
    assert board.lower == pytest.approx(solution.best_lower_bound)
