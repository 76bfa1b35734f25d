"""bench on tile folders: every op gets a row with every virtual device's shard timed, a shard measures
like the same node run standalone on its local shape (a relative check, never a wall-clock time), the
cap on the ops timed is said in the rows, and the options the shards cannot honour are refused."""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxpart.bench import Options, bench
from onnxpart.bench.report import read_bench
from onnxpart.bench.timing import time_calls
from onnxpart.runtime import session_options
from tests.bench.conftest import WIDTH, matmul_chain
from tests.safety.harness import error_line, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = os.path.join(ROOT, "fixtures", "transformer_block.onnx")
FAST = ["--runs", "3", "--warmup", "1"]
#: a shard's median within this factor of the standalone run's (the two runs share a noisy machine)
TOLERANCE = 0.35
#: the rows of the MatMul whose shards are timed
SHARD_ROWS = 1024


def _tile(model, tmp_path, devices: int):
    out = tmp_path / f"tile{devices}"
    made = run_cli("tile", model, "--devices", str(devices), "--device", "cpu", "--time-limit", "5", "-o", out,
                   cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return out


@pytest.mark.parametrize("devices", [2, 4])
def test_every_op_gets_a_row_with_every_device_timed(tmp_path, devices):
    out = _tile(BLOCK, tmp_path, devices)
    proc = run_cli("bench", out, *FAST, "-o", tmp_path / "b", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    result = read_bench(document)
    plan = json.loads((out / "plan.json").read_text())
    shards = [r for r in document["rows"] if r["kind"] == "shard"]
    assert result.command == "tile" and [r["unit"] for r in shards] == [op["name"] for op in plan["ops"]]
    assert [r["predicted"] for r in shards] == [op["compute_seconds"] for op in plan["ops"]]
    assert all(len(r["devices"]) == devices and min(r["devices"]) > 0 for r in shards)
    assert all(r["measured"] == max(r["devices"]) for r in shards)
    kinds = {r.kind for r in result.rows}
    assert kinds == {"shard", "tile-compute", "original", "tile-compute-speed-up"}
    summary = result.summary
    assert summary["devices"] == devices and summary["ops_timed"] == summary["ops"] == len(plan["ops"])
    assert summary["call_overhead_s"] > 0 and summary["reshardings_not_timed"]["count"] == plan["totals"]["reshardings"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["bench.json", "bench.png"]


@pytest.mark.free_cores
@pytest.mark.usefixtures("two_free_cores")
def test_a_shard_measures_like_its_node_run_standalone(tmp_path):
    """A MatMul split by rows on 2 devices: each device's shard is a (SHARD_ROWS/2)×WIDTH @ WIDTH×WIDTH MatMul
    (milliseconds: big enough that a session call's own overhead does not decide the comparison). The
    standalone run is timed before and after bench, so a load that changes meanwhile widens the range. Shards
    run with onnxruntime's default threads (tile verify's sessions), which another process on the cores makes
    vary threefold between two equal shards: it needs two free cores."""
    out = _tile(matmul_chain(tmp_path / "chain.onnx", layers=2, rows=SHARD_ROWS), tmp_path, 2)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "alone",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [SHARD_ROWS // 2, WIDTH]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [WIDTH, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHARD_ROWS // 2, WIDTH])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), sess_options=session_options(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((SHARD_ROWS // 2, WIDTH), dtype=np.float32),
             "w": rng.standard_normal((WIDTH, WIDTH), dtype=np.float32)}
    before = time_calls(lambda: session.run(None, feeds), 3, 15).median
    result = bench(out, Options(runs=15, warmup=3))
    after = time_calls(lambda: session.run(None, feeds), 3, 15).median
    row = next(r for r in result.rows if r.unit == "mm0")
    assert row.extra["algorithm"] == "rows", row.extra
    low, high = min(before, after) * (1 - TOLERANCE), max(before, after) * (1 + TOLERANCE)
    for median in row.extra["devices"]:
        assert low <= median <= high, (row.extra["devices"], before, after)


def test_the_cap_on_timed_ops_is_said_in_the_rows(tmp_path):
    out = _tile(BLOCK, tmp_path, 2)
    result = bench(out, Options(runs=2, warmup=1, max_ops=3))
    shards = [r for r in result.rows if r.kind == "shard"]
    timed = [r for r in shards if r.measured is not None]
    assert len(timed) == 3 and result.summary["ops_timed"] == 3
    slowest = sorted((r.predicted for r in shards), reverse=True)[:3]
    assert sorted((r.predicted for r in timed), reverse=True) == slowest
    assert all("--max-ops" in r.note for r in shards if r.measured is None)
    assert "tile-compute-speed-up" not in {r.kind for r in result.rows}  # Σ of some ops is no speed-up


@pytest.mark.parametrize("option", [["--threads", "1"], ["--optimize"]])
def test_options_the_shards_cannot_honour_are_refused(tmp_path, option):
    out = _tile(BLOCK, tmp_path, 2)
    proc = run_cli("bench", out, *FAST, *option, "-o", tmp_path / "b", cwd=tmp_path)
    assert proc.returncode == 2 and "do not apply to a tile folder" in error_line(proc)
    assert not (tmp_path / "b").exists()


def test_a_tile_folder_of_another_model_is_refused(tmp_path):
    out = _tile(BLOCK, tmp_path, 2)
    other = matmul_chain(tmp_path / "other.onnx", layers=2)
    proc = run_cli("bench", out, *FAST, "--model", other, cwd=tmp_path)
    assert proc.returncode == 2 and "another model" in error_line(proc)
