"""The method registry (:mod:`onnxpart.schedule.common.methods`): both objectives offer the catalogue's
methods, the command's help names each, and a method added to a table is run and reported by ``solve``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

import onnxpart.schedule as schedule
from onnxpart.schedule import Instance, Options, latency, solve, throughput
from onnxpart.schedule.common.methods import CATALOGUE, method
from onnxpart.strategy import Registry
from onnxpart.schedule.latency import heuristics


def test_both_objectives_offer_the_catalogue_in_its_order_each_with_its_own_functions():
    assert latency.METHODS.names == throughput.METHODS.names == schedule.METHODS == tuple(CATALOGUE)
    assert [m.kind for m in latency.METHODS] == [m.kind for m in throughput.METHODS]
    assert all(latency.METHODS[m].run is not throughput.METHODS[m].run for m in CATALOGUE)


def test_the_help_names_every_registered_method():
    from onnxpart.cli.schedule_cmd import METHOD_HELP

    assert all(re.search(rf"\b{name}\b", METHOD_HELP) for name in schedule.METHODS)


def test_each_objective_has_its_default_methods_and_the_help_names_them():
    """Without ``--method`` each objective runs its own list (latency: SPLIT with the whole run, no CP-SAT,
    SA or EA beside it); the command's help, written out, says the same lists."""
    from onnxpart.cli.schedule_cmd import METHOD_HELP

    assert Options().methods == latency.DEFAULT_METHODS and "split" in latency.DEFAULT_METHODS
    assert Options(objective="throughput").methods == throughput.DEFAULT_METHODS
    assert Options(methods=("heft",), objective="throughput").methods == ("heft",)
    for name in ("latency", "throughput"):
        assert f"{name} {','.join(schedule.OBJECTIVES[name].DEFAULT_METHODS)}" in METHOD_HELP


def test_a_run_without_cp_sat_methods_never_loads_cp_sat():
    """Every ``onnxpart schedule`` run imports the package; CP-SAT's import (0.3-1.5 s: it pulls pandas) is left
    to the methods that solve with it, which at 20,000 ops are skipped by the size rule (issue 40)."""
    loaded = "print('ortools.sat.python.cp_model' in sys.modules); "
    code = ("import sys, onnxpart.schedule as s; " + loaded +
            "inst = s.Instance([[1.0, 2.0], [2.0, 1.0]], [(0, 1, 1.0)], batch_sizes=[(1, 2), (1, 2)]); "
            "s.solve(inst, s.Options(methods=('met', 'heft', 'sa'), time_limit=2.0)); "
            "s.solve(inst, s.Options(methods=('met', 'greedy', 'ea'), objective='throughput', batch=2, "
            "time_limit=2.0)); "
            + loaded)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]  # after the import, and after both objectives' runs


def test_a_method_added_to_the_table_is_run_and_reported(monkeypatch):
    """One function and one registry line: ``solve`` runs it, validates its schedule and lists its result."""
    def everything_on_device_1(name, context, seconds):
        sched = latency.simulator.simulate(context.instance, [1] * context.instance.n)
        return context.run.keep(name, sched, "ok", 0.0, note="all on device 1")

    monkeypatch.setitem(CATALOGUE, "one", ("heuristic", "everything on device 1"))
    table = Registry(*latency.METHODS, method("one", everything_on_device_1, 0.0))
    monkeypatch.setattr(latency, "METHODS", table)
    monkeypatch.setattr(schedule, "METHODS", table.names)
    inst = Instance(np.array([[1.0, 1.5], [1.5, 1.0]]), [(0, 1, 1.0)], latency=10.0, bandwidth=1.0)
    sol = solve(inst, Options(methods=("met", "one"), time_limit=5.0))
    assert [r.method for r in sol.results] == ["met", "one"] and sol.results[1].note == "all on device 1"
    assert sol.method == "one" and sol.makespan == 2.5 < heuristics.met(inst).schedule.makespan  # MET pays the link


def test_workers_default_to_one_per_core(monkeypatch):
    """``Options.workers`` 0 (the default, as ``--workers``) is one per core, resolved in one place."""
    seen = []
    monkeypatch.setattr(latency, "solve", lambda inst, options, board=None: seen.append(options.workers))
    inst = Instance(np.ones((1, 1)), [])
    solve(inst, Options(methods=("met",)))
    solve(inst, Options(methods=("met",), workers=3))
    assert Options().workers == 0 and seen == [os.cpu_count() or 1, 3]
