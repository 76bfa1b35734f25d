"""`onnxpart schedule` end to end: files, runnable pieces, --verify, the certificate re-simulated (and a
tampered one refused), --max-gap, --max-pieces, --compare, --json, bad input and determinism."""

from __future__ import annotations

import json

import matplotlib.image
import onnx
import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.schedule import METHODS
from tests.conftest import FIXTURES, light

runner = CliRunner()
SYSTEM = FIXTURES / "systems" / "cpu_t4_a100.yaml"
DIAMOND = FIXTURES / "diamond.onnx"
LIGHT = light("inception_v1")  # branches: several devices and pieces on this system


def invoke(*args):
    return runner.invoke(app, ["schedule", *[str(a) for a in args]])


@pytest.fixture(scope="module")
def light_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("light") / "out"
    result = invoke(LIGHT, "--system", SYSTEM, "-o", out, "--time-limit", "2", "--verify", "--json")
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


@pytest.mark.parametrize("model", [DIAMOND, LIGHT])
def test_files_pieces_and_verify(model, tmp_path, light_out):
    if model == LIGHT:
        out, summary = light_out
    else:
        out = tmp_path / "out"
        result = invoke(model, "--system", SYSTEM, "-o", out, "--time-limit", "2", "--verify", "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    cert = json.loads((out / "certificate.json").read_text())
    assert manifest["schema"] == "onnxpart.schedule-manifest/1" and manifest["objective"] == "latency"
    assert {d["name"] for d in manifest["system"]["devices"]} == {"cpu", "t4", "a100"}
    assert cert["problem"] == "schedule" and cert["upper_bound"] == pytest.approx(manifest["makespan"])
    assert all(b["value"] is None or b["value"] <= cert["upper_bound"] * (1 + 1e-6) for b in cert["lower_bounds"])
    assert summary["verify"]["ok"] and matplotlib.image.imread(out / "gantt.png").shape[2] in (3, 4)
    for index, piece in enumerate(manifest["pieces"]):
        assert piece["index"] == index and piece["file"] == f"piece_{index}_{piece['device']}.onnx"
        onnx.checker.check_model(str(out / piece["file"]), full_check=True)
    # a piece reads only earlier pieces' tensors (the piece graph is acyclic, in execution order)
    made = {}
    for piece in manifest["pieces"]:
        for name in piece["outputs"]:
            made.setdefault(name, piece["index"])
    assert all(made.get(name, -1) < piece["index"] for piece in manifest["pieces"] for name in piece["inputs"])
    annotated = onnx.load(str(out / "annotated.onnx"))
    assert list(annotated.configuration[0].device) == ["cpu", "t4", "a100"]
    on = {op["name"]: op["device"] for op in manifest["ops"]}
    assert all(node.device_configurations[0].sharding_spec[0].device[0] in (0, 1, 2)
               for node in annotated.graph.node if node.name in on)


def test_light_uses_several_pieces(light_out):
    _, summary = light_out
    assert summary["pieces"] > 1 and summary["manifest"]["transfers"]
    transfer = summary["manifest"]["transfers"][0]
    assert set(transfer) >= {"tensor", "from", "to", "start", "end", "bytes"}


def test_check_certificate_and_tampering(light_out, tmp_path):
    out, _ = light_out
    result = invoke(LIGHT, "--system", SYSTEM, "--check-certificate", out)
    assert result.exit_code == 0 and "certificate ok" in result.output, result.output
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / "manifest.json").write_text((out / "manifest.json").read_text())
    cert = json.loads((out / "certificate.json").read_text())
    cert["upper_bound"] *= 0.9
    (tampered / "certificate.json").write_text(json.dumps(cert))
    result = invoke(LIGHT, "--system", SYSTEM, "--check-certificate", tampered)
    assert result.exit_code == 2 and "certificate check failed" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["ops"][0]["device"] = "t4" if manifest["ops"][0]["device"] != "t4" else "cpu"
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    (tampered / "certificate.json").write_text((out / "certificate.json").read_text())
    assert invoke(LIGHT, "--system", SYSTEM, "--check-certificate", tampered).exit_code == 2


def test_max_gap(tmp_path):
    ok = invoke(DIAMOND, "--system", SYSTEM, "-o", tmp_path / "a", "--time-limit", "2", "--max-gap", "0.01%")
    assert ok.exit_code == 0, ok.output  # CP-SAT proves the diamond optimal (up to its floored time ticks)
    strict = invoke(DIAMOND, "--system", SYSTEM, "-o", tmp_path / "s", "--time-limit", "2", "--max-gap", "0%")
    gap = json.loads((tmp_path / "s" / "certificate.json").read_text())["gap"]
    assert strict.exit_code == (0 if gap <= 1e-12 else 3), strict.output  # 0% means no gap at all
    loose = invoke(LIGHT, "--system", SYSTEM, "-o", tmp_path / "b", "--time-limit", "1", "--method", "met",
                   "--max-gap", "0%")
    assert loose.exit_code == 3 and "not provably within --max-gap" in loose.output
    assert (tmp_path / "b" / "manifest.json").exists()  # the files stay written


def test_max_pieces(tmp_path):
    out = tmp_path / "out"
    result = invoke(LIGHT, "--system", SYSTEM, "-o", out, "--time-limit", "1", "--max-pieces", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pieces"] <= 3
    assert invoke(LIGHT, "--system", SYSTEM, "--check-certificate", out).exit_code == 0


def test_compare_table_lists_every_method_and_runs_exact_and_cpsat_once(tmp_path):
    """``exact`` is ``cpsat``: one solve, its row naming both (not two solves splitting the time)."""
    result = invoke(DIAMOND, "--system", SYSTEM, "-o", tmp_path / "out", "--time-limit", "3", "--compare")
    assert result.exit_code == 0, result.output
    for method in METHODS:
        assert method in result.output
    rows = json.loads((tmp_path / "out" / "certificate.json").read_text())["details"]["methods"]
    assert [r["method"] for r in rows] == [m for m in METHODS if m != "exact"]
    assert next(r for r in rows if r["method"] == "cpsat")["note"].startswith("also exact: the same solve")


def test_json_shape_and_graph_only_input(tmp_path):
    costs = tmp_path / "costs.json"
    assert runner.invoke(app, ["annotate", str(DIAMOND), "-o", str(costs)]).exit_code == 0
    out = tmp_path / "out"
    result = invoke(costs, "--system", SYSTEM, "-o", out, "--time-limit", "1", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {"output", "manifest", "certificate", "verify", "makespan", "pieces"} <= set(summary)
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json", "manifest.json"]
    assert invoke(costs, "--system", SYSTEM, "--check-certificate", out).exit_code == 0
    batched = tmp_path / "batched"  # throughput, like latency, draws no Gantt chart for graph-only input
    result = invoke(costs, "--system", SYSTEM, "-o", batched, "--objective", "throughput", "--batch", "4",
                    "--time-limit", "1")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in batched.iterdir()) == ["certificate.json", "manifest.json"]


def test_same_seed_same_manifest(tmp_path):
    manifests = []
    for name in ("a", "b"):
        result = invoke(LIGHT, "--system", SYSTEM, "-o", tmp_path / name, "--time-limit", "5", "--seed", "3",
                        "--method", "heft,sa,ea", "--iterations", "300")
        assert result.exit_code == 0, result.output
        manifests.append((tmp_path / name / "manifest.json").read_text())
    assert manifests[0] == manifests[1]


BAD_LINK = """devices:
  - {name: cpu, spec: cpu}
links:
  pairs:
    - {from: cpu, to: tpu, bandwidth: 1GB/s}
"""
TINY = """devices:
  - {name: a, spec: cpu, memory: 1KiB}
  - {name: b, spec: t4, memory: 2KiB}
links:
  default: {bandwidth: 1GB/s}
"""
MALFORMED = """devices:
  - {name: cpu, spec: cpu, count: two}
"""
UNLINKED = """devices:  # diamond.onnx needs 240448 bytes: no device alone holds it, and no link joins them
  - {name: a, spec: cpu, memory: 150000}
  - {name: b, spec: t4, memory: 150000}
"""
BAD_JSON_KEY = """{"devices": [
  {"name": "cpu", "spec": "cpu",
   "memory": "lots"}]}
"""
BAD_JSON = """{"devices": [
  {"name": "cpu", "spec": "cpu"},
]}
"""


@pytest.mark.parametrize("name, text, pattern", [
    ("system.yaml", BAD_LINK, r"system.yaml: links.pairs\[0\].to \(line 5\): unknown device 'tpu'"),
    ("system.yaml", TINY, r"op \S+ needs \d+ bytes .* the largest device it can run on, b, has 2048 bytes"),
    ("system.yaml", UNLINKED, r"needs 240448 bytes .* linked to one another \(a\) holds 150000: a transfer it "
                              r"needs is impossible"),
    ("system.yaml", MALFORMED, r"system.yaml: devices\[0\].count \(line 2\): must be an integer from 1 to 4096, got 'two'"),
    ("system.json", BAD_JSON_KEY, r"system.json: devices\[0\].memory \(line 3\): cannot read 'lots' as a size"),
    ("system.json", BAD_JSON, r"system.json: line 3: not valid JSON"),
])
def test_bad_input(tmp_path, name, text, pattern):
    """Issue 12's bad input: one line, exit 2, nothing written."""
    import re

    system = tmp_path / name
    system.write_text(text)
    out = tmp_path / "out"
    result = invoke(DIAMOND, "--system", system, "-o", out)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(pattern, " ".join(result.output.split())), result.output
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [name]


def test_unknown_method(tmp_path):
    result = invoke(DIAMOND, "--system", SYSTEM, "-o", tmp_path / "out", "--method", "heft,magic")
    assert result.exit_code == 2 and "unknown --method magic" in result.output


def test_split_without_modules_falls_back_and_says_so(tmp_path):
    """Two Relu/Sigmoid sources both feeding an Add and a Mul: no articulation point, so no modules."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Sigmoid", ["x"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["c"], name="c"), helper.make_node("Mul", ["a", "b"], ["d"], name="d")]
    info = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [8, 8])  # noqa: E731
    model = tmp_path / "k22.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "k22", [info("x")], [info("c"), info("d")]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(model))
    result = invoke(model, "--system", SYSTEM, "-o", tmp_path / "out", "--method", "split", "--time-limit", "2")
    assert result.exit_code == 0, result.output
    assert "split: no articulation point separates the graph into modules: solved it whole" in result.output


def test_terminal_shows_the_device_table_and_the_certified_makespan(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["schedule", str(DIAMOND), "--system", str(SYSTEM), "-o", str(out),
                                 "--time-limit", "2"], terminal_width=120)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    header = next(line for line in result.output.splitlines() if "device" in line and "busy" in line)
    assert all(column in header for column in ("ops", "pieces", "busy %", "memory peak", "capacity"))
    for d in manifest["devices"]:
        row = next(line for line in result.output.splitlines() if line.strip("│┃ ").startswith(d["name"] + " "))
        cells = [cell.strip() for cell in row.split("│")[1:4]]
        assert cells == [d["name"], str(d["ops"]), str(sum(p["device"] == d["name"] for p in manifest["pieces"]))]
    assert "makespan" in result.output and "proven ≥" in result.output


def test_a_device_with_a_measured_costs_file(tmp_path):
    """A system file's ``costs:`` times that device from the file (by op name), not from a spec."""
    costs = tmp_path / "fast.json"
    assert runner.invoke(app, ["annotate", str(DIAMOND), "-o", str(costs)]).exit_code == 0
    data = json.loads(costs.read_text())
    for op in data["ops"]:
        op["work"] = 1e-9  # far faster than the CPU's roofline: every op belongs there
    costs.write_text(json.dumps(data))
    system = tmp_path / "system.yaml"
    system.write_text("devices:\n  - {name: cpu, spec: cpu}\n  - {name: fast, costs: fast.json}\n"
                      "links:\n  default: {bandwidth: 1GB/s}\n")
    out = tmp_path / "out"
    result = invoke(DIAMOND, "--system", system, "-o", out, "--time-limit", "2", "--verify")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {op["device"] for op in manifest["ops"]} == {"fast"}
    assert manifest["makespan"] == pytest.approx(7e-9)
    data["ops"] = data["ops"][1:]
    costs.write_text(json.dumps(data))
    result = invoke(DIAMOND, "--system", system, "-o", tmp_path / "out2")
    assert result.exit_code == 2 and "no measured time for op conv_1" in " ".join(result.output.split())
    assert not (tmp_path / "out2").exists()


def test_throughput_objective(tmp_path):
    out = tmp_path / "out"
    result = invoke(DIAMOND, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--batch", "8",
                    "--time-limit", "3", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    cert = json.loads((out / "certificate.json").read_text())
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["annotated.onnx", "certificate.json", "gantt.png", "manifest.json",
                            *(p["file"] for p in manifest["pieces"])])
    assert matplotlib.image.imread(out / "gantt.png").shape[2] in (3, 4)  # a PNG matplotlib reads back
    assert manifest["objective"] == "throughput" and manifest["batch"] == 8 and "transfers" in manifest
    for op in {s["name"] for s in manifest["ops"]}:  # every op processes each of the 8 inputs once
        covered = sorted(i for s in manifest["ops"] if s["name"] == op for i in range(*s["inputs"]))
        assert covered == list(range(8))
    assert all(s["batch"] == s["inputs"][1] - s["inputs"][0] and s["input"] == s["inputs"][0]
               for s in manifest["ops"])
    assert manifest["makespan"] == pytest.approx(max(s["end"] for s in manifest["ops"]))
    assert cert["upper_bound"] == pytest.approx(manifest["makespan"]) and cert["best_lower_bound"] is not None
    assert summary["throughput"] == pytest.approx(8 / manifest["makespan"])
    assert cert["details"]["throughput_ceiling"] >= summary["throughput"] * (1 - 1e-9)
    checked = invoke(DIAMOND, "--system", SYSTEM, "--check-certificate", out)
    assert checked.exit_code == 0 and "batch makespan" in checked.output, checked.output
    manifest["ops"][0]["end"] += 1e-3  # a slice that lasts longer than its op takes
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    (tampered / "certificate.json").write_text((out / "certificate.json").read_text())
    refused = invoke(DIAMOND, "--system", SYSTEM, "--check-certificate", tampered)
    assert refused.exit_code == 2 and "mistimed: runs" in refused.output, refused.output
    shown = runner.invoke(app, ["schedule", str(DIAMOND), "--system", str(SYSTEM), "-o", str(tmp_path / "o2"),
                                "--objective", "throughput", "--batch", "8", "--time-limit", "2"], terminal_width=140)
    assert shown.exit_code == 0, shown.output
    assert "batch of 8" in shown.output and "inputs/s, proven ≤" in shown.output and "busy %" in shown.output


def _refused(tmp_path, out, manifest: dict) -> str:
    """The ``--check-certificate`` output for ``out`` with its manifest replaced (exit 2 required)."""
    tampered = tmp_path / "tampered"
    tampered.mkdir(exist_ok=True)
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    (tampered / "certificate.json").write_text((out / "certificate.json").read_text())
    refused = invoke(LIGHT, "--system", SYSTEM, "--check-certificate", tampered)
    assert refused.exit_code == 2, refused.output
    return " ".join(refused.output.split())


def test_throughput_transfers_checked(tmp_path):
    """Model parallelism across slices: ``transfers[]`` lists every cross-device move with the delay
    ``validate_batch`` charges, and ``--check-certificate`` rejects a mistimed, a removed, an invented
    or a mis-sized transfer."""
    out = tmp_path / "out"
    result = invoke(LIGHT, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--batch", "8",
                    "--method", "heft", "--time-limit", "3")  # the whole command: bHEFT gets part of what is left
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    transfers = manifest["transfers"]
    assert len(transfers) > 3 and all(t["from"] != t["to"] and t["end"] > t["start"] and t["tensor"] for t in transfers)
    slices = {(s["name"], s["device"]): s for s in manifest["ops"]}  # one slice per op and device
    for t in transfers:  # leaves when its producer slice ends, carries only inputs both slices share
        src, dst = slices[(t["src_op"], t["from"])], slices[(t["dst_op"], t["to"])]
        assert t["start"] == src["end"] and dst["start"] >= t["end"] * (1 - 1e-9)
        assert t["inputs"] == [max(src["inputs"][0], dst["inputs"][0]), min(src["inputs"][1], dst["inputs"][1])]
    assert invoke(LIGHT, "--system", SYSTEM, "--check-certificate", out).exit_code == 0
    late = json.loads(json.dumps(manifest))
    late["transfers"][0]["end"] *= 1.5
    t = transfers[0]
    said = f"transfers['{t['src_op']}→{t['dst_op']} {t['from']}→{t['to']} inputs {t['inputs']}'].end"
    assert said in _refused(tmp_path, out, late)
    removed = json.loads(json.dumps(manifest))
    gone = removed["transfers"].pop(3)
    said = f"transfers['{gone['src_op']}→{gone['dst_op']} {gone['from']}→{gone['to']} inputs {gone['inputs']}'] is missing"
    assert said in _refused(tmp_path, out, removed)
    invented = json.loads(json.dumps(manifest))
    invented["transfers"].append({**transfers[0], "to": transfers[0]["from"]})
    assert "is not in the recomputed result" in _refused(tmp_path, out, invented)
    heavy = json.loads(json.dumps(manifest))
    heavy["transfers"][-1]["bytes"] *= 2
    assert "].bytes" in _refused(tmp_path, out, heavy)


@pytest.mark.parametrize("args, pattern", [
    (["--objective", "throughput", "--batch", "3"], r"batch 3 cannot be made of the devices' batch sizes"),
    (["--batch", "4"], r"--batch is for --objective throughput"),
    (["--objective", "energy"], r"unknown --objective 'energy'"),
])
def test_bad_throughput_options(tmp_path, args, pattern):
    import re

    system = tmp_path / "system.yaml"
    system.write_text("devices:\n  - {name: a, spec: cpu, batch_sizes: [4]}\n"
                      "  - {name: b, spec: t4, batch_sizes: [2, 4]}\nlinks:\n  default: {bandwidth: 1GB/s}\n")
    out = tmp_path / "out"
    result = invoke(DIAMOND, "--system", system, "-o", out, *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(pattern, " ".join(result.output.split())), result.output
    assert not out.exists()


def test_every_transfer_pays_the_receivers_switch_and_the_check_recomputes_it(light_out, tmp_path):
    """The manifest lists each device's switch (its spec's op_overhead by default); every transfer lasts the
    link's latency + bytes / bandwidth + the receiver's switch, and one without the switch is refused."""
    out, _ = light_out
    manifest = json.loads((out / "manifest.json").read_text())
    switch = {d["name"]: d["switch"] for d in manifest["system"]["devices"]}
    assert switch == pytest.approx({"cpu": 2e-6, "t4": 5e-6, "a100": 5e-6})
    links = {(link["from"], link["to"]): link for link in manifest["system"]["links"]}
    assert manifest["transfers"]
    for t in manifest["transfers"]:
        link = links[(t["from"], t["to"])]
        assert t["end"] - t["start"] == pytest.approx(link["latency"] + t["bytes"] / link["bandwidth"] + switch[t["to"]])
    unpaid = json.loads(json.dumps(manifest))
    unpaid["transfers"][0]["end"] -= switch[unpaid["transfers"][0]["to"]]
    assert "transfers[" in _refused(tmp_path, out, unpaid)
