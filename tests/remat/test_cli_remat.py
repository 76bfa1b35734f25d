"""`onnxpart remat` end to end: emitted models run in onnxruntime with the original's outputs and their
own node order fits the budget; infeasible budgets exit 4; graph-only inputs; --json; determinism."""

from __future__ import annotations

import json
import re
import time

import onnx
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.onnx_graph import from_onnx
from onnxpart.memory import memory_profile
from onnxpart.onnx_io import prepare
from tests.conftest import FIXTURES, SHARED, light, requires_shared

runner = CliRunner()
GRAPHS = SHARED / "benchmarks" / "moccasin-graphs"


def invoke(*args):
    return runner.invoke(app, ["remat", *map(str, args)])


def test_building_remat_onnx_counts_as_writing_not_solving(tmp_path, monkeypatch):
    """``--time-limit`` bounds load + solve; building remat.onnx and checking its peak is writing the output, so
    a build made a second slower here shows in ``seconds.write`` (on the 20,000-op transformer of
    tests/test_time_limits.py it is 3 s, once counted as solving)."""
    from onnxpart.remat import emit

    check = emit.check_emitted

    def slower(*args, **kwargs):
        time.sleep(1.0)
        return check(*args, **kwargs)

    monkeypatch.setattr(emit, "check_emitted", slower)
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "95%", "-o", tmp_path / "out",
                    "--time-limit", "5", "--json")
    assert result.exit_code == 0, result.output
    seconds = json.loads(result.stdout)["seconds"]
    assert seconds["write"] >= 1.0, seconds


def emitted_peak(path):
    return memory_profile(from_onnx(prepare(onnx.load(str(path)), {}))).peak


def test_transformer_block_recomputes_and_verifies(tmp_path):
    out = tmp_path / "out"
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "95%", "-o", out, "--verify",
                    "--time-limit", "20", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json", "memory.png", "remat.onnx", "sequence.json"]
    model = onnx.load(str(out / "remat.onnx"))
    onnx.checker.check_model(model)
    clones = [n for n in model.graph.node if "__r1" in n.name]
    assert clones and all(all(o.endswith("__r1") for o in n.output) for n in clones)
    assert payload["verify"]["max_abs_error"] == 0.0
    budget = payload["budget_bytes"]
    assert emitted_peak(out / "remat.onnx") <= budget < payload["baseline_peak_bytes"]
    sequence = json.loads((out / "sequence.json").read_text())
    assert sequence["peak_bytes"] == max(e["memory_bytes"] for e in sequence["events"]) <= budget
    assert sequence["recomputations"] == sum(1 for e in sequence["events"] if e["recompute"] > 0) == len(clones)
    props = {p.key: p.value for p in model.metadata_props}
    assert "PRIORITY_BASED" in props["onnxpart.remat.session_options"]
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["problem"] == "remat" and cert["best_lower_bound"] <= cert["upper_bound"]


def test_light_model_minmem_order_runs_identically(tmp_path):
    out = tmp_path / "out"
    result = invoke(light("shufflenet"), "--budget", "95%", "--order", "minmem", "--order-time-limit", "5",
                    "-o", out, "--verify", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["verify"]["max_abs_error"] == 0.0 and payload["verify"]["outputs"] == 1
    assert emitted_peak(out / "remat.onnx") <= payload["budget_bytes"]
    assert payload["minmem"]["peak_bytes"] < payload["baseline_peak_bytes"]


def test_infeasible_budget_exits_4_with_the_reason(tmp_path):
    result = invoke(light("squeezenet"), "--budget", "50%", "-o", tmp_path / "out")
    assert result.exit_code == 4
    assert "every sequence needs" in result.output and "proven" in result.output
    assert not (tmp_path / "out").exists()
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "90%", "--time-limit", "20")
    assert result.exit_code == 4
    assert "proven impossible" in result.output and "--budget min" in result.output
    needed = re.search(r"needs --budget (\d+)", result.output).group(1)
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", f"{int(needed):,}", "--time-limit", "20")
    assert result.exit_code == 0, result.output  # the budget the message gives works, as printed


@requires_shared
def test_node_link_graph_reaches_the_known_optimum(tmp_path):
    graph = GRAPHS / "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json"
    out = tmp_path / "out"
    result = invoke(graph, "--budget", "80%", "--time-limit", "8", "-o", out, "--json")  # CP-SAT proves it in < 1 s
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json", "memory.png", "sequence.json"]
    best = payload["methods"][0]
    assert best["status"] == "optimal"
    assert round(100 * best["tdi"], 2) == 0.14  # known optimum (two independent solvers agree)
    assert best["tdi_lower_bound"] <= best["tdi"] + 1e-9


def test_dnn_partitioning_graph_is_rematerialized(tmp_path):
    """A dnn-partitioning graph, read through onnxpart.readers: fpgaLatency is the duration, the edges'
    size the tensor bytes. a -> b -> c -> d and a -> d: recomputing a before d lowers the peak 120 -> 110."""
    nodes = [{"id": i, "name": name, "fpgaLatency": 1.0} for i, name in enumerate("abcd")]
    edges = [(0, 1, 100), (1, 2, 10), (2, 3, 10), (0, 3, 100)]
    graph = tmp_path / "chain.json"
    graph.write_text(json.dumps({"nodes": nodes, "edges": [{"sourceId": u, "destId": v, "cost": 0.1, "size": size}
                                                           for u, v, size in edges]}))
    result = invoke(graph, "--budget", "110", "--time-limit", "20", "--json")
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["methods"][0]
    assert best["status"] == "optimal" and best["recomputations"] == 1 and best["peak_bytes"] <= 110
    assert best["tdi"] == 0.25
    result = invoke(graph, "--budget", "110", "--format", "node-link")
    assert result.exit_code == 2 and f"{graph} is not a networkx node-link graph" in result.output
    assert len(result.output.strip().splitlines()) == 1


@requires_shared
def test_compare_table_and_existing_folder(tmp_path):
    graph = GRAPHS / "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json"
    result = invoke(graph, "--budget", "90%", "--compare", "--time-limit", "3")  # the four methods in all
    assert result.exit_code == 0, result.output
    for method in ("moccasin", "checkmate", "checkmate-lp"):
        assert method in result.output
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("not onnxpart's")
    result = invoke(graph, "--budget", "90%", "-o", tmp_path / "taken")
    assert result.exit_code == 2 and "--force" in result.output


def test_same_seed_same_files(tmp_path):
    files = []
    for run in range(2):
        out = tmp_path / f"run{run}"
        result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "95%", "--seed", "3", "--deterministic",
                        "--workers", "2", "--time-limit", "20", "-o", out)
        assert result.exit_code == 0, result.output
        files.append({name: (out / name).read_bytes() for name in ("remat.onnx", "sequence.json")})
    assert files[0] == files[1]


def test_check_certificate_recomputes_the_result_and_catches_a_tampered_one(tmp_path):
    out = tmp_path / "out"
    model = FIXTURES / "transformer_block.onnx"
    result = invoke(model, "--budget", "95%", "--time-limit", "10", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) >= {"output", "manifest", "certificate", "verify"} and payload["output"] == str(out)
    checked = invoke(model, "--budget", "95%", "--check-certificate", out, "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"]
    cert = json.loads((out / "certificate.json").read_text())
    cert["upper_bound"] *= 0.9  # claims a shorter duration than the sequence has
    (out / "certificate.json").write_text(json.dumps(cert))
    checked = invoke(model, "--budget", "95%", "--check-certificate", out)
    assert checked.exit_code == 2 and "certificate upper bound" in checked.output


def test_max_gap_exits_3_with_the_files_written(tmp_path):
    out = tmp_path / "out"
    result = invoke(FIXTURES / "transformer_block.onnx", "--budget", "95%", "--time-limit", "10", "-o", out,
                    "--method", "greedy", "--max-gap", "0%")
    assert result.exit_code == 3 and "not provably within --max-gap" in result.output  # greedy proves nothing
    assert (out / "remat.onnx").is_file()
