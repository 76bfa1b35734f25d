"""``--time-limit`` at every size (issue 40) for the layout problem: what an LLM-sized graph costs is paid once
per distinct layer, not once per op, and every method stops at its share of the solve.

* ops that differ only in the values of small constants the catalog does not read (each layer's bias) share
  one composition, one tuple of choices and one cost table, and tensors of one shape and size one resharding
  table (on the 20,000-op transformer stack at 2x4 the build took 8.8 s and local 18.7 s; now 0.5 s and 1 s);
* ``local`` prices all an op's algorithms at once from those tables, and the instance prices every op of a
  plan at once (:meth:`LayoutInstance.best_choices`): the same plans and floats as one op and one algorithm at
  a time (:func:`_one_at_a_time`, the code before);
* greedy's deadline is its share of the solve, CP-SAT's model stops building at exact's deadline, an exact
  method with no time says why in its row, and one that is skipped loads no solver.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import numpy as np
import pytest

from onnxpart import tile
from onnxpart.loading import load_costed
from onnxpart.onnx_constants import small_constants
from onnxpart.readers import read_graph
from onnxpart.tile.onnx import LayoutOptions, exact, heuristics
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.heuristics import _nearest, fit_memory, greedy, local
from onnxpart.tile.onnx.reduce import reduce_instance
from tests import limit_graphs
from tests.conftest import FIXTURES

ROOT = FIXTURES.parent


def _stack(tmp_path, layers: int, mesh=(2, 4)):
    """The transformer stack of :mod:`tests.limit_graphs` (``layers`` blocks, each bias a small constant of
    its own values) on ``mesh``."""
    path = limit_graphs.build("transformer", layers * limit_graphs.BLOCK_OPS, tmp_path / f"stack{layers}.onnx")
    loaded = load_costed(path, device="a100")
    return build_layout_instance(loaded.graph, mesh, constants=small_constants(loaded.model.model))


def test_layers_share_their_compositions_choices_and_tables(tmp_path, monkeypatch):
    from onnxpart.tile.onnx import build as build_module

    calls = []
    real = build_module.meshes.compose_algorithms
    monkeypatch.setattr(build_module.meshes, "compose_algorithms", lambda *a: calls.append(1) or real(*a))
    one = _stack(tmp_path, 1)
    composed_once = len(calls)
    inst = _stack(tmp_path, 4)
    assert len(calls) - composed_once == composed_once  # four layers compose what one does
    block = len(one.ops)
    for first, other in zip(inst.ops[:block], inst.ops[block:]):
        assert first.choices is other.choices  # one tuple of choices per distinct op
    for second, third in zip(inst.ops[block:2 * block], inst.ops[2 * block:3 * block]):  # inner layers: tables too
        assert inst.table(second)[0] is inst.table(third)[0]
        for (_, _, a), (_, _, b) in zip(inst.table(second)[1], inst.table(third)[1]):
            assert a is b
    assert inst.reshard_table("l1_w_up")[1] is inst.reshard_table("l2_w_up")[1]


def _one_at_a_time(inst):
    """Section 6's local pass, one op and one algorithm at a time, each slot priced on its own."""
    x = {}
    for op in inst.ops:
        def cost(c):
            choice = op.choices[c]
            total = choice.seconds
            for t, want in zip(op.inputs, choice.inputs):
                total += inst.reshard_time(x[t] if t in x else _nearest(inst, t, want), want, t)
            for t, made in zip(op.outputs, choice.outputs):
                total += inst.reshard_time(made, x[t] if t in x else _nearest(inst, t, made), t)
            return total

        choice = op.choices[min(range(len(op.choices)), key=cost)]
        for t, want in itertools.chain(zip(op.inputs, choice.inputs), zip(op.outputs, choice.outputs)):
            x.setdefault(t, _nearest(inst, t, want))
    for t in inst.tensors:
        x.setdefault(t.name, t.domain[0])
    return fit_memory(inst, x)


def _instances(tmp_path):
    block = read_graph(FIXTURES / "transformer_block.onnx")
    free = build_layout_instance(block, (2, 4))
    dag = load_costed(limit_graphs.build("dag", 300, tmp_path / "dag.onnx"), device="a100").graph
    return [free, build_layout_instance(block, (2, 4), memory=1.1 * free.min_memory()),
            build_layout_instance(block, 4), build_layout_instance(dag, (2, 4)), _stack(tmp_path, 2, 4)]


def test_local_and_plan_prices_are_those_of_one_op_at_a_time(tmp_path):
    rng = np.random.default_rng(0)
    for inst in _instances(tmp_path):
        assert local(inst) == _one_at_a_time(inst)
        for _ in range(3):
            x = {t.name: t.domain[rng.integers(len(t.domain))] for t in inst.tensors}
            index, seconds = inst.best_choices(x)
            assert [inst.best_choice(op, x) for op in inst.ops] == list(zip(index.tolist(), seconds.tolist()))
            assert inst.cost(x) == sum(inst.best_choice(op, x)[1] for op in inst.ops) + inst.finals(x)


def test_greedy_ends_by_its_share_of_the_solve(monkeypatch):
    """Beside exact, greedy has half of what local left: its deadline, not the solve's."""
    seen = []
    real = heuristics.greedy
    monkeypatch.setattr(heuristics, "greedy",
                        lambda *a, **kw: seen.append((time.monotonic(), kw["deadline"])) or real(*a, **kw))
    inst = build_layout_instance(read_graph(FIXTURES / "transformer_block.onnx"), (2, 4))
    tile.solve(inst, LayoutOptions(workers=1), seconds=4.0)
    started, deadline = seen[0]
    assert deadline - started <= 2.0 + 0.05


def test_cpsat_stops_building_its_model_at_its_deadline():
    inst = build_layout_instance(read_graph(FIXTURES / "transformer_block.onnx"), (2, 4))
    hint = greedy(inst)
    layouts, bound = exact._cpsat(inst, reduce_instance(inst), 1e-9, hint, 1, 0)
    assert layouts == hint and bound.value is None and bound.status == "skipped", bound
    assert bound.note.startswith("skipped: no time for CP-SAT's model"), bound.note


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return limit_graphs.build("chain", 2000, tmp_path_factory.mktemp("chain") / "chain.onnx")


def test_an_exact_method_with_no_time_says_why_in_its_row(chain):
    inst = build_layout_instance(load_costed(chain, device="a100").graph, 4)
    solution = tile.solve(inst, LayoutOptions(workers=1), seconds=0.05)
    row = solution.results[-1]
    assert row.method == "exact" and row.status == "skipped" and row.value is not None, row
    assert row.note.startswith("skipped: no time for the dominance reductions"), row.note
    assert row.note == solution.lower_bounds[-1].note


def test_a_skipped_exact_method_loads_no_solver(chain):
    """The CP-SAT and networkx imports (0.3 s, more on a loaded machine) are paid by the method that runs them."""
    code = ("import sys\n"
            "from onnxpart import tile\n"
            "from onnxpart.loading import load_costed\n"
            "from onnxpart.tile.onnx import LayoutOptions\n"
            "from onnxpart.tile.onnx.build import build_layout_instance\n"
            f"inst = build_layout_instance(load_costed({str(chain)!r}, device='a100').graph, 4)\n"
            "before = {m for m in ('ortools', 'highspy', 'networkx') if m in sys.modules}\n"
            "solution = tile.solve(inst, LayoutOptions(workers=1), seconds=0.05)\n"
            "assert solution.results[-1].status == 'skipped', solution.results\n"
            "print(sorted(m for m in ('ortools', 'highspy', 'networkx') if m in sys.modules and m not in before))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout
