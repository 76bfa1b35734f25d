"""`bench --engine ray` on a real local Ray (no mock), started and stopped by the fixture: its rows are the
local engine's rows in structure (the same units, kinds, quantities and files, the same fields)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from ray._common.utils import get_default_ray_temp_dir
from ray.cluster_utils import Cluster

from onnxpart.bench import Options, bench
from onnxpart.bench.sessions import Settings


@pytest.fixture(scope="module")
def cluster():
    """A one-node Ray cluster with 2 CPUs. ``Cluster`` writes its address under Ray's default temp folder
    (``$TMPDIR``…) and does not create it (see tests/sweep/test_sweep_ray.py); its sockets live in a short
    folder under /tmp (Ray's socket paths must stay under 108 bytes)."""
    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                           "temp_dir": temp})
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def _shape(rows):
    return [(r["unit"], r["kind"], r["quantity"], r["file"], sorted(r), sorted(r["spread"] or {})) for r in rows]


def test_ray_rows_are_the_local_rows_in_structure(cluster, chain_folder):
    _, folder = chain_folder
    common = dict(runs=3, warmup=1, settings=Settings(threads=1), micro_batches=4)
    local = bench(folder, Options(**common))
    ray = bench(folder, Options(**common, engine="ray", address=cluster.address))
    assert _shape(ray.document["rows"]) == _shape(local.document["rows"])
    assert sorted(ray.summary) == sorted(local.summary)
    assert ray.document["engine"] == "ray" and all(r.measured > 0 for r in ray.rows)
