"""``remat.solve`` on the shared base: one total time limit, shared by the order search, ``--budget min``'s
phase 1 and the methods (the command line used to hand each method the whole limit over again); the
bounds built in ``solve``; every feasible sequence offered to the board."""

from __future__ import annotations

import pytest

from onnxpart import remat
from onnxpart.board import Board
from onnxpart.onnx_io import load_graph
from onnxpart.remat import checkmate, heuristics, moccasin, orders
from onnxpart.remat.model import build_instance
from tests.conftest import FIXTURES
from tests.remat.helpers import spy


@pytest.fixture(scope="module")
def block():
    return build_instance(load_graph(FIXTURES / "transformer_block.onnx")[0])


def test_the_time_limit_is_the_whole_run_in_a_deterministic_run(monkeypatch, block):
    handed: list = []
    spy(monkeypatch, orders, "minmem_order", lambda inst, seconds, *_: seconds, handed)
    spy(monkeypatch, moccasin, "smallest_peak", lambda inst, floor, options: options.time_limit, handed)
    spy(monkeypatch, moccasin, "solve_moccasin", lambda inst, budget, options, *_: options.time_limit, handed)
    spy(monkeypatch, checkmate, "solve_checkmate_lp", lambda inst, budget, seconds, **_: seconds, handed)
    spy(monkeypatch, heuristics, "solve_greedy", lambda inst, budget, copies, search, *_: search, handed)
    options = remat.Options(budget=("min", 0), methods=("greedy", "checkmate-lp", "moccasin"), order="minmem",
                            time_limit=16.0, order_time_limit=4.0, workers=1, deterministic=True)
    solution = remat.solve(block, options)
    names = [name for name, _ in handed]
    assert names == ["minmem_order", "smallest_peak", "solve_moccasin", "solve_checkmate_lp", "solve_greedy"]
    seconds = dict(handed)
    # the order its 4 s; phase 1 and the three methods an equal part of the 12 s left; greedy searches a
    # quarter of its part
    assert seconds["minmem_order"] == 4.0
    assert [seconds[n] for n in names[1:4]] == pytest.approx([3.0, 3.0, 3.0])
    assert seconds["solve_greedy"] == pytest.approx(0.75)
    assert {r.method for r in solution.results} == {"moccasin", "checkmate-lp", "greedy"}


def test_bounds_are_built_in_solve_and_every_sequence_is_offered(block):
    offered = []
    board = Board()
    board.offer = lambda value, how: offered.append((how, value)) or True
    options = remat.Options(budget=("fraction", 0.95), methods=("moccasin", "greedy"), time_limit=10.0, workers=1,
                            deterministic=True)
    solution = remat.solve(block, options, board)
    assert [b.method for b in solution.lower_bounds][:2] == ["no-recompute", "moccasin"]
    assert all(b.method != "greedy" for b in solution.lower_bounds)  # a heuristic proves nothing
    assert remat.certificate(solution).lower_bounds == solution.lower_bounds
    assert offered == [(r.method, r.profile.duration) for r in solution.results]
    assert solution.value == min(value for _, value in offered) and solution.gap is not None
