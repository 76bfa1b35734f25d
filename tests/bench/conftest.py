"""A sleep-free workload for bench: a chain of equal MatMuls (each 64×384 @ 384×384, seeded weights),
partitioned into two equal stages once per session."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxpart.bench.machine import idle_cores
from tests.safety.harness import run_cli

LAYERS, ROWS, WIDTH = 8, 64, 384


def matmul_chain(path: Path, layers: int = LAYERS, rows: int = ROWS) -> Path:
    """``layers`` MatMuls in a chain on ``rows`` rows, each with its own seeded weight (scaled to keep values
    bounded)."""
    rng = np.random.default_rng(0)
    nodes, weights = [], []
    for i in range(layers):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        out = f"h{i + 1}" if i < layers - 1 else "y"
        nodes.append(helper.make_node("MatMul", [f"h{i}" if i else "x", f"w{i}"], [out], name=f"mm{i}"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, WIDTH])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def chain_folder(tmp_path_factory) -> tuple[Path, Path]:
    """(the model, its partition -k 2 folder: two stages of four MatMuls each)."""
    work = tmp_path_factory.mktemp("chain")
    model = matmul_chain(work / "chain.onnx")
    proc = run_cli("partition", model, "-k", "2", "--time-limit", "5", "-o", work / "out", cwd=work)
    assert proc.returncode == 0, proc.stderr
    return model, work / "out"


@pytest.fixture
def two_free_cores() -> None:
    """Skip, with the reason, a test that needs two free cores (the pipeline of two workers, a tile shard timed
    with onnxruntime's default threads) where this process may not use two or the machine is loaded now (the
    check runs as the test starts, not when it is collected). ``make test`` runs these tests (marker
    ``free_cores``) after the parallel ones, alone on the machine."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip(f"this process may use {cores} core; the test needs two")
    idle = idle_cores_now()
    if idle < 1.5:
        pytest.skip(f"the machine is loaded ({idle:.2f} of its cores idle just now): the test needs two free cores")


def idle_cores_now(seconds: float = 0.5) -> float:
    """The machine's idle cores over the next ``seconds`` (``/proc/stat``'s idle and iowait share of all CPU time,
    times the cores), where the load average would still count a load that ended a minute ago; without
    ``/proc/stat``, the cores this process may use less the load average."""
    def sample() -> list[int]:
        with open("/proc/stat", encoding="ascii") as stat:
            return [int(v) for v in stat.readline().split()[1:]]

    try:
        first = sample()
        time.sleep(seconds)
        delta = [b - a for a, b in zip(first, sample())]
    except OSError:
        return idle_cores()
    return (os.cpu_count() or 1) * (delta[3] + delta[4]) / max(sum(delta[:8]), 1)
