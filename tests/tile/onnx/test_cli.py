"""`onnxpart tile model.onnx` end to end: files, certificates, pins, methods and bad input."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.conftest import FIXTURES
from tests.tile.cli import invoke, one_line_error
from tests.tile.onnx.onnx_models import mlp

BLOCK = FIXTURES / "transformer_block.onnx"


@pytest.fixture(scope="module")
def block_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("block") / "out"
    result = invoke(BLOCK, "--devices", 4, "-o", out, "--time-limit", 3, "--workers", 2, "--json")
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_transformer_block_files(block_run):
    out, summary = block_run
    assert {p.name for p in out.iterdir()} == {"plan.json", "certificate.json", "annotated.onnx"}
    onnx.checker.check_model(str(out / "annotated.onnx"), full_check=True)
    model = onnx.load(str(out / "annotated.onnx"))
    assert model.ir_version >= 11 and model.configuration[0].num_devices == 4
    specs = [s for n in model.graph.node for c in n.device_configurations for s in c.sharding_spec]
    assert specs and all(s.tensor_name for s in specs)
    sharded = [s for s in specs if s.sharded_dim]
    assert all(s.sharded_dim[0].simple_sharding[0].num_shards == 4 and list(s.device) == [0, 1, 2, 3] for s in sharded)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["schema"] == "onnxpart.tile-plan/1" and plan["mesh"]["shape"] == [4]
    for t in plan["tensors"]:
        assert t["layout"] in t["candidates"]
        kind = t["layout"][0]
        expected = ["Replicate()"] if kind == "R" else ["Partial()"] if kind == "P" else [f"Shard({t['layout'][2:-1]})"]
        assert t["placements"] == expected
    reshapes = [op for op in plan["ops"] if op["op_type"] == "Reshape"]
    assert reshapes and not any(op["replicated_only"] for op in reshapes)  # the Reshape family is in the catalog
    assert plan["replicated_only"] == [op["name"] for op in plan["ops"] if op["replicated_only"]]
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["problem"] == "tile" and cert["best_lower_bound"] <= cert["upper_bound"] * (1 + 1e-9)
    costs = {r["method"]: r["cost"] for r in summary["results"]}
    assert costs["exact"] <= costs["greedy"] * (1 + 1e-12) and costs["greedy"] <= costs["local"] * (1 + 1e-12)


def test_check_certificate_ok_and_tampered(block_run, tmp_path):
    out, _ = block_run
    ok = invoke(BLOCK, "--devices", 4, "--check-certificate", out)
    assert ok.exit_code == 0 and "certificate ok" in ok.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "certificate.json").write_text((out / "certificate.json").read_text())
    plan = json.loads((out / "plan.json").read_text())
    plan["totals"]["step_time_s"] *= 0.5
    (bad / "plan.json").write_text(json.dumps(plan))
    one_line_error(invoke(BLOCK, "--devices", 4, "--check-certificate", bad), 2, "certificate check failed")
    other = invoke(BLOCK, "--devices", 2, "--check-certificate", out)  # another mesh
    one_line_error(other, 2, "instance hash differs")


def test_mlp_pins_explain_compare(tmp_path):
    model = mlp(tmp_path / "mlp.onnx", batch=64, d_in=256, d_hidden=1024, d_out=256, bias=True)
    out = tmp_path / "out"
    result = invoke(model, "-d", 4, "-o", out, "--pin", "W1=S(1)", "--pin", "hb=S[1]", "--explain", "--compare",
                    "--time-limit", 2, "--workers", 1, "--mesh-bandwidth", "10GB/s")
    assert result.exit_code == 0, result.output
    assert "method" in result.output and "exact" in result.output
    plan = json.loads((out / "plan.json").read_text())
    layouts = {t["name"]: t for t in plan["tensors"]}
    assert layouts["W1"]["layout"] == "S(1)" and layouts["hb"]["ort_spec"] == "RS[0]"
    for r in plan["reshardings"]:
        assert r["forced_by"] and r["collective"] in ("all-gather", "all-reduce", "reduce-scatter", "all-to-all")
    onnx.checker.check_model(str(out / "annotated.onnx"))
    conflict = invoke(model, "-d", 3, "-o", tmp_path / "x", "--pin", "W1=S(0)")
    one_line_error(conflict, 2, "does not divide by 3")
    assert not (tmp_path / "x").exists()


def test_mesh_dividing_no_dim_replicates(tmp_path):
    model = mlp(tmp_path / "mlp.onnx")  # dims 8, 16, 32
    result = invoke(model, "-d", 3, "-o", tmp_path / "out", "--time-limit", 2, "--workers", 1)
    assert result.exit_code == 0, result.output
    assert "divide no dimension" in result.output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert {t["layout"] for t in plan["tensors"]} == {"R"}
    assert all(any("does not divide by 3" in e["reason"] for e in t["excluded"]) for t in plan["tensors"])


def test_a_plan_that_meets_the_closed_form_ends_the_search(tmp_path):
    """No dimension divides by 3: local's replicated plan meets the closed-form bound, so it is optimal and
    greedy and exact are not run (on a 20,000-op graph exact took 6 s of a 10 s limit to prove it again)."""
    model = mlp(tmp_path / "mlp.onnx")
    result = invoke(model, "-d", 3, "-o", tmp_path / "out", "--time-limit", 2, "--workers", 1, "--json")
    assert result.exit_code == 0, result.output
    cert = json.loads(result.stdout)["certificate"]
    assert cert["gap"] == 0 and cert["details"]["method"] == "local"
    ended = {r["method"]: (r["status"], r["note"]) for r in cert["details"]["results"]}
    assert ended["greedy"] == ended["exact"] == ("skipped", "skipped: local's plan meets a proven bound (optimal)")


def test_device_memory_infeasible_exit_4(tmp_path):
    model = mlp(tmp_path / "mlp.onnx")
    result = invoke(model, "-d", 4, "-o", tmp_path / "out", "--device-memory", "1KiB")
    one_line_error(result, 4, "smallest memory any layout needs")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,match", [
    (["--pin", "W1=Q(0)"], "unknown layout"),
    (["--pin", "nope=R"], "no tensor"),
    (["--method", "magic"], "unknown --method"),
    (["--labels", "row"], "--labels is for matrix programs"),
])
def test_bad_options(tmp_path, args, match):
    model = mlp(tmp_path / "mlp.onnx")
    one_line_error(invoke(model, "-d", 4, "-o", tmp_path / "out", *args), 2, match)
    assert not (tmp_path / "out").exists()


def test_devices_required(tmp_path):
    one_line_error(invoke(mlp(tmp_path / "m.onnx"), "-o", tmp_path / "out"), 2, "--devices")


def test_heuristics_alone_certify_the_closed_form_and_exit_3_above_max_gap(tmp_path):
    """Without exact the certificate still holds the closed-form bound (each op's least compute, nothing moved),
    which on a model where sharding pays leaves a gap over 5%: exit 3, files written."""
    model = mlp(tmp_path / "mlp.onnx", batch=512, d_in=1024, d_hidden=4096, d_out=1024)
    result = invoke(model, "-d", 4, "-o", tmp_path / "out", "--method", "local,greedy", "--max-gap", "5%")
    assert result.exit_code == 3, result.output
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    assert [b["method"] for b in cert["lower_bounds"]] == ["tile-closed-form"] and cert["gap"] > 0.05


def test_outputs_are_gathered_and_priced_unless_left_sharded(tmp_path):
    """Issue 28: a sharded graph output costs its final gather onto every device; --sharded-outputs leaves it
    sharded (plan.json says so) and --verify then checks every device's own piece."""
    model = mlp(tmp_path / "mlp.onnx", batch=256, d_in=512, d_hidden=2048, d_out=512)
    runs = {}
    for flag in ([], ["--sharded-outputs"]):
        out = tmp_path / ("sharded" if flag else "gathered")
        result = invoke(model, "-d", 4, "-o", out, "--time-limit", 5, "--workers", 1, *flag, *(["--verify"] * bool(flag)))
        assert result.exit_code == 0, result.output
        runs[bool(flag)] = json.loads((out / "plan.json").read_text())
    gathered, sharded = runs[False], runs[True]
    assert (gathered["outputs"], sharded["outputs"]) == ("gathered", "sharded")
    final = [r for r in gathered["reshardings"] if r["tensor"] == "y"]
    assert final and final[0]["to"] == "R" and final[0]["collective"] == "all-gather"
    assert not [r for r in sharded["reshardings"] if r["tensor"] == "y"]
    assert {t["name"]: t["layout"] for t in sharded["tensors"]}["y"] != "R"
    assert sharded["totals"]["step_time_s"] == pytest.approx(gathered["totals"]["step_time_s"] - final[0]["seconds"])


def test_replicated_only_note_names_the_largest_model_tensors(tmp_path):
    """Issue 28: the note names model tensors (largest first), not exporters' tiny constants: on 3 devices
    W1 and W2 (16x32) cannot be split, nor can the 32-element bias, which is left out."""
    model = mlp(tmp_path / "mlp.onnx", batch=9, d_in=16, d_hidden=32, d_out=16, bias=True)
    result = invoke(model, "-d", 3, "-o", tmp_path / "out", "--time-limit", 2, "--workers", 1)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the terminal wraps long lines
    assert "2 of 8 tensors can only be replicated (no dimension divides by 3), largest: W1, W2" in text
