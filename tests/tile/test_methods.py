"""What tile's two problems share (onnxpart.tile.methods): one time budget whose shares come from the
registered weights, the dispatcher, and a solve that offers every answer and bound to the board."""

from __future__ import annotations

import pytest

from onnxpart import tile
from onnxpart.board import Board
from onnxpart.loading import load_costed
from onnxpart.tile.methods import MIN_SECONDS, Budget
from onnxpart.tile.onnx import METHODS as LAYOUT_METHODS
from onnxpart.tile.onnx import LayoutOptions, LayoutSolution
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.program import METHODS as PROGRAM_METHODS
from onnxpart.tile.program import ProgramOptions, ProgramSolution
from onnxpart.tile.program.programs import paper_program
from tests.tile.onnx.onnx_models import mlp


def test_shares_come_from_the_weights_of_the_methods_that_run():
    """ONNX greedy gets half the limit beside exact and all of it alone; local (weight 0) none."""
    both = Budget(10.0, {name: LAYOUT_METHODS[name].weight for name in ("local", "greedy", "exact")})
    alone = Budget(10.0, {name: LAYOUT_METHODS[name].weight for name in ("local", "greedy")})
    assert (both.share("greedy"), both.share("local"), alone.share("greedy")) == (5.0, 0.0, 10.0)
    assert both.deadline == both.start + 10.0 and 0.0 < both.left() <= 10.0


def test_a_spent_budget_still_gives_a_solver_its_floor():
    spent = Budget(0.0)
    assert spent.left() == MIN_SECONDS and spent.left(floor=1e-3) == 1e-3


def test_every_registered_method_has_a_kind_and_a_help_line():
    for methods in (LAYOUT_METHODS, PROGRAM_METHODS):
        for name, method in methods.items():
            assert method.name == name and method.kind in ("heuristic", "exact") and method.help
    assert tuple(LAYOUT_METHODS) == LayoutOptions.methods
    assert set(ProgramOptions.methods) <= set(PROGRAM_METHODS)


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
