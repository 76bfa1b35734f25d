"""`onnxpart bench` on the command line: bench.json reads back through its schema, files are written whole,
and every refusal is one `error:` line with exit 2 (README, "Exit codes"); Ctrl-C and SIGTERM leave nothing
written and nothing running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from onnxpart.bench.report import read_bench
from tests.bench.conftest import matmul_chain
from tests.safety.harness import error_line, run_cli
from tests.safety.test_signals import group_members

FAST = ["--runs", "3", "--warmup", "1", "--micro-batches", "4", "--threads", "1"]


def test_bench_json_reads_back_and_the_folder_is_whole(chain_folder, tmp_path):
    _, folder = chain_folder
    before = sorted(p.name for p in folder.iterdir())
    proc = run_cli("bench", folder, *FAST, "-o", tmp_path / "b", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    written = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert written == document
    bench = read_bench(written)
    assert bench.command == "partition" and bench.engine == "local"
    assert [r.unit for r in bench.rows if r.kind == "stage"] == ["stage_0", "stage_1"]
    assert {r.kind for r in bench.rows} >= {"pipeline-period", "pipeline-latency", "one-worker-period"}
    assert all(r.measured > 0 for r in bench.rows)
    assert {"cpu", "cores", "os", "onnxruntime", "date"} <= set(bench.machine)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["bench.json", "bench.png"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left
    assert sorted(p.name for p in folder.iterdir()) == before  # the benched folder untouched
    again = run_cli("bench", folder, *FAST, "-o", tmp_path / "b", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in error_line(again)
    assert run_cli("bench", folder, *FAST, "-o", tmp_path / "b", "--force", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("case, words", [
    ("missing", "does not exist"),
    ("file", "is a file"),
    ("not-onnxpart", "not an onnxpart output folder"),
    ("other-model", "another model"),
    ("provider", "no CUDAExecutionProvider"),
    ("into-folder", "which this run reads"),
    ("bad-manifest", "stages"),
])
def test_refusals_are_one_error_line_and_exit_2(chain_folder, tmp_path, case, words):
    model, folder = chain_folder
    args = {"missing": [tmp_path / "nowhere"], "file": [model], "not-onnxpart": [tmp_path],
            "other-model": [folder, "--model", matmul_chain(tmp_path / "other.onnx", layers=6)],
            "provider": [folder, "--provider", "CUDA"], "into-folder": [folder, "-o", folder, "--force"],
            "bad-manifest": [_broken(folder, tmp_path)]}[case]
    proc = run_cli("bench", *args, *FAST, cwd=tmp_path / "cwd")
    assert proc.returncode == 2, proc.stderr
    assert words in error_line(proc)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a busy neighbour needs a core of its own")
def test_the_profile_and_the_stages_are_timed_beside_a_busy_neighbour(chain_folder, tmp_path):
    """``annotate --beside 1`` records its neighbour; ``bench --beside 1`` times the stages beside one too, and
    says so in bench.json; without --threads each is one error line."""
    model, _ = chain_folder
    costs = tmp_path / "beside.json"
    proc = run_cli("annotate", model, "--cost", "measured", "--threads", "1", "--beside", "1", "--runs", "3",
                   "--min-time", "0", "-o", costs, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(costs.read_text())["measured"] | {"end_to_end": 0, "kernel_total": 0} == {
        "end_to_end": 0, "kernel_total": 0, "runs": 3, "threads": 1, "min_time_s": 0.0, "beside": 1}
    out = tmp_path / "p"
    assert run_cli("partition", model, "-k", "2", "--costs", costs, "--time-limit", "3", "-o", out,
                   cwd=tmp_path).returncode == 0
    proc = run_cli("bench", out, *FAST, "--beside", "1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["settings"]["beside"] == 1
    assert [r["unit"] for r in document["rows"] if r["kind"] == "stage"] == ["stage_0", "stage_1"]
    for command in (["annotate", model, "--cost", "measured", "--beside", "1", "-o", tmp_path / "x.json"],
                    ["bench", out, "--runs", "3", "--beside", "1"]):
        proc = run_cli(*command, cwd=tmp_path)
        assert proc.returncode == 2 and "needs --threads" in error_line(proc), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "x.json").exists()


def _broken(folder, tmp_path):
    """A copy of the folder whose manifest lacks its stages."""
    copy = tmp_path / "broken"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["stages"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_calibrated_costs_are_accepted_by_partition(chain_folder, tmp_path):
    model, folder = chain_folder
    proc = run_cli("bench", folder, *FAST, "--calibrate", tmp_path / "cal.json", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    fit = json.loads(proc.stdout)["calibration"]
    assert fit["scales"] and fit["units"] == 2 and fit["fit_on"].startswith("kernel times")
    costs = json.loads((tmp_path / "cal.json").read_text())
    assert costs["schema"] == "onnxpart.costs/1" and costs["cost_model"] == "calibrated"
    again = run_cli("partition", model, "-k", "2", "--costs", tmp_path / "cal.json", "--time-limit", "3",
                    "-o", tmp_path / "p", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_calibration_charges_the_weights_a_light_model_builds_at_run_time(tmp_path):
    """squeezenet's ConstantOfShape weights run in every stage file: the calibrated op that owns one pays it."""
    from tests.conftest import light

    out = tmp_path / "p"
    assert run_cli("partition", light("squeezenet"), "-k", "2", "--time-limit", "3", "-o", out,
                   cwd=tmp_path).returncode == 0
    proc = run_cli("bench", out, *FAST, "--calibrate", tmp_path / "cal.json", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    generators = json.loads(proc.stdout)["calibration"]["generators_s"]
    costs = json.loads((tmp_path / "cal.json").read_text())
    owners = sum(op["work"] for op in costs["ops"] if op["const_nodes"])
    assert 0 < generators <= owners * (1 + 1e-9)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_pipeline_ends_every_worker_and_writes_nothing(chain_folder, tmp_path, signum):
    _, folder = chain_folder
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "onnxpart.cli.app", "bench", str(folder), "--runs", "200",
                             "--warmup", "1", "--micro-batches", "100000", "--threads", "1", "-o", str(out)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(group_members(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the command and its two pipeline workers
    assert proc.poll() is None, proc.communicate()
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # as a terminal sends Ctrl-C: to the whole group
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert err.decode().strip().splitlines()[-1] == "interrupted: nothing written"
    deadline = time.monotonic() + 10
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(proc.pid) == []
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = os.path.join(ROOT, "fixtures", "transformer_block.onnx")
SYSTEM = os.path.join(ROOT, "fixtures", "systems", "cpu_t4_a100.yaml")


@pytest.mark.parametrize("command, options, kinds", [
    ("remat", ["--budget", "139264"], {"original", "remat", "remat-duration-ratio", "original-peak", "remat-peak",
                                       "remat-peak-ratio"}),
    ("schedule", ["--system", SYSTEM], {"piece", "chain"}),
])
def test_remat_and_schedule_folders_get_their_rows(tmp_path, command, options, kinds):
    made = run_cli(command, BLOCK, *options, "--time-limit", "3", "-o", tmp_path / "out", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    proc = run_cli("bench", tmp_path / "out", *FAST, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    bench = read_bench(json.loads(proc.stdout))
    assert bench.command == command and {r.kind for r in bench.rows} == kinds
    assert all(r.measured is not None and r.measured > 0 for r in bench.rows)
    assert any(r.error is not None for r in bench.rows)
