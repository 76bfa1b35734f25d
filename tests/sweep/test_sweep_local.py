"""`onnxpart sweep` on the local engine, as a process: jobs, results, a failing job, resume after a kill,
timeouts, and the bad grids refused before any job starts."""

from __future__ import annotations

import json
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.safety.harness import Guard, run_cli
from tests.sweep.sweep_helpers import BLOCK, DIAMOND, TINY, csv_rows, processes_writing_to, records, rows


def test_every_job_has_a_row_and_the_failing_one_does_not_stop_the_sweep(tiny):
    out, proc = tiny
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout: JSON lines only
    found = rows(out)
    assert sorted(r["job"] for r in printed) == sorted(r["job"] for r in found) and len(found) == 6
    by_job = {r["job"]: r for r in found}
    failed = by_job["diamond-remat-budget=95pct"]
    assert (failed["status"], failed["exit_code"], failed["folder"]) == ("infeasible", 4, None)
    assert failed["error"].startswith("budget ") and "every sequence needs" in failed["error"]
    assert "every sequence needs" in (out / "jobs" / "diamond-remat-budget=95pct.log").read_text()
    ok = [r for r in found if r is not failed]
    assert all(r["status"] == "ok" and r["exit_code"] == 0 and r["folder"] == f"jobs/{r['job']}" for r in ok)
    assert all(r["upper_bound"] >= r["best_lower_bound"] * (1 - 1e-9) > 0 and r["peak_rss_bytes"] > 10 << 20 for r in ok)
    k1, k2 = by_job["transformer_block-partition-k=1"], by_job["transformer_block-partition-k=2"]
    assert k2["upper_bound"] < k1["upper_bound"] and k1["options"]["stages"] == "1"
    assert by_job["transformer_block-remat-budget=95pct"]["summary"]["budget_bytes"] > 0


def test_results_csv_report_and_plots(tiny):
    out, _ = tiny
    table = csv_rows(out)
    assert [r["job"] for r in table] == [r["job"] for r in rows(out)]
    assert {"options.stages", "options.budget", "summary.budget_bytes", "peak_rss_bytes", "gap"} <= set(table[0])
    report = (out / "report.md").read_text()
    assert "6 of 6 jobs finished: 1 infeasible, 5 ok." in report and "## Jobs that did not succeed" in report
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "01-diamond-partition.png", "02-diamond-remat.png", "03-transformer_block-partition.png",
        "04-transformer_block-remat.png"]


def test_a_jobs_folder_holds_exactly_what_the_command_writes(tiny, tmp_path):
    out, _ = tiny
    single = tmp_path / "single"
    proc = run_cli("partition", BLOCK, "-k", "2", "--time-limit", "1", "--workers", "1", "--seed", "0", "-o", single,
                   cwd=tmp_path / "cwd")
    assert proc.returncode == 0, proc.stderr
    job = out / "jobs" / "transformer_block-partition-k=2"
    assert sorted(p.name for p in job.iterdir()) == sorted(p.name for p in single.iterdir())
    assert (job / "manifest.json").read_bytes() == (single / "manifest.json").read_bytes()


def test_resume_reruns_nothing_finished_and_fail_on_error_exits_5(tiny):
    out, _ = tiny
    before = records(out)
    proc = run_cli("sweep", *TINY, "--json", "--resume", "--fail-on-error", "-o", out, cwd=out.parent)
    assert proc.returncode == 5, proc.stderr
    assert records(out) == before
    assert len(proc.stdout.splitlines()) == 6

    proc = run_cli("sweep", *TINY, "--resume", "--retry-failed", "-o", out, cwd=out.parent)
    assert proc.returncode == 0, proc.stderr
    rerun = {name for name, mtime in records(out).items() if before[name] != mtime}
    assert rerun == {"diamond-remat-budget=95pct.json"}


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGKILL, -9)])
def test_a_killed_sweep_resumes_where_it_stopped(tmp_path, signum, code):
    """Kill the sweep while a job runs, once its first job finished: nothing keeps running for it, and
    --resume runs only the jobs it had not finished."""
    out = tmp_path / "sweep"
    grid = [str(BLOCK), "--partition", "k=1,2,3", "--time-limit", "1", "--jobs", "1", "-o", str(out)]
    sweep = subprocess.Popen([sys.executable, "-m", "onnxpart.cli.app", "sweep", *grid], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ((out / "jobs").is_dir() and records(out) and set(processes_writing_to(out)) - {sweep.pid}):
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.1)
    time.sleep(0.5)  # the job is well under way (past its start-up)
    sweep.send_signal(signum)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == code, stderr
    if signum == signal.SIGINT:
        assert "interrupted" in stderr and "--resume runs the rest" in stderr
    time.sleep(0.5)
    assert processes_writing_to(out) == {}
    finished = records(out)
    assert 1 <= len(finished) < 3

    proc = run_cli("sweep", *grid, "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = records(out)
    assert len(after) == 3 and all(after[name] == mtime for name, mtime in finished.items())
    assert [r["job"] for r in rows(out)] == [f"transformer_block-partition-k={k}" for k in (1, 2, 3)]
    assert not [p for p in (out / "jobs").iterdir() if p.name.startswith(".")]


def test_a_job_past_its_timeout_is_killed_and_recorded(tmp_path):
    out = tmp_path / "sweep"
    proc = run_cli("sweep", BLOCK, "--tile", "mesh=2x2", "--time-limit", "30", "--job-timeout", "1", "-o", out,
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (row,) = rows(out)
    assert (row["status"], row["exit_code"], row["folder"]) == ("timeout", 137, None)
    assert row["error"] == "exceeded the job timeout of 1 s and was killed"
    # no job folder is left (what the job printed before the kill, if anything, is kept as NAME.log)
    assert sorted(p.name for p in (out / "jobs").iterdir() if p.suffix != ".log") == [f"{row['job']}.json"]


@pytest.mark.parametrize("args, mention", [
    (["--partition", "kk=2"], "partition has no option 'kk'"),
    (["--partition", "k=abc"], "--stages"),
    ([], "no strategies"),
    (["--tile", "mesh=2 resources=1"], "tile has no option 'resources'"),
    (["--partition", "k=2", "--engine", "ray", "--address", "127.0.0.1:9"], "cannot reach the Ray cluster"),
    (["--partition", "k=2", "--engine", "spark"], "unknown --engine"),
    (["--partition", "k=2", "--retry-failed"], "--retry-failed goes with --resume"),
])
def test_bad_grids_are_refused_before_any_job(tmp_path, args, mention):
    out = tmp_path / "sweep"
    Guard(tmp_path / "cwd", (DIAMOND,), out).refused("sweep", DIAMOND, *args, "-o", out, mention=mention)


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path):
    hidden = tmp_path / "no_ray" / "ray"  # shadows the installed ray: ``import ray`` fails as without it
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    out = tmp_path / "sweep"
    Guard(tmp_path / "cwd", (DIAMOND,), out).refused("sweep", DIAMOND, "--partition", "k=2", "--engine", "ray", "-o", out,
                                                     mention="pip install onnxpart[cluster]",
                                                     env={"PYTHONPATH": str(hidden.parent)})


@pytest.mark.invalid_onnx
def test_a_model_that_does_not_load_is_refused(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    out = tmp_path / "sweep"
    Guard(tmp_path / "cwd", (DIAMOND, broken), out).refused("sweep", DIAMOND, broken, "--partition", "k=2",
                                                            "-o", out, mention="broken.onnx")


def test_a_model_too_large_for_the_object_store_is_never_pickled(tmp_path):
    """1.05 GiB of (sparse) weights: refused before Ray starts, saying to use a shared filesystem."""
    build = runpy.run_path(str(FIXTURES.parent / "scripts" / "make_big_model.py"))["build"]
    model = Path(build(tmp_path / "big", 1.05, hidden=1024)["path"])
    out = tmp_path / "sweep"
    Guard(tmp_path / "cwd", (model,), out).refused("sweep", model, "--partition", "k=2", "--engine", "ray", "-o", out,
                                                   mention="--shared-fs")


def test_an_existing_folder_is_resumed_or_replaced_only_when_asked(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    guard = Guard(tmp_path / "cwd", (DIAMOND,), theirs)
    guard.refused("sweep", DIAMOND, "--partition", "k=2", "-o", theirs, mention="--resume")
    guard.refused("sweep", DIAMOND, "--partition", "k=2", "-o", theirs, "--force", mention="not an onnxpart sweep")
    guard.refused("sweep", DIAMOND, "--partition", "k=2", "-o", theirs, "--resume", mention="not an onnxpart sweep")


def test_an_input_inside_the_output_folder_is_refused(tiny, tmp_path):
    """--force would replace the folder that holds the model (a stage of an earlier sweep)."""
    out, _ = tiny
    stage = out / "jobs" / "transformer_block-partition-k=2" / "stage_0.onnx"
    Guard(tmp_path / "cwd", (stage,), out).refused("sweep", stage, "--partition", "k=1", "-o", out, "--force",
                                                   mention="an input of the sweep")


def test_a_sweep_file_error_names_the_line(tmp_path):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"models: [{DIAMOND}]\npartition:\n  k: [2, 4]\n  stage_memmory: 1MiB\n")
    out = tmp_path / "sweep"
    Guard(tmp_path / "cwd", (sweep_file,), out).refused("sweep", sweep_file, "-o", out,
                                                        mention="partition.stage_memmory (line 4): partition has no option")
