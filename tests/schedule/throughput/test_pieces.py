"""Throughput pieces (``--objective throughput``): lane runs of batch slices, acyclic, written as ONNX,
run on the batch's inputs by ``--verify`` (rows along a symbolic batch axis, else once per input),
bounded by ``--max-pieces``, re-checked by ``--check-certificate``, and ``annotated.onnx``: each op's slices as
ONNX sharding specs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.errors import InfeasibleError
from onnxpart.schedule import Instance
from onnxpart.schedule.common.pieces import Piece
from onnxpart.schedule.throughput import emit, heuristics, pieces, simulator
from tests.conftest import FIXTURES, light

runner = CliRunner()
SYSTEM = FIXTURES / "systems" / "cpu_t4_a100.yaml"
DIAMOND = FIXTURES / "diamond.onnx"  # static batch axis: x is [1, 8, 16, 16]
SYMBOLIC = FIXTURES / "symbolic.onnx"  # dynamic batch axis: batch is [N, 3, 16, 16]
LIGHT = light("inception_v1")
RESNET = light("resnet50")


def invoke(*args):
    return runner.invoke(app, ["schedule", *[str(a) for a in args]])


def _two_halves(tmp_path):
    """Two devices that each run only 2 inputs at once: a batch of 4 is split 2 + 2 for every op."""
    system = tmp_path / "halves.yaml"
    system.write_text("devices:\n  - {name: a, spec: cpu, batch_sizes: [2]}\n"
                      "  - {name: b, spec: t4, batch_sizes: [2]}\nlinks:\n  default: {bandwidth: 1GB/s}\n")
    return system


def _dynamic_chain(path):
    """``y = tanh(W2·relu(W1·x) + W1·x)`` on ``x: [N, 8]`` (a skip connection: a diamond)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), name) for name in ("w1", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
             helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="mm2"),
             helper.make_node("Add", ["h3", "h1"], ["h4"], name="add"),
             helper.make_node("Tanh", ["h4"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# ------------------------------------------------------------------------------------ piece graph
def test_a_device_hop_opens_a_new_piece_so_the_piece_graph_has_no_cycle():
    """op 0 and op 2 on device 0, op 1 on device 1, whole batch: one piece per lane would put ops 0 and 2
    together, which reads op 1's piece and feeds it — a cycle :func:`later_reads` names."""
    inst = Instance(np.ones((3, 2)), [(0, 1, 1.0), (1, 2, 1.0)], latency=0.0, bandwidth=1.0,
                    batch_sizes=[(4,), (4,)])
    sched = simulator.simulate(inst, [(4, 0), (0, 4), (4, 0)])
    parts = pieces.pieces(inst, sched)
    assert [(p.device, p.ops, p.inputs) for p in parts] == [(0, (0,), (0, 4)), (1, (1,), (0, 4)), (0, (2,), (0, 4))]
    assert not pieces.later_reads(inst, sched, parts)
    per_lane = [Piece(0, 0, (0, 2), (0, 4)), Piece(1, 1, (1,), (0, 4))]
    assert pieces.later_reads(inst, sched, per_lane) == ["piece 0 (op2) reads op1 of later piece 1"]


def test_data_parallelism_gives_one_piece_per_lane():
    inst = Instance(np.ones((3, 2)), [(0, 1, 1.0), (1, 2, 1.0)], latency=0.0, bandwidth=1.0,
                    batch_sizes=[(2,), (2,)])
    sched = simulator.simulate(inst, [(2, 2)] * 3)
    found = [(p.device, p.ops, p.inputs) for p in pieces.pieces(inst, sched)]
    assert found == [(0, (0, 1, 2), (0, 2)), (1, (0, 1, 2), (2, 4))]


@pytest.mark.parametrize("seed", range(12))
def test_pieces_are_acyclic_and_merge_respects_the_limit(seed):
    """Random DAGs, three devices, every batched heuristic: every slice in exactly one piece, no piece
    reads a later one; ``merge`` leaves at most N pieces of a valid schedule (or refuses)."""
    rng = np.random.default_rng(seed)
    n = 6
    edges = [(i, j, float(rng.integers(1, 4))) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.4]
    inst = Instance(rng.integers(1, 9, size=(n, 3)).astype(float), edges, latency=0.5, bandwidth=2.0,
                    batch_sizes=[(2, 4), (2, 4), (4,)])
    for result in (heuristics.heft(inst, 4), heuristics.greedy(inst, 4), heuristics.uniform(inst, 4)):
        sched = result.schedule
        parts = pieces.pieces(inst, sched)
        assert sorted((i, p.device) for p in parts for i in p.ops) == sorted(sched.start)
        assert not pieces.later_reads(inst, sched, parts)
        for limit in (1, 2):
            merged = pieces.merge(inst, sched, limit)
            assert len(pieces.pieces(inst, merged)) <= limit and not simulator.validate(inst, merged)


def test_merge_refuses_when_no_move_lowers_the_count():
    """Both devices take only 2 inputs: a batch of 4 always has two lanes, so one piece is impossible."""
    inst = Instance(np.ones((2, 2)), [(0, 1, 1.0)], latency=0.0, bandwidth=1.0, batch_sizes=[(2,), (2,)])
    with pytest.raises(InfeasibleError, match="cannot merge 2 pieces into --max-pieces 1"):
        pieces.merge(inst, simulator.simulate(inst, [(2, 2), (2, 2)]), 1)


def test_merge_falls_back_on_data_parallelism_over_fewer_devices():
    """Four lanes of one input each on devices that run 1 or 4 inputs: no move helps (two inputs on one
    device is no supported size, and every op already has its neighbours' split); plain data parallelism
    over at most two devices is one lane, one piece."""
    inst = Instance(np.ones((3, 4)), [(0, 1, 1.0), (1, 2, 1.0)], latency=0.0, bandwidth=1.0,
                    batch_sizes=[(1, 4)] * 4)
    spread = simulator.simulate(inst, [(1, 1, 1, 1)] * 3)
    assert len(pieces.pieces(inst, spread)) == 4 and pieces._merge_moves(inst, spread, 2) is None
    merged = pieces.merge(inst, spread, 2)
    assert len(pieces.pieces(inst, merged)) == 1 and not simulator.validate(inst, merged)


# ------------------------------------------------------------------------------------ CLI
def _run(model, out, *args):
    result = invoke(model, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--time-limit", "2",
                    "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _assert_pieces(out, manifest):
    """Files exist and pass the ONNX checker; a piece reads each input's tensors only from earlier
    pieces (or the model's inputs); every slice is in exactly one piece."""
    made: dict[tuple[str, int], int] = {}
    for index, piece in enumerate(manifest["pieces"]):
        lo, hi = piece["slice"]
        assert piece["index"] == index and piece["file"] == f"piece_{index}_{piece['device']}_b{lo}-{hi - 1}.onnx"
        onnx.checker.check_model(str(out / piece["file"]), full_check=True)
        for name in piece["inputs"]:
            assert all(made.get((name, row), -1) < index for row in range(lo, hi)), (name, piece)
        made.update({(name, row): index for name in piece["outputs"] for row in range(lo, hi)})
    slices = sorted((op, p["device"]) for p in manifest["pieces"] for op in p["ops"])
    assert slices == sorted((s["name"], s["device"]) for s in manifest["ops"])


@pytest.mark.parametrize("model, args, run", [
    (DIAMOND, [], "per input"),
    (SYMBOLIC, ["--dim", "N=2"], "rows"),
    (FIXTURES / "external" / "mlp.onnx", [], "per input"),  # weights in external data
])
def test_pieces_written_verified_and_certified(model, args, run, tmp_path):
    out = tmp_path / "out"
    summary = _run(model, out, "--batch", "8", "--verify", *args)
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["verify"]["ok"] and summary["pieces"] == len(manifest["pieces"]) >= 1
    assert {piece["run"] for piece in manifest["pieces"]} == {run}
    assert manifest["batch_axis"]["dim"] == ("N" if run == "rows" else None)
    _assert_pieces(out, manifest)
    checked = invoke(model, "--system", SYSTEM, "--objective", "throughput", "--batch", "8", *args,
                     "--check-certificate", out)
    assert checked.exit_code == 0 and "certificate ok" in checked.output, checked.output


def test_dynamic_model_split_over_two_devices(tmp_path):
    """Every op split 2 + 2 (batch sizes): two pieces, each run once on its 2 inputs' 4 rows (N = 2)."""
    model = _dynamic_chain(tmp_path / "chain.onnx")
    out = tmp_path / "out"
    result = invoke(model, "--system", _two_halves(tmp_path), "-o", out, "--objective", "throughput", "--batch", "4",
                    "--dim", "N=2", "--verify", "--json", "--time-limit", "2")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(p["device"], p["slice"], p["run"]) for p in manifest["pieces"]] == [("a", [0, 2], "rows"),
                                                                                ("b", [2, 4], "rows")]
    assert manifest["batch_axis"] == {"axis": 0, "dim": "N", "rows_per_input": 2}
    _assert_pieces(out, manifest)
    limited = invoke(model, "--system", _two_halves(tmp_path), "-o", tmp_path / "one", "--objective", "throughput",
                     "--batch", "4", "--dim", "N=2", "--max-pieces", "1")
    assert limited.exit_code == 4 and "cannot merge 2 pieces into --max-pieces 1" in " ".join(limited.output.split())
    assert not (tmp_path / "one").exists()


def test_a_corrupted_piece_fails_verify_and_writes_nothing(tmp_path, monkeypatch):
    made = emit.piece_models

    def corrupted(*args, **kwargs):
        models = made(*args, **kwargs)
        weight = next(model.graph.initializer[0] for model in models.values() if model.graph.initializer)
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) + 1.0, weight.name))
        return models

    monkeypatch.setattr(emit, "piece_models", corrupted)
    out = tmp_path / "out"
    result = invoke(SYMBOLIC, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--batch", "8",
                    "--dim", "N=2", "--verify", "--time-limit", "2")
    assert result.exit_code == 1 and "--verify failed: output 'pooled'" in " ".join(result.output.split())
    assert not out.exists()


def test_max_pieces_bounds_the_pieces(tmp_path):
    """heft splits resnet50's batch over three devices into many pieces; --max-pieces 3 merges them, and
    the merged pieces still reproduce the model and pass the certificate check. (resnet50 has 13 pieces free;
    inception's merge took three times as long.)"""
    free = _run(RESNET, tmp_path / "free", "--batch", "4", "--method", "heft")
    assert free["pieces"] > 3
    out = tmp_path / "out"
    summary = _run(RESNET, out, "--batch", "4", "--method", "heft", "--max-pieces", "3", "--verify")
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["pieces"] == len(manifest["pieces"]) <= 3 and summary["verify"]["ok"]
    assert summary["certificate"]["details"]["options"]["max_pieces"] == 3
    _assert_pieces(out, manifest)
    args = ["--system", SYSTEM, "--objective", "throughput", "--batch", "4", "--method", "heft", "--max-pieces", "3"]
    checked = invoke(RESNET, *args, "--check-certificate", out)
    assert checked.exit_code == 0, checked.output
    manifest["pieces"][0]["slice"] = [0, 1]  # pieces that are not the lane runs of the slices are refused
    (out / "manifest.json").write_text(json.dumps(manifest))
    refused = invoke(RESNET, *args, "--check-certificate", out)
    assert refused.exit_code == 2 and "pieces[0].slice" in refused.output, refused.output


@pytest.mark.parametrize("model, pattern", [
    (FIXTURES / "if_model.onnx", "graph input 'flag' is a scalar, so the batch cannot be sliced"),
    ("mixed", r"the graph inputs' axis 0 \(a: N, b: fixed\) names no one batch"),
])
def test_a_model_without_a_batch_axis_is_refused(model, pattern, tmp_path):
    import re

    if model == "mixed":
        model = tmp_path / "mixed.onnx"
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])]
        graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"], name="add")], "mixed", inputs,
                                  [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4])])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    out = tmp_path / "out"
    result = invoke(model, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--batch", "4",
                    "--dim", "N=1") if model.name == "mixed.onnx" else invoke(
        model, "--system", SYSTEM, "-o", out, "--objective", "throughput", "--batch", "4")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and re.search(pattern, text), result.output
    assert "axis 0 of every graph input" in text and not out.exists()


def _folded(tmp_path):
    """``y = W2·reshape(reshape(relu(W1·x), [-1]), [-1, 8])`` on ``x: [N, 8]`` (the reshape folds ``N``
    away), scheduled on two devices with hand-chosen splits: -> (Instance, OpGraph, LoadedModel, BatchSchedule)."""
    from onnxpart.cli.option_groups import ModelSource
    from onnxpart.cli.schedule_cmd import _load

    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), name) for name in ("w1", "w2")]
    weights += [numpy_helper.from_array(np.array(shape, np.int64), name) for name, shape in (("flat", [-1]),
                                                                                             ("rows", [-1, 8]))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
             helper.make_node("Reshape", ["h2", "flat"], ["f"], name="fold"),
             helper.make_node("Reshape", ["f", "rows"], ["g"], name="unfold"),
             helper.make_node("MatMul", ["g", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "folded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], weights)
    model = tmp_path / "folded.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    system = tmp_path / "system.yaml"
    system.write_text("devices:\n  - {name: a, spec: cpu, batch_sizes: [2, 4]}\n"
                      "  - {name: b, spec: t4, batch_sizes: [2]}\nlinks:\n  default: {bandwidth: 1GB/s}\n")
    inst, op_graph, loaded = _load(model, system, ModelSource(dim=["N=2"]))
    order = {name: i for i, name in enumerate(inst.op_names)}
    split = {"mm1": (4, 0), "relu": (2, 2), "fold": (2, 2), "unfold": (4, 0), "mm2": (4, 0)}
    return inst, op_graph, loaded, simulator.simulate(inst, [split[name] for name in sorted(order, key=order.get)])


def test_pieces_on_rows_and_per_input_in_one_dynamic_model(tmp_path):
    """A reshape folds ``N`` away: the pieces whose tensors all keep an axis named ``N`` run on rows, those
    reading or making the flattened tensor run once per input, and together they reproduce the model."""
    from onnxpart.schedule.throughput.verify import PER_INPUT, ROWS, batch_axis, verify_pieces
    from onnxpart.writer import write_model

    inst, op_graph, loaded, sched = _folded(tmp_path)
    parts = pieces.pieces(inst, sched)
    axis = batch_axis(loaded, freeze=False)
    files = {}
    for index, piece in emit.piece_models(loaded.model, op_graph, parts, inst, loaded.value_info).items():
        files[index] = f"piece_{index}.onnx"
        write_model(piece, tmp_path / files[index])
    solution = SimpleNamespace(instance=inst, method="test")  # what the manifest reads of a Solution
    entries = emit.manifest(solution, sched, parts, op_graph, None, None, files, axis)["pieces"]
    assert [(e["ops"], e["slice"], e["run"]) for e in entries] == [
        (["mm1"], [0, 4], ROWS), (["relu", "fold"], [0, 2], PER_INPUT), (["relu", "fold"], [2, 4], PER_INPUT),
        (["unfold", "mm2"], [0, 4], PER_INPUT)]
    report = verify_pieces(loaded, [(tmp_path / e["file"], e) for e in entries], axis=axis, batch=4, tolerance=1e-4)
    assert report.ok and "1 of 4 pieces ran once on their inputs' rows along N" in report.notes[0]


# ------------------------------------------------------------------------------------ annotated.onnx
def _per_input(spec, batch: int) -> list[int]:
    """A sharding spec expanded to the device of each of the batch's inputs: ``S`` equal contiguous shards
    along its one sharded dim (ONNX's ``SimpleShardedDimProto``), shard ``s`` on ``device[s]``."""
    (dim,) = spec.sharded_dim
    (simple,) = dim.simple_sharding
    assert len(spec.device) == simple.num_shards and batch % simple.num_shards == 0
    return [spec.device[l * simple.num_shards // batch] for l in range(batch)]


def _assert_annotated(out, manifest) -> dict[str, list]:
    """``annotated.onnx`` passes the checker, lists the system's devices, and every op's node output specs
    put each input of the batch on the device of the manifest's slice holding it (an op run whole: its
    device, no sharded dim); -> {op: its specs}."""
    path = out / "annotated.onnx"
    onnx.checker.check_model(str(path), full_check=True)
    annotated = onnx.load(str(path))
    names = [d["name"] for d in manifest["system"]["devices"]]
    (config,) = annotated.configuration
    assert config.name == "schedule" and list(config.device) == names and config.num_devices == len(names)
    specs = {}
    for node in annotated.graph.node:
        (nodeconf,) = node.device_configurations
        assert nodeconf.configuration_id == "schedule"
        assert [spec.tensor_name for spec in nodeconf.sharding_spec] == [name for name in node.output if name]
        specs[node.name] = list(nodeconf.sharding_spec)
    batch = manifest["batch"]
    for op in {s["name"] for s in manifest["ops"]}:
        slices = [s for s in manifest["ops"] if s["name"] == op]
        expected = [names.index(s["device"]) for l in range(batch) for s in slices
                    if s["inputs"][0] <= l < s["inputs"][1]]
        for spec in specs[op]:
            if len(slices) == 1:
                assert list(spec.device) == [names.index(slices[0]["device"])] and not spec.sharded_dim
            else:
                assert _per_input(spec, batch) == expected, (op, spec)
    return specs


@pytest.mark.parametrize("case", ["per input", "rows", "one device"])
def test_annotated_model_encodes_the_slices(case, tmp_path):
    """Split ops shard their outputs along the batch axis exactly as the manifest's slices (per input:
    ``dim_value`` = L on axis 0; rows: the symbolic ``N``, a device holding several shards listed once
    per shard); a device too small for any op leaves every op whole on the other: ``device=[u]``."""
    out = tmp_path / "out"
    if case == "per input":
        _run(DIAMOND, out, "--batch", "8")
    else:
        small = "memory: 40KB" if case == "one device" else ""
        system = tmp_path / "system.yaml"
        system.write_text(f"devices:\n  - {{name: a, spec: cpu, batch_sizes: [2], {small}}}\n"
                          "  - {name: b, spec: t4, batch_sizes: [4, 6]}\nlinks:\n  default: {bandwidth: 1GB/s}\n")
        model = DIAMOND if case == "one device" else _dynamic_chain(tmp_path / "chain.onnx")
        extra = ["--dim", "N=2"] if case == "rows" else []
        result = invoke(model, "--system", system, "-o", out, "--objective", "throughput", "--batch", "6",
                        "--time-limit", "2", *extra)
        assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    specs = [spec for op_specs in _assert_annotated(out, manifest).values() for spec in op_specs]
    sharded = [spec for spec in specs if spec.sharded_dim]
    if case == "one device":
        assert specs and not sharded and {tuple(spec.device) for spec in specs} == {(1,)}
    elif case == "rows":
        assert len(sharded) == len(specs) == 5
        assert all(s.sharded_dim[0].axis == 0 and s.sharded_dim[0].simple_sharding[0].dim_param == "N" for s in sharded)
        assert {tuple(s.device) for s in sharded} == {(0, 1, 1)}  # slices of 2 and 4: three shards of 2
    else:
        assert sharded and all(s.sharded_dim[0].axis == 0 and s.sharded_dim[0].simple_sharding[0].dim_value == 8
                               for s in sharded)


def test_annotated_model_without_a_batch_axis_lists_the_devices(tmp_path):
    """A tensor with no axis named ``N`` (a reshape folded it away) is listed on the devices of its op's
    slices, unsharded; one with it is sharded along that axis; an op on one device has ``device=[u]``."""
    from onnxpart.schedule.throughput.verify import batch_axis

    inst, op_graph, loaded, sched = _folded(tmp_path)
    annotated = emit.annotated_model(loaded, op_graph, inst, sched, batch_axis(loaded, freeze=False))
    specs = {node.name: node.device_configurations[0].sharding_spec[0] for node in annotated.graph.node}
    assert list(specs["mm1"].device) == [0] and not specs["mm1"].sharded_dim
    assert list(specs["relu"].device) == [0, 1] and specs["relu"].sharded_dim[0].simple_sharding[0].dim_param == "N"
    assert list(specs["fold"].device) == [0, 1] and not specs["fold"].sharded_dim


@pytest.mark.parametrize("split, devices, size", [((2, 0, 4, 2), [0, 2, 2, 3], 2), ((0, 8, 0), [1], 8),
                                                  ((1, 3), [0, 1, 1, 1], 1), ((3, 6), [0, 1, 1], 3)])
def test_shards_of_a_split(split, devices, size):
    """Shards of the gcd of the slice boundaries, in input order, one device entry per shard."""
    assert emit.shards(split) == (devices, size)
