"""The shared base of every strategy (onnxpart/strategy.py): the registry's parsing and help, the one time
budget and how it is shared, the method runner, the gap of a Solution and a certificate
(certificate.Bounded), Certificate.check; and that the
registries load no solver when the command line starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from onnxpart.board import Board
from onnxpart.certificate import Bounded, Certificate, LowerBound, relative_gap
from onnxpart.errors import UserError
from onnxpart.strategy import FLOOR, Budget, Method, MethodResult, Registry, cores, run_methods


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _noop(*_):
    return MethodResult(method="noop", status="heuristic")


REGISTRY = Registry(Method("met", "heuristic", _noop, help="fastest device"), Method("sa", "heuristic", _noop),
                    Method("cpsat", "exact", _noop, weight=2.0, help="CP-SAT"))


def test_registry_parses_known_names_in_order_once_and_refuses_the_rest():
    assert REGISTRY.parse("sa,met,sa") == ("sa", "met")
    assert REGISTRY.parse(" none ", "--bounds", extra=("none",), what="bound") == ("none",)
    for text, words in ((",", "no method given"), ("met,,sa", "empty method between commas"),
                        ("met,heft", "unknown --method heft: use met, sa, cpsat")):
        with pytest.raises(UserError, match=words):
            REGISTRY.parse(text)


def test_registry_gives_kinds_help_and_the_run_order():
    assert REGISTRY.names == ("met", "sa", "cpsat")
    assert REGISTRY.of_kind("exact") == ("cpsat",) and REGISTRY.of_kind("heuristic", "exact") == REGISTRY.names
    assert [m.name for m in REGISTRY.select(("cpsat", "met"))] == ["met", "cpsat"]  # registry order
    assert REGISTRY.help("Methods:") == ("Methods: met (heuristic): fastest device; sa (heuristic); "
                                         "cpsat (exact): CP-SAT.")
    with pytest.raises(ValueError, match="kind"):
        Method("x", "guess", _noop)
    with pytest.raises(ValueError, match="weight"):
        Method("x", "bound", _noop, weight=-1.0)
    with pytest.raises(ValueError, match="share a name"):
        Registry(Method("x", "bound", _noop), Method("x", "exact", _noop))
    assert cores(3) == 3 and cores(0) >= 1


def test_budget_shares_what_is_left_by_weight_on_its_clock():
    clock = Clock()
    budget = Budget(10.0, clock=clock)
    assert budget.share(1.0, later=3.0) == pytest.approx(2.5)
    clock.now += 4.0  # the step took 4 s of its 2.5: the next steps share the 6 s left
    assert budget.left() == pytest.approx(6.0) and not budget.expired()
    assert budget.share(2.0, later=1.0) == pytest.approx(4.0)
    assert budget.until(100.0) == budget.deadline and budget.part(0.15) == pytest.approx(1.5)
    assert budget.share(0.0, later=1.0) == FLOOR and budget.share(0.0) == pytest.approx(6.0)  # weight 0: no share
    clock.now += 7.0
    assert budget.expired() and budget.left() == 0.0 and budget.share(1.0) == FLOOR


def test_ledger_budget_shares_do_not_depend_on_how_long_steps_took():
    clock = Clock()
    budget = Budget(12.0, ledger=True, clock=clock)
    assert budget.take(budget.part(0.25)) == pytest.approx(3.0)
    clock.now += 50.0  # a deterministic solver may run past the wall clock: its share is what counts
    assert [budget.share(1.0, later=n) for n in (2.0, 1.0, 0.0)] == pytest.approx([3.0, 3.0, 3.0])
    assert budget.left() == 0.0


def test_run_methods_gives_each_its_share_and_offers_what_it_found():
    clock = Clock()
    seen = []

    def method(name: str, value: float | None, takes: float):
        def run(problem, options, board, seconds):
            seen.append(seconds)
            clock.now += takes
            return MethodResult(method=name, status="ok", value=value, seconds=takes)
        return run

    methods = [Method("a", "heuristic", method("a", 5.0, 1.0)),
               Method("b", "exact", method("b", None, 0.0), weight=2.0),
               Method("c", "heuristic", method("c", 3.0, 0.0))]
    board = Board()
    results = run_methods(methods, None, None, board, Budget(8.0, clock=clock))
    # a took 1 s of its 2: b gets its weight's part of the 7 s left, and leaves them all to c
    assert seen == pytest.approx([2.0, 14 / 3, 7.0])
    assert [r.method for r in results] == ["a", "b", "c"]
    assert board.incumbent == 3.0 and board.found_by == "c"


def test_solution_mixin_and_certificate_share_the_gap_rule():
    class Solution(Bounded):
        def __init__(self, value, bounds):
            self.value, self.lower_bounds = value, bounds

    bounds = [LowerBound("a", 8.0, "bound", "formula", 0.0), LowerBound("b", None, "error", "highs", 1.0)]
    solution = Solution(10.0, bounds)
    cert = Certificate("x", "0" * 64, "s", 10.0, bounds)
    assert solution.best_lower_bound == cert.best_lower_bound == 8.0
    assert solution.gap == cert.gap == relative_gap(10.0, 8.0) == pytest.approx(0.2)
    assert not solution.proven_optimal and Solution(8.0, bounds).proven_optimal
    assert Solution(0.0, bounds).gap == 0.0 and Solution(1.0, []).gap is None


def test_certificate_check_names_a_wrong_upper_bound_and_a_wrong_formula():
    cert = Certificate("x", "0" * 64, "s", 10.0, [LowerBound("simple", 4.0, "bound", "formula", 0.0),
                                                  LowerBound("mip", 9.0, "optimal", "highs", 1.0)])
    assert cert.check(10.0 * (1 + 1e-12), {"simple": 4.0, "other": 1.0}) == []
    assert cert.check(9.5, {"simple": 4.5}) == ["certificate upper bound 10.0 != recomputed 9.5",
                                                "simple bound 4.0 != recomputed 4.5"]


def test_the_command_line_reads_the_registries_without_loading_a_solver():
    code = ("import sys, onnxpart.cli.app as app; "
            "assert 'moccasin (exact)' in app.remat_cmd.METHOD_HELP; "
            "assert 'guess (bound)' in app.partition_cmd.BOUNDS_HELP; "
            "print(sorted(m for m in ('numpy', 'ortools', 'highspy', 'onnx', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
