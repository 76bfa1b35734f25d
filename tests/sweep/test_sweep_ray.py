"""`onnxpart sweep --engine ray` against a real Ray cluster on this machine (no mock): two nodes of one CPU
each, started by the fixture and stopped afterwards; the second node has a custom resource ``a100``.
(Ray itself resolves a local address to this machine's IP, so the nodes listen there, not on 127.0.0.1.)

The tests run in file order: the last one removes the second node."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from ray._common.utils import get_default_ray_temp_dir
from ray.cluster_utils import Cluster

from tests.safety.harness import Guard, run_cli
from tests.sweep.sweep_helpers import BLOCK, DIAMOND, TINY, processes_writing_to, records, results, rows


@pytest.fixture(scope="module")
def cluster():
    """(cluster, its second node): a head node with 1 CPU and a node with 1 CPU and resource a100.

    ``Cluster`` writes its address to ``ray_current_cluster`` in Ray's default temp folder (under
    ``$RAY_TMPDIR``, ``$TMPDIR`` or the system's), whatever ``temp_dir`` it is given, and does not create
    that folder: on a machine where Ray never ran it fails (issue 40), so the fixture makes it."""
    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                           "temp_dir": temp})
    node = cluster.add_node(num_cpus=1, resources={"a100": 1})
    cluster.wait_for_nodes()
    yield cluster, node
    cluster.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def test_ray_rows_are_the_local_rows(cluster, tiny, tmp_path):  # the cluster starts while tiny runs elsewhere
    """The object-store path: models travel as bytes, job folders come back as bytes."""
    local, _ = tiny
    out = tmp_path / "sweep"
    proc = run_cli("sweep", *TINY, "--engine", "ray", "--address", cluster[0].address, "--json", "-o", out,
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [json for json in proc.stdout.splitlines() if not json.startswith("{")] == []
    assert results(out) == results(local)
    assert {row["node"] for row in rows(out)} <= {cluster[0].head_node.node_id, cluster[1].node_id}
    for row in rows(out):
        if row["folder"]:
            assert sorted(p.name for p in (out / row["folder"]).iterdir()) == \
                sorted(p.name for p in (local / row["folder"]).iterdir())


def test_custom_resources_route_jobs_to_the_node_that_has_them(cluster, tmp_path):
    """--shared-fs: jobs write straight into the sweep folder; the tile job and the measured costs need an
    a100."""
    head, node = cluster
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"models: [{BLOCK}]\ntime_limit: 1\npartition: {{k: [1, 2]}}\n"
                          "tile: {devices: 2, resources: {a100: 1}}\n"
                          "annotate: {cost: measured, runs: 1, resources: {a100: 1}}\n")
    out = tmp_path / "sweep"
    proc = run_cli("sweep", sweep_file, "--engine", "ray", "--address", head.address, "--shared-fs", "-o", out,
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = {row["job"]: row for row in rows(out)}
    assert all(row["status"] == "ok" for row in found.values()) and len(found) == 4
    on_a100 = ("transformer_block-tile-devices=2", "transformer_block-annotate-cost=measured-runs=1")
    assert {found[job]["node"] for job in on_a100} == {node.node_id}
    costs = json.loads((out / "jobs" / on_a100[1] / "costs.json").read_text())
    assert costs["cost_model"] == "measured" and costs["measured"]["runs"] == 1

    sweep_file.write_text(f"models: [{BLOCK}]\ntile: {{devices: 2, resources: {{h100: 1}}}}\n")
    Guard(tmp_path / "cwd", (sweep_file,), tmp_path / "refused").refused(
        "sweep", sweep_file, "--engine", "ray", "--address", head.address, "-o", tmp_path / "refused",
        mention="h100=1")


def test_a_node_lost_mid_sweep_has_its_jobs_rerun_elsewhere(cluster, tmp_path):
    head, node = cluster
    out = tmp_path / "sweep"
    sweep = subprocess.Popen([sys.executable, "-m", "onnxpart.cli.app", "sweep", str(BLOCK), "--partition",
                              "k=1,2,3,4", "--time-limit", "2", "--engine", "ray", "--address", head.address,
                              "--shared-fs", "-o", str(out)], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(set(processes_writing_to(out)) - {sweep.pid}) < 2:  # a job runs on each node
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.1)
    finished_before = len(records(out)) if (out / "jobs").is_dir() else 0
    head.remove_node(node)  # the job running there dies with it
    try:
        _, stderr = sweep.communicate(timeout=240)
    finally:
        sweep.send_signal(signal.SIGKILL)
    assert sweep.returncode == 0, stderr
    assert finished_before < 4 and [row["status"] for row in rows(out)] == ["ok"] * 4


def test_a_local_ray_needs_no_earlier_ray_run_and_no_writable_home(tmp_path):
    """Issue 40: on a machine where Ray never ran (a new empty temporary folder) and whose home cannot be
    written (here a file), the local Ray that ``--engine ray`` starts must run: Ray's token authentication
    wrote ``~/.ray/auth_token`` (a traceback, exit 1), and matplotlib warned on every run."""
    home = tmp_path / "home"
    home.write_text("a file: nothing can be made under it")
    temp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    out = tmp_path / "sweep"
    try:
        proc = run_cli("sweep", DIAMOND, "--partition", "k=1,2", "--time-limit", "1", "--engine", "ray", "-o", out,
                       cwd=tmp_path / "cwd", env={"TMPDIR": temp, "HOME": str(home)}, timeout=300)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert "matplotlib" not in proc.stderr.lower(), proc.stderr
    assert [row["status"] for row in rows(out)] == ["ok", "ok"]
