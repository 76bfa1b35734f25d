"""`onnxpart plan` end to end: the files it writes read back (stage files that pass the checker and, chained in
onnxruntime, reproduce the original; sharding specs on cluster devices; the picture), --json, --verify,
--check-certificate on the folder and on tampered manifests, and every bad input (exit 2, nothing written) or
cluster too small (exit 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from tests.conftest import FIXTURES

MODEL = FIXTURES / "transformer_block.onnx"
runner = CliRunner()

#: A device on which sharding pays on the small fixture: no launch overhead, a slow roofline, a fast link.
SLOW = """name: slow
peak_flops: {float32: 1.0e9}
memory_bandwidth: 1.0e9
memory_capacity: 1.0e9
op_overhead: 0
interconnect_bandwidth: 1.0e13
"""


def plan(*args):
    return runner.invoke(app, ["plan", *map(str, args)])


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "slow.yaml"
    path.write_text(SLOW)
    return path


def pipeline_args(slow: Path) -> list[str]:
    """Two stages of 1x2 on a 1x4 cluster, four micro-batches: sharded layouts and one transfer."""
    return [MODEL, "--cluster", f"1x4:{slow}", "--method", "dp", "--mesh-sizes", "2", "--objective", "throughput",
            "--batch", "4", "--micro-batches", "4", "--time-limit", "3"]


@pytest.fixture(scope="module")
def written(tmp_path_factory, slow) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("plan") / "out"
    result = plan(*pipeline_args(slow), "-o", out, "--verify", "--json")
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_json_result_and_files(written):
    out, summary = written
    assert {"output", "manifest", "certificate", "verify", "method", "value", "shape", "one_device"} <= set(summary)
    manifest = json.loads((out / "manifest.json").read_text())
    cert = json.loads((out / "certificate.json").read_text())
    assert manifest == summary["manifest"] and manifest["device"] == "slow"
    assert cert["problem"] == "plan" and cert["upper_bound"] == pytest.approx(manifest["totals"]["value_s"])
    assert cert["best_lower_bound"] <= cert["upper_bound"] and "units" in cert["details"]["family"]
    assert [r["method"] for r in manifest["comparison"]] == ["dp"]
    assert (out / "plan.png").stat().st_size > 0
    stages = manifest["stages"]
    assert len(stages) == 2 and manifest["transfers"][0]["source"] == 0
    assert sorted(op for s in stages for op in s["ops"]) == sorted(n.name for n in onnx.load(MODEL).graph.node)
    assert any(layout != "R" for s in stages for layout in s["layouts"].values())


def test_stage_files_pass_the_checker_carry_cluster_devices_and_chain_to_the_original(written):
    out, summary = written
    manifest = summary["manifest"]
    for stage in manifest["stages"]:
        onnx.checker.check_model(str(out / stage["file"]))  # the path form
        model = onnx.load(out / stage["file"])
        assert model.configuration[0].num_devices == 4
        used = {d for n in model.graph.node for c in n.device_configurations for s in c.sharding_spec
                for d in list(s.device) + [v for g in s.index_to_device_group_map for v in g.value] if d >= 0}
        assert used == set(stage["devices"][0])
    feeds = {"tokens": np.random.default_rng(0).standard_normal((1, 64, 32)).astype(np.float32)}
    want = ort.InferenceSession(str(MODEL)).run(None, feeds)[0]
    values = dict(feeds)
    for stage in manifest["stages"]:
        session = ort.InferenceSession(str(out / stage["file"]))
        names = [o.name for o in session.get_outputs()]
        values.update(zip(names, session.run(None, {name: values[name] for name in stage["inputs"]})))
    np.testing.assert_allclose(values["hidden"], want, rtol=1e-5, atol=1e-5)


def test_verify_runs_the_chain_and_every_stage_on_its_devices(written):
    report = written[1]["verify"]
    assert report["ok"] and report["sizes"]
    assert [s["stage"] for s in report["stages"]] == [0, 1] and all(s["ok"] for s in report["stages"])


def test_check_certificate_accepts_the_folder(written, slow):
    out, _ = written
    result = plan(*pipeline_args(slow), "--check-certificate", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"]


@pytest.mark.parametrize("tamper,match", [
    (lambda m: m["stages"][1].__setitem__("compute_s", m["stages"][1]["compute_s"] * 1.01), "compute_s"),
    (lambda m: m["stages"][0]["layouts"].__setitem__(next(iter(m["stages"][0]["layouts"])), "S(7)"), "layout"),
    (lambda m: m["stages"][0]["memory"].__setitem__("weights", 1.0), "memory"),
    (lambda m: m["transfers"][0].__setitem__("bytes", 1.0), "bytes"),
    (lambda m: m["totals"].__setitem__("value_s", 1.0), "value_s"),
])
def test_check_certificate_rejects_a_tampered_manifest(written, slow, tmp_path, tamper, match):
    folder = tmp_path / "copy"
    shutil.copytree(written[0], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    tamper(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = plan(*pipeline_args(slow), "--check-certificate", folder, "--json")
    assert result.exit_code != 0
    problems = json.loads(result.stdout)["problems"] if result.stdout.strip() else [result.output]
    assert any(match in p for p in problems), problems


def test_latency_compares_every_method_and_one_device(tmp_path):
    from onnxpart.plan import REGISTRY

    out = tmp_path / "out"
    result = plan(MODEL, "--cluster", "1x2:a100", "--time-limit", "3", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)["manifest"]
    assert [r["method"] for r in manifest["comparison"]] == list(REGISTRY.names)
    assert manifest["one_device"]["fits"] and manifest["device"] == "a100"
    assert manifest["totals"]["value_s"] <= manifest["one_device"]["value_s"] * (1 + 1e-9)
    result = plan(MODEL, "--cluster", "1x2:a100", "--check-certificate", out)
    assert result.exit_code == 0 and "certificate ok" in result.output


@pytest.mark.parametrize("args,match", [
    (["--cluster", "0x8:a100"], "nodes"),
    (["--cluster", "2x8:nosuchdevice"], "unknown device"),
    (["--cluster", "two nodes"], "NODESxDEVICES"),
    (["--cluster", "FILE:nodes: 2\n"], "devices_per_node"),
    (["--cluster", "1x4:a100", "--mesh-sizes", "3"], "--mesh-sizes"),
    (["--cluster", "1x4:a100", "--objective", "throughput", "--batch", "4", "--micro-batches", "3"], "divide"),
    (["--cluster", "1x4:a100", "--objective", "fastest"], "--objective"),
    (["--cluster", "1x4:a100", "--method", "dp,nope"], "nope"),
    (["--cluster", "1x4:a100", "--batch", "0"], "--batch"),
])
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(tmp_path, args, match):
    if args[1].startswith("FILE:"):
        (tmp_path / "cluster.yaml").write_text(args[1][len("FILE:"):])
        args = ["--cluster", tmp_path / "cluster.yaml", *args[2:]]
    out = tmp_path / "out"
    result = plan(MODEL, *args, "--time-limit", "2", "-o", out)
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and match in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_a_cluster_too_small_exits_4(tmp_path):
    (tmp_path / "tiny.yaml").write_text("nodes: 1\ndevices_per_node: 2\ndevice: a100\nmemory: 1KB\n")
    out = tmp_path / "out"
    result = plan(MODEL, "--cluster", tmp_path / "tiny.yaml", "--time-limit", "2", "-o", out)
    assert result.exit_code == 4, result.output
    assert "error:" in result.output and "no plan fits" in result.output
    assert not out.exists()


def test_sweep_runs_plan_grids(tmp_path):
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["sweep", str(MODEL), "--plan", "cluster=1x2:a100,2x2:a100 objective=latency",
                                 "--time-limit", "2", "--workers", "1", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["options"]["cluster"] for r in rows) == ["1x2:a100", "2x2:a100"]
    assert all(r["status"] == "ok" and r["strategy"] == "plan" and r["upper_bound"] > 0 for r in rows)
    assert all((out / r["folder"] / "manifest.json").is_file() for r in rows)


def test_sweep_refuses_a_bad_plan_grid_before_any_job(tmp_path):
    result = runner.invoke(app, ["sweep", str(MODEL), "--plan", "clusters=1x2:a100", "-o", str(tmp_path / "s")])
    assert result.exit_code == 2 and "plan has no option 'clusters'" in result.output
