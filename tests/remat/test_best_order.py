"""``--order best`` (the default): the file's order and the memory-minimizing one, each with half of the time
the order search left; the shorter sequence answers, and the certificate's ``either-order`` bound (the lesser
of the two orders' bounds) is checked against brute force over both orders' stage-structured sequences."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from onnxpart import remat
from onnxpart.cli.app import app
from onnxpart.remat import moccasin, orders
from onnxpart.remat.sequence import baseline
from tests.remat.helpers import branching_dag, brute_force_fixed, instance, node_link, spy

BRANCHES = 3


def fork_edges(branches: int) -> list[tuple[int, int]]:
    """s -> a_i -> b_i -> t for each branch i; the file's order runs every a before any b (breadth first), so
    every a is held at once, where a depth-first order holds one."""
    a, b, sink = range(1, branches + 1), range(branches + 1, 2 * branches + 1), 2 * branches + 1
    return [(0, i) for i in a] + [(i, i + branches) for i in a] + [(j, sink) for j in b]


def fork(branches: int = BRANCHES):
    sizes = [1] + [10] * branches + [1] * branches + [1]
    return instance(sizes, [1] * len(sizes), fork_edges(branches))


def options(budget: int, **more) -> remat.Options:
    settings = {"methods": ("moccasin",), "time_limit": 30.0, "order_time_limit": 10.0, "workers": 1,
                "deterministic": True, **more}
    return remat.Options(budget=("bytes", float(budget)), **settings)


def either_order_bound(solution) -> float:
    return next(b.value for b in solution.lower_bounds if b.method == "either-order")


def test_the_memory_minimizing_order_answers_and_the_bound_is_the_lesser_of_the_two():
    inst = fork()
    budget = baseline(inst).peak - 10  # the file's order must recompute an a; a depth-first order fits
    solution = remat.solve(inst, options(budget))
    fixed, minmem = solution.tried
    assert (fixed["order"], minmem["order"]) == ("fixed", "minmem")
    assert fixed["tdi"] > 0 and fixed["tdi_lower_bound"] == pytest.approx(fixed["tdi"])  # proven in its stages
    assert solution.options.order == "minmem" and solution.best.profile.tdi == 0
    # the file order's bound is above this answer: only the lesser of the two holds for both orders
    assert either_order_bound(solution) == inst.base_duration < inst.base_duration * (1 + fixed["tdi_lower_bound"])
    cert = remat.certificate(solution)
    assert cert.details["orders_tried"] == solution.tried
    assert cert.details["instance_order"] == list(solution.instance.order) != list(inst.order)  # what is hashed
    assert remat.summary(solution)["orders_tried"] == solution.tried


def test_the_file_order_alone_runs_where_it_fits_or_is_memory_minimal():
    inst = fork()
    fits = remat.solve(inst, options(baseline(inst).peak))
    assert [t["order"] for t in fits.tried] == ["fixed"] and fits.options.order == "fixed"
    assert all(b.method != "either-order" for b in fits.lower_bounds)
    # one topological order; n0 is dropped while n1 (100 B) is held, and computed again for n3
    chain = instance([10, 100, 10, 10], [1, 2, 3, 4], [(0, 1), (1, 2), (2, 3), (0, 3)])
    alone = remat.solve(chain, options(110))
    assert [t["order"] for t in alone.tried] == ["fixed"] and alone.best.profile.recomputations == 1


def test_each_order_gets_half_of_what_the_order_search_left(monkeypatch):
    handed: list = []
    spy(monkeypatch, orders, "minmem_order", lambda inst, seconds, *_: seconds, handed)
    spy(monkeypatch, moccasin, "solve_moccasin", lambda inst, budget, opts, *_: opts.time_limit, handed)
    solution = remat.solve(branching_dag(6, 1), options(120, order_time_limit=4.0))
    assert handed == [("minmem_order", 4.0), ("solve_moccasin", 13.0), ("solve_moccasin", 13.0)]
    # both orders recompute here, and the file's wins: +1.9% against +14.8%
    assert [t["tdi"] > 0 for t in solution.tried] == [True, True] and solution.options.order == "fixed"
    assert either_order_bound(solution) == pytest.approx(solution.value)


@pytest.mark.parametrize("seed", range(8))
def test_best_order_matches_brute_force_over_both_orders(monkeypatch, seed):
    """On 6-node DAGs both orders are solved to optimality: the answer is the least duration over every
    stage-structured sequence of either order, and the either-order bound equals it."""
    inst = branching_dag(6, seed)
    found = []
    real = orders.minmem_order
    monkeypatch.setattr(orders, "minmem_order", lambda *args: found.append(real(*args)) or found[-1])
    low, high = inst.min_budget()[0], baseline(inst).peak
    for budget in sorted({int(low + (high - low) * f) for f in (0.0, 0.4, 0.8)}):
        found.clear()
        in_file_order = brute_force_fixed(inst, budget, max_copies=2)
        try:
            solution = remat.solve(inst, options(budget))
        except remat.InfeasibleError:
            in_minmem_order = brute_force_fixed(inst.with_order(found[0].order), budget, max_copies=2)
            assert in_file_order is None and in_minmem_order is None
            continue
        in_minmem_order = brute_force_fixed(inst.with_order(found[0].order), budget, max_copies=2)
        both = min(d for d in (in_file_order, in_minmem_order) if d is not None)
        assert solution.value == both
        if len(solution.tried) == 2:
            assert either_order_bound(solution) == pytest.approx(both)


def test_command_line_reports_both_orders_and_checks_the_certificate(tmp_path):
    inst_graph = tmp_path / "fork.json"
    sizes = [1] + [10] * BRANCHES + [1] * BRANCHES + [1]
    inst_graph.write_text(json.dumps(node_link(sizes, [1] * len(sizes), fork_edges(BRANCHES))))
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(app, ["remat", str(inst_graph), "--budget", "90%", "--time-limit", "20", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "in either order" in result.output and "in the minmem order's stages" in result.output
    payload = json.loads(runner.invoke(app, ["remat", str(inst_graph), "--budget", "90%", "--time-limit", "20",
                                             "--json"]).stdout)
    assert payload["order"] == "minmem" and [t["order"] for t in payload["orders_tried"]] == ["fixed", "minmem"]
    checked = runner.invoke(app, ["remat", str(inst_graph), "--budget", "90%", "--check-certificate", str(out),
                                  "--json"])
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"], checked.output
