"""MILP-SPLIT on the shared runner: the same manifest with one or two worker processes, the live DP
bound on the board (floors included), the per-round wall deadlines, Ctrl-C (propagated, no worker left behind), and
jobs past their deadline."""

from __future__ import annotations

import json
import multiprocessing as mp

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart.board import Board
from onnxpart.cli.app import app
from onnxpart.schedule.common import ticks
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, segments
from onnxpart.schedule.latency import bounds, split, split_lane
from tests.conftest import FIXTURES
from tests.schedule.helpers import budgets_not_clock, chain_of_modules


def stacked_model(path, modules: int = 3, branches: int = 4, width: int = 128) -> None:
    """``modules`` modules in a row, each a Relu feeding ``branches`` parallel MatMuls summed: each Relu and
    Sum is a cut op, so SPLIT has a module per Relu → Sum to solve for every (entry, exit) device pair, and
    the branches are worth spreading over GPUs on fast links."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for m in range(modules):
        nodes.append(helper.make_node("Relu", [x], [f"r{m}"], name=f"relu{m}"))
        for b in range(branches):
            inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / 16,
                                                 f"w{m}_{b}"))
            nodes.append(helper.make_node("MatMul", [f"r{m}", f"w{m}_{b}"], [f"mm{m}_{b}"], name=f"mm{m}_{b}"))
        nodes.append(helper.make_node("Sum", [f"mm{m}_{b}" for b in range(branches)], [f"s{m}"], name=f"sum{m}"))
        x = f"s{m}"
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [64, width])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("system", ["cpu_2xa100_nvlink", "multinode_6x4"])  # the latter: symmetry reduction
def test_one_or_two_workers_give_the_same_manifest(tmp_path, monkeypatch, system):
    """The same manifest from one or two worker processes, on a stack whose optimum spreads over several
    GPUs — many equally short schedules, so a result taken by arrival order would show (on the CPU + T4 +
    A100 system every op of a small stack goes to the A100, the one schedule any solve finds). Switching
    is free here (``switch: 0``): with the GPUs' 5 µs launches this small stack stays on one device. The wall
    clock is out of reach: the deterministic budgets end every module solve."""
    model = tmp_path / "stack.onnx"
    stacked_model(model)
    limit = budgets_not_clock(monkeypatch, 20.0)
    described = yaml.safe_load((FIXTURES / "systems" / f"{system}.yaml").read_text())
    for device in described["devices"]:
        device["switch"] = 0
    system_file = tmp_path / "system.yaml"
    system_file.write_text(yaml.safe_dump(described))
    manifests = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        result = CliRunner().invoke(app, ["schedule", str(model), "--system", str(system_file), "-o", str(out),
                                          "--method", "split", "--workers", str(workers), "--time-limit",
                                          str(limit), "--seed", "4"])
        assert result.exit_code == 0, result.output
        manifests.append((out / "manifest.json").read_text())
        split_result = json.loads((out / "certificate.json").read_text())["details"]["methods"][0]
        assert split_result["method"] == "split" and split_result["status"] == "optimal", split_result
    assert len({op["device"] for op in json.loads(manifests[0])["ops"]}) >= 2  # not the one-device answer
    assert manifests[0] == manifests[1]


def test_split_posts_its_live_bound_and_ends_on_the_dp(monkeypatch):
    inst = chain_of_modules(np.random.default_rng(1), modules=3, size=2, k=3)
    records = []
    board = Board(records.append)
    res = split.milp_split(inst, time_limit=budgets_not_clock(monkeypatch, 10.0), workers=2, board=board)
    assert res.status == "optimal" and res.solves > len(res.modules)  # a job per (module, entry, exit)
    live = [r.lower for r in records if r.phase == "split"]
    assert live and live == sorted(live) and live[-1] == pytest.approx(res.bound)
    assert board.live["split-dp"] == pytest.approx(res.bound) and res.bound <= res.makespan + 1e-9


def test_round_deadlines_end_within_the_time_limit():
    assert split_lane.deadlines([1] * 5, 2, 100.0, 3.0) == pytest.approx([101, 101, 102, 102, 103])
    assert split_lane.deadlines([1, 1, 1], 1, 0.0, 3.0) == pytest.approx([1, 2, 3])  # unused time flows on
    assert split_lane.deadlines([1, 1], 8, 0.0, 3.0) == pytest.approx([3, 3])
    # rounds weigh their largest job: (4, 2) then (1, 1) share 6 seconds 4 : 1
    assert split_lane.deadlines([4, 2, 1, 1], 2, 0.0, 5.0) == pytest.approx([4, 4, 5, 5])


def test_inline_jobs_take_none_of_the_rounds_wall_time():
    """One-op modules run in the lane's own process beside the workers: counted in the rounds, 18 such
    jobs took a quarter of the transformer block's first pass from its 17-op and 12-op modules."""
    inst = chain_of_modules(np.random.default_rng(1), modules=1, size=6, k=2)
    one = Instance(np.array([[1e-6, 2e-6]]), [])  # a one-op module
    pairs = [split_lane.Pair((0, None, None), inst, 0.01)] + [split_lane.Pair((s, None, None), one, 0.001)
                                                           for s in range(1, 7)]
    budget = split.Budget(6.0)
    jobs = split._jobs(pairs, budget, workers=1, seed=0)
    assert [job.weight for job in jobs] == [inst.n] + [one.n] * 6
    assert all(job.deadline == pytest.approx(budget.deadline, abs=0.05) for job in jobs)


def test_a_slow_pair_may_take_the_time_the_pairs_after_it_do_not_need(monkeypatch):
    """CP-SAT's deterministic clock ran at a fifth of its nominal speed on one 17-op module: its share
    of the job (a third) cut it by the wall clock while the two pairs after it needed 0.1 s each."""
    inst = chain_of_modules(np.random.default_rng(1), modules=1, size=4, k=2)
    until = []

    def records(key, sub, budget, deadline, seed, on_bound, **kw):
        until.append(deadline)
        return split_lane.ModuleResult(key, None, None, "optimal")

    monkeypatch.setattr(split_lane, "solve_pair", records)
    need = 0.05 * ticks.DET_PER_SECOND  # 0.05 s of nominal wall time each
    job = split_lane.ModuleJob(tuple(split_lane.Pair((s, None, None), inst, need) for s in range(3)),
                               deadline=split_lane.now() + 3.0, seed=0)
    split_lane.run_module_job(job)
    assert until[0] == pytest.approx(job.deadline - 0.1, abs=1e-6)  # not a third of the 3 s
    assert until[1] == pytest.approx(job.deadline - 0.05, abs=1e-6) and until[2] == job.deadline



@pytest.mark.parametrize("latest, note", [("time_limit", True), ("optimal", False)])
def test_a_refinement_out_of_time_says_another_run_may_differ(latest, note):
    """Rounds the wall clock never let start change the answer as much as a solve it cut: said in the
    note where a pair on the chains was still open, not where every pair is proven (the demo's case)."""
    inst = chain_of_modules(np.random.default_rng(3), modules=2, size=3, k=2)
    segs = segments(inst, cut_ops(inst))
    tables, subs, _ = split._module_pairs(inst, segs)
    for s, table in enumerate(tables.ub):
        for pair in table:
            tables.ub[s][pair], tables.lb[s][pair], tables.latest[(s, *pair)] = 2.0, 1.0, latest
    budgets = {key: 0.01 for key in subs}
    split._refine(tables, subs, budgets, split.Budget(0.0), workers=1, seed=0, board=None)
    assert (tables.refine_left == pytest.approx(1.0)) is note
    assert ("the refinement out of time with 100% of its deterministic budget left" in split._clock_note(tables)) is note

def _sleeps(job):
    import time

    time.sleep(60)


def test_ctrl_c_propagates_and_leaves_no_worker_behind(monkeypatch):
    inst = chain_of_modules(np.random.default_rng(2), modules=2, size=2, k=2)
    started = []

    def interrupted(self, timeout=0.0):  # Ctrl-C while the module solves run
        started.append(len(self._running))
        raise KeyboardInterrupt

    monkeypatch.setattr(split_lane, "run_module_job", _sleeps)
    monkeypatch.setattr(split_lane, "INLINE_OPS", 0)  # every job in a worker
    monkeypatch.setattr(split_lane.Runner, "poll", interrupted)
    before = set(mp.active_children())
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C means stop and write nothing: no partial join
        split.milp_split(inst, time_limit=30.0, workers=2, board=Board())
    assert started == [2] and set(mp.active_children()) <= before


def test_a_job_past_its_deadline_answers_with_heft_not_infeasible(monkeypatch):
    inst = chain_of_modules(np.random.default_rng(4), modules=3, size=3, k=3)
    job = split_lane.ModuleJob((((0, None, None), inst, 1.0),), deadline=0.0, seed=0)
    [late] = split_lane.run_module_job(job)
    assert late.schedule is not None and late.status == "time_limit" and late.wall_stop
    assert late.bound == pytest.approx(bounds.critical_path_bound(inst).value)  # a closed form, no solve
    monkeypatch.setattr(split_lane, "GRACE", 60.0)  # late workers are waited for, however busy the machine
    res = split.milp_split(inst, time_limit=0.01, workers=1)  # far too little time for every pair
    assert res.schedule is not None and res.status in ("optimal", "time_limit")


def test_throughput_split_gives_the_same_schedule_with_any_worker_count(monkeypatch):
    """Modules in sequence, each one-worker CP-SAT with a deterministic budget
    (:mod:`onnxpart.schedule.throughput.split`)."""
    from onnxpart.schedule import Instance, Options, solve
    from onnxpart.schedule.throughput.simulator import validate as validate_batch

    chain = chain_of_modules(np.random.default_rng(6), modules=3, size=2, k=2)
    inst = Instance(chain.time, chain.edges, latency=0.5, bandwidth=2.0, batch_sizes=[(1, 2, 4)] * 2)
    found = []
    for workers in (1, 2):
        sol = solve(inst, Options(methods=("split",), objective="throughput", batch=4,
                                  time_limit=budgets_not_clock(monkeypatch, 20.0), workers=workers))
        result = sol.results[0]
        assert result.method == "split" and result.note == "4 modules solved in sequence", result  # no wall stop
        assert validate_batch(inst, sol.schedule) == []
        found.append((sol.schedule.splits, sol.schedule.makespan))
    assert found[0] == found[1]


def _fails(job):
    raise ValueError("a module solve broke")


def test_a_failing_module_solve_is_reported_not_fatal(monkeypatch):
    inst = chain_of_modules(np.random.default_rng(2), modules=2, size=2, k=2)
    monkeypatch.setattr(split_lane, "run_module_job", _fails)
    monkeypatch.setattr(split_lane, "INLINE_OPS", 0)  # every job in a worker
    before = set(mp.active_children())
    res = split.milp_split(inst, time_limit=5.0, workers=2)
    assert res.schedule is None and res.module_status == {"error": res.solves} and res.status == "error"
    assert res.reason == f"{res.solves} module solves failed (see the log)"
    assert set(mp.active_children()) <= before


def test_no_job_runs_once_the_incumbent_meets_a_proven_bound(monkeypatch):
    inst = chain_of_modules(np.random.default_rng(3), modules=2, size=2, k=2)
    board = Board()
    board.offer(0.0, "given")  # meets the floor 0: nothing left to find or prove
    monkeypatch.setattr(split_lane, "run_module_job", _fails)
    res = split.milp_split(inst, time_limit=5.0, workers=2, board=board)
    assert res.status == "interrupted" and res.bound is None and res.schedule is None and res.module_status == {}
    assert "not run" in res.reason


def test_jobs_still_running_at_the_time_limit_are_ended_and_their_pairs_answered_with_a_heuristic(monkeypatch):
    """A job the wall clock ends never reports: its pairs get their constructive schedule in the parent,
    as a pair past its deadline does in its job, so a short limit still joins a schedule (at 2 s on the
    benchmark's 20-module stack no job reported and SPLIT had none)."""
    from onnxpart.schedule import validate

    inst = chain_of_modules(np.random.default_rng(5), modules=2, size=2, k=2)
    monkeypatch.setattr(split_lane, "run_module_job", _sleeps)  # never returns by itself
    monkeypatch.setattr(split_lane, "INLINE_OPS", 0)
    monkeypatch.setattr(split_lane, "GRACE", 0.0)
    before = set(mp.active_children())
    res = split.milp_split(inst, time_limit=0.5, workers=2, board=Board())
    assert set(mp.active_children()) <= before
    assert res.status == "time_limit" and res.schedule is not None and validate(inst, res.schedule) == []
    pairs = res.module_status["time_limit"]  # refinement rounds re-solve some: solves ≥ pairs
    assert set(res.module_status) == {"time_limit"} and res.solves >= pairs
    assert "stopped by the wall clock" in res.reason
    assert 0 < res.bound <= res.schedule.makespan  # each pair's critical path, a closed form


def test_a_pinned_one_op_module_is_simulated_not_solved():
    """c_k pinned to u and the next cut's stand-in pinned to v: one schedule, optimal by itself."""
    from onnxpart.schedule import Instance

    inst = Instance([[1.0, 2.0, 3.0]] * 3, [(0, 1, 4.0), (1, 2, 4.0)], latency=0.5, bandwidth=2.0)  # a chain
    ops, entry, exit_ = segments(inst, cut_ops(inst))[1]
    assert ops == [1] and (entry, exit_) == (1, 2)
    sub, _ = split.segment_instance(inst, ops, {entry: 1}, (exit_, 2))
    res = split_lane.solve_pair((1, 1, 2), sub, budget=0.0, deadline=0.0, seed=0, on_bound=None)
    assert res.status == "optimal" and res.bound == res.schedule.makespan and not res.wall_stop
    assert res.schedule.makespan == pytest.approx(2.0 + 0.5 + 4.0 / 2.0)  # op 1 on device 1, then the transfer


def test_refinement_rounds_give_the_same_schedule_with_one_or_two_workers(monkeypatch):
    """First-pass budgets too small to prove the chains: the refinement rounds (steered by the floors and
    bounds, all from deterministic budgets) re-solve some pairs, the same ones whatever the worker count.
    The budgets are 0.002 deterministic seconds per second (0.002 proves every chain since the head/tail
    rows) at 10 s, the wall clock out of reach."""
    monkeypatch.setattr(ticks, "DET_PER_SECOND", 0.0002)
    limit = budgets_not_clock(monkeypatch, 10.0)
    inst = chain_of_modules(np.random.default_rng(0), modules=3, size=8, k=3)
    runs = [split.milp_split(inst, time_limit=limit, workers=workers, seed=1) for workers in (1, 2)]
    for res in runs:
        assert res.solves > sum(res.module_status.values())  # some pairs were solved again
        assert res.schedule is not None and res.bound <= res.makespan + 1e-9
        assert res.reason == ""  # no solve stopped by the wall clock
    assert list(runs[0].schedule.mapping) == list(runs[1].schedule.mapping)
    assert (runs[0].bound, runs[0].makespan, runs[0].solves) == (runs[1].bound, runs[1].makespan, runs[1].solves)


def test_the_rounds_over_the_chains_get_three_times_the_first_pass_budget(monkeypatch):
    """Most pairs never lie on a DP chain: the first pass over every pair gets a quarter of the run's
    deterministic budget (``FIRST_PASS``), and the rounds over the chains' open pairs the rest, which they
    spend where their budgets are too small to prove the chains (a tenth of the test above's). Before, each
    got half: inception_v2's ten 37-op modules stayed unproven at 60 s (LB/UB 0.895; 0.935 with a quarter)."""
    monkeypatch.setattr(ticks, "DET_PER_SECOND", 0.00002)
    limit = budgets_not_clock(monkeypatch, 10.0)
    calls, solve_modules = [], split_lane.solve_modules

    def recording(jobs, *args):
        calls.append(sum(pair.budget for job in jobs for pair in job.pairs))
        return solve_modules(jobs, *args)

    monkeypatch.setattr(split_lane, "solve_modules", recording)
    split.milp_split(chain_of_modules(np.random.default_rng(0), modules=3, size=8, k=3), time_limit=limit, seed=1)
    total = ticks.deterministic_seconds(limit)
    assert calls[0] == pytest.approx(total / 4)
    assert sum(calls[1:]) == pytest.approx(3 * calls[0])
