"""Issue 30, "a short limit returns something valid": every problem's first answer — its fast heuristic —
is computed whatever the clock says, so a run whose time is spent before solving starts (a slow load, a
loaded CI machine) still answers, and never says infeasible (exit 4) for want of time.

The clock is made to lie (:func:`slow_clock`): every reading is a second later than the one before, so every
deadline a run sets has passed by the next time it looks, and every solver gets the least share
(:data:`onnxpart.strategy.FLOOR`). A first answer that waits on the clock gets nothing done; one computed by
bounded work is unchanged. The graphs are small random DAGs (:func:`tests.scale_graphs.random_dag`)."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from onnxpart.readers import read_graph, read_graph_data
from tests import scale_graphs
from tests.conftest import FIXTURES
from tests.safety.harness import SYSTEM

#: Seconds each clock reading moves on (more than any share a run hands out on these graphs).
STEP = 1.0


@pytest.fixture
def slow_clock(monkeypatch):
    """``time.monotonic`` and ``time.perf_counter`` — every name an ``onnxpart`` module bound to them (``from
    time import monotonic as now``) and :class:`~onnxpart.strategy.Budget`'s clock too — a second later at
    each reading. Afterwards every such name is the real clock again, those of modules first imported during
    the test too (they bound the fake one)."""
    from onnxpart import strategy

    real = {name: getattr(time, name) for name in ("monotonic", "perf_counter")}
    calls = [0]

    def later(name: str):
        def read() -> float:
            calls[0] += 1
            return real[name]() + calls[0] * STEP
        return read

    fakes = {name: later(name) for name in real}
    for name, fake in fakes.items():
        monkeypatch.setattr(time, name, fake)
    monkeypatch.setattr(strategy.Budget.__init__, "__kwdefaults__",
                        {**strategy.Budget.__init__.__kwdefaults__, "clock": fakes["monotonic"]})
    _rebind(real, fakes, monkeypatch.setattr)
    yield calls
    _rebind(fakes, real, setattr)


def _rebind(old: dict, new: dict, bind) -> None:
    """Every name of an ``onnxpart`` module that is ``old[name]``, bound to ``new[name]`` with ``bind``."""
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("onnxpart") and module is not None:
            for attr, value in list(vars(module).items()):
                for name, function in old.items():
                    if value is function:
                        bind(module, attr, new[name])


def _graph(n: int, seed: int = 0):
    return read_graph_data(scale_graphs.random_dag(n, seed=seed), "auto", "random_dag")


def test_partition_answers_with_no_time_left(slow_clock):
    from onnxpart import partition
    from onnxpart.partition.model import check_assignment, from_graph

    inst = from_graph(_graph(500))
    solution = partition.solve(inst, partition.Options(k=4, workers=1, bounds=("simple",)), seconds=0.1)
    check_assignment(inst, solution.assignment, 4)
    assert slow_clock[0] > 0 and np.isfinite(solution.value)


@pytest.mark.parametrize("method", ["greedy", "checkmate"])
def test_remat_answers_with_no_time_left(slow_clock, method):
    """At 90% on this graph the idle-span plan does not fit and every eviction pass goes over the budget:
    only a repair fits it. Old code: the repair waited on the clock, no method had a sequence, and the run
    said 'no sequence fits the budget' (exit 4). (checkmate: its model is skipped, the greedy answers.)"""
    from onnxpart import remat
    from onnxpart.remat.model import build_instance
    from onnxpart.remat.sequence import simulate

    inst = build_instance(_graph(300))
    options = remat.Options(budget=("fraction", 0.9), methods=(method,), workers=1)
    solution = remat.solve(inst, options, seconds=0.1)
    assert simulate(inst, solution.best.sequence).peak <= solution.budget


@pytest.mark.parametrize("status, first", [("no_solution", True), ("no_solution", False), ("infeasible", True)])
def test_remat_says_infeasible_only_when_a_method_proved_it(slow_clock, monkeypatch, status, first):
    """Checkmate asked alone, stopped before its first incumbent (``no_solution``, what HiGHS gives on a
    short limit), proves nothing: greedy's first answer stands in (old code: exit 4, 'no sequence fits'),
    and where that does not fit either the message says nothing was proven. Where checkmate proved the
    budget impossible (``infeasible``) the run says no sequence fits."""
    from onnxpart import remat
    from onnxpart.errors import InfeasibleError
    from onnxpart.remat import checkmate, heuristics
    from onnxpart.remat.model import MethodResult, build_instance
    from onnxpart.remat.sequence import simulate

    def stopped(instance, budget, seconds, **_):
        return MethodResult(method="checkmate", status=status, sequence=None, bound_status="none",
                            time_to_best=None, restriction=checkmate.RESTRICTION, solver="highs")

    monkeypatch.setattr(checkmate, "solve_checkmate", stopped)
    if not first:
        monkeypatch.setattr(heuristics, "first_answer", lambda *_: MethodResult(
            method="greedy", status="no_solution", sequence=None, bound_status="none", time_to_best=None,
            restriction="", solver="greedy"))
    inst = build_instance(_graph(40))  # small enough that its model is not skipped
    # in the file's order: checkmate alone (--order best would let the memory-minimizing order answer)
    options = remat.Options(budget=("fraction", 0.9), methods=("checkmate",), order="fixed", workers=1)
    if status == "infeasible" or not first:
        with pytest.raises(InfeasibleError) as error:
            remat.solve(inst, options, seconds=0.1)
        proven = "no sequence fits the budget" in str(error.value)
        assert proven == (status == "infeasible") and proven != ("none proved that none exists" in str(error.value))
        return
    solution = remat.solve(inst, options, seconds=0.1)
    assert solution.best.method == "greedy" and "first_answer" in solution.best.notes
    assert simulate(inst, solution.best.sequence).peak <= solution.budget


def _schedule_instance(n: int):
    from onnxpart.schedule import from_graph, load_system
    from onnxpart.schedule.system.costs import recorded_cost_fn

    graph = _graph(n)
    system = load_system(str(SYSTEM))
    return from_graph(graph, system, recorded_cost_fn(graph, system))


@pytest.mark.parametrize("method", ["cpsat", "milp", "split"])
def test_schedule_latency_answers_with_no_time_left(slow_clock, method):
    """Old code: an exact method asked alone had no schedule to start from; with no time it found none, and
    the run said 'no method found a feasible mapping' (exit 4)."""
    from onnxpart import schedule

    inst = _schedule_instance(300)
    solution = schedule.solve(inst, schedule.Options(methods=(method,), time_limit=0.1, workers=1))
    assert not schedule.validate(inst, solution.schedule)


def test_schedule_split_is_skipped_where_its_fixed_work_outlasts_the_solve():
    """Old code: on 2,000 ops with half a second (what the command gives ``--time-limit 0.1``) SPLIT's
    modules, channels and multi-channel bound took 3.5 s, the command ending 5 s past its limit."""
    from onnxpart import schedule

    inst = _schedule_instance(2000)
    solution = schedule.solve(inst, schedule.Options(methods=("met", "split"), time_limit=0.5, workers=1))
    split = next(r for r in solution.results if r.method == "split")
    assert split.status == "skipped" and split.note.endswith("(1000 ops a second)"), split
    assert solution.method == "met" and not schedule.validate(inst, solution.schedule)


def test_schedule_throughput_answers_with_no_time_left(slow_clock):
    """bMET, the first answer, runs to its end: old code cut it (and every list baseline) at the clock."""
    from onnxpart import schedule
    from onnxpart.schedule.throughput.simulator import validate

    inst = _schedule_instance(300)
    options = schedule.Options(objective="throughput", methods=("met",), batch=8, time_limit=0.1, workers=1)
    solution = schedule.solve(inst, options)
    assert solution.method == "met" and not validate(inst, solution.schedule)


@pytest.mark.parametrize("methods", [("local",), ("exact",)])
def test_tile_layouts_answer_with_no_time_left(slow_clock, methods):
    from onnxpart import tile
    from onnxpart.tile.onnx import LayoutOptions
    from onnxpart.tile.onnx.build import build_layout_instance
    from onnxpart.tile.onnx.heuristics import local

    graph = read_graph(FIXTURES / "transformer_block.onnx")
    free = build_layout_instance(graph, (2, 4))
    if methods == ("local",):
        # the plan all the time in the world gives (old code: the ops past the deadline stayed replicated:
        # another, slower plan on a loaded machine)
        assert tile.solve(free, LayoutOptions(methods=methods), seconds=0.1).results[0].layouts == local(free)
    inst = build_layout_instance(graph, (2, 4), memory=1.1 * free.min_memory())
    assert inst.replicated_plan() is None  # it does not fit: the plan must shrink tensors
    solution = tile.solve(inst, LayoutOptions(methods=methods, workers=1), seconds=0.1)
    assert not solution.replicated and inst.fits(solution.plan.layouts)
    assert solution.cost == pytest.approx(inst.cost(solution.plan.layouts))


@pytest.mark.parametrize("methods", [("local",), ("exact",)])
def test_tile_programs_answer_with_no_time_left(slow_clock, methods):
    from onnxpart import tile
    from onnxpart.tile.program import ProgramOptions
    from onnxpart.tile.program.model import build_instance
    from onnxpart.tile.program.programs import paper_program

    inst = build_instance(paper_program("power-set"))
    solution = tile.solve(inst, ProgramOptions(methods=methods, workers=1), seconds=0.1)
    labels = [inst.labels.index(solution.labels[v]) for v in inst.vertices]
    assert solution.cost == inst.cost(labels)
