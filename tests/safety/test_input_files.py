"""Input files that are wrong (issue 26, part 3): graph and costs JSON, device specs, system files and matrix
programs with wrong types, NaN/inf/1e400/1e308, negative sizes and times, unknown node names, deep nesting,
a "billion laughs" YAML, a folder or a missing path. Each runs the real command line as a subprocess
(tests/safety/harness.py) and must end in exit 2, one ``error:`` line saying what and where, no traceback,
nothing written and every input byte-identical.

The cases where the parsing path differs per command (the graph file as the model, a device file) run for
every command that reads the file; the other kinds run once each, spread over the commands.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.safety.harness import DIAMOND, STRATEGIES, STRATEGY_ARGS, SYSTEM, Guard

GRAPH_COMMANDS = ("inspect",) + STRATEGIES  # every command that reads a graph file as its model
DEEP_JSON = "[" * 100_000 + "]" * 100_000
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def costs_graph(**changes) -> dict:
    """A valid two-op graph file (costs format); ``changes`` patch op 0 (``op``), tensor 1 (``tensor``)."""
    data = {"bandwidth": 1e10,
            "ops": [{"name": "a", "work": 1e-3, "flops": 1e6, "param_bytes": 64},
                    {"name": "b", "work": 2e-3, "flops": 1e6}],
            "tensors": [{"name": "x", "bytes": 64, "producer": None, "consumers": ["a"]},
                        {"name": "ab", "bytes": 64, "producer": "a", "consumers": ["b"]},
                        {"name": "y", "bytes": 64, "producer": "b", "consumers": []}]}
    data["ops"][0].update(changes.get("op", {}))
    data["tensors"][1].update(changes.get("tensor", {}))
    return data


def dnn_graph(**node) -> dict:
    return {"nodes": [{"id": 1, "name": "a", "fpgaLatency": 1.0, **node}, {"id": 2, "name": "b", "fpgaLatency": 2.0}],
            "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 64}]}


def node_link(**node) -> dict:
    return {"directed": True, "multigraph": False, "graph": {"name": "g"},
            "nodes": [{"id": 0, "duration": 1, "out_cost": 8, **node}, {"id": 1, "duration": 2, "out_cost": 8}],
            "links": [{"source": 0, "target": 1}]}


#: Bad graph files: kind -> (file text, what the error line must say). A builder returns the text.
GRAPHS = {
    "negative work": (json.dumps(costs_graph(op={"work": -1})), "ops[0].work: must be a duration"),
    "NaN": ('{"ops": [{"name": "a", "work": NaN}], "tensors": []}', "ops[0].work: must be a duration from 0 s"),
    "deep nesting": (DEEP_JSON, "nested too deeply: more than 64 levels"),
    "unknown op": (json.dumps(costs_graph(tensor={"consumers": ["ghost"]})), "names unknown op 'ghost'"),
    "wrong type": (json.dumps(costs_graph(op={"work": "fast"})), "ops[0].work: must be a duration"),
    "Infinity": ('{"ops": [{"name": "a", "work": Infinity}], "tensors": []}', "got inf"),
    "1e400": ('{"ops": [{"name": "a", "work": 1e400}], "tensors": []}', "ops[0].work"),
    "1e308": ('{"ops": [{"name": "a", "work": 1e308}], "tensors": []}', "got 1e+308"),
    "negative param_bytes": (json.dumps(costs_graph(op={"param_bytes": -5})), "ops[0].param_bytes: must be a size"),
    "negative tensor bytes": (json.dumps(costs_graph(tensor={"bytes": -5})), "tensors[1].bytes: must be a size"),
    "dnn negative latency": (json.dumps(dnn_graph(fpgaLatency=-1)), "nodes[0].fpgaLatency: must be a duration"),
    "dnn unknown node": (json.dumps({**dnn_graph(), "edges": [{"sourceId": 1, "destId": 9, "cost": 1}]}),
                         "edges[0].destId: unknown node id 9"),
    "node-link text duration": (json.dumps(node_link(duration="slow")), "nodes[0].duration: must be a duration"),
    "node-link unknown node": (json.dumps({**node_link(), "links": [{"source": 0, "target": 7}]}),
                               "links[0].target: unknown node 7"),
}
#: Kinds run with every command that reads a graph; the others once each, spread over the commands.
EVERY_COMMAND = ("negative work", "NaN", "deep nesting", "unknown op")
GRAPH_CASES = [pytest.param(kind, command, id=f"{kind}-{command}") for kind in EVERY_COMMAND
               for command in GRAPH_COMMANDS] + [
    pytest.param(kind, GRAPH_COMMANDS[i % len(GRAPH_COMMANDS)], id=f"{kind}-{GRAPH_COMMANDS[i % len(GRAPH_COMMANDS)]}")
    for i, kind in enumerate(k for k in GRAPHS if k not in EVERY_COMMAND)]


def strategy_line(command: str, model, out: Path, *extra) -> list:
    """``command model`` with the least it needs (inspect writes nothing: no -o)."""
    if command == "inspect":
        return [command, model, *extra]
    return [command, model, "-o", out, *STRATEGY_ARGS[command], *extra]


@pytest.mark.parametrize("kind, command", GRAPH_CASES)
def test_a_bad_graph_file_is_one_line_naming_the_field(tmp_path, kind, command):
    text, says = GRAPHS[kind]
    graph = tmp_path / "graph.json"
    graph.write_text(text)
    guard = Guard(tmp_path / "cwd", (graph, SYSTEM), tmp_path / "out")
    line = guard.refused(*strategy_line(command, graph, tmp_path / "out"), mention=says)
    assert str(graph) in line, line


@pytest.mark.parametrize("kind, says", [("folder", "is a folder"), ("missing", "does not exist")])
@pytest.mark.parametrize("command", GRAPH_COMMANDS)
def test_a_graph_path_that_is_a_folder_or_missing(tmp_path, command, kind, says):
    graph = tmp_path / "graph.json"
    if kind == "folder":
        graph.mkdir()
    guard = Guard(tmp_path / "cwd", (graph, SYSTEM), tmp_path / "out")
    guard.refused(*strategy_line(command, graph, tmp_path / "out"), mention=says)


@pytest.fixture(scope="module")
def diamond_costs() -> dict:
    """diamond.onnx's costs file, as `onnxpart annotate` writes it."""
    from onnxpart.costs_io import graph_to_costs
    from onnxpart.loading import load_costed

    return json.loads(json.dumps(graph_to_costs(load_costed(DIAMOND).graph, str(DIAMOND))))


@pytest.mark.parametrize("command, field, value, says", [
    ("inspect", "work", -1.0, "ops[0].work: must be a duration"),
    ("partition", "work", float("inf"), "ops[0].work: must be a duration"),
    ("remat", "param_bytes", -1, "ops[0].param_bytes: must be a size"),
    ("schedule", "mem_bytes", 1e300, "ops[0].mem_bytes: must be a size"),
    ("tile", "flops", "many", "ops[0].flops: must be a FLOP count"),
])
def test_a_bad_costs_file_for_a_model(tmp_path, diamond_costs, command, field, value, says):
    costs = tmp_path / "costs.json"
    data = json.loads(json.dumps(diamond_costs))
    data["ops"][0][field] = value
    costs.write_text(json.dumps(data))  # json writes inf as Infinity, as a careless tool would
    guard = Guard(tmp_path / "cwd", (costs, DIAMOND, SYSTEM), tmp_path / "out")
    guard.refused(*strategy_line(command, DIAMOND, tmp_path / "out", "--costs", costs), mention=says)


DEVICE = ("name: mine\npeak_flops: {float32: 1.0e12}\nmemory_bandwidth: 1.0e11\nmemory_capacity: 8GiB\n"
          "op_overhead: 5us\ninterconnect_bandwidth: 25GB/s\n")
DEVICES = {
    "negative peak_flops": (DEVICE.replace("{float32: 1.0e12}", "{float32: -1.0e12}"),
                            "peak_flops.float32: must be a FLOP/s rate"),
    "NaN bandwidth": (DEVICE.replace("memory_bandwidth: 1.0e11", "memory_bandwidth: .nan"),
                      "memory_bandwidth: must be a bandwidth"),
    "mapping as a number": (DEVICE.replace("op_overhead: 5us", "op_overhead: {}"), "op_overhead: must be a duration"),
    "no peaks": (DEVICE.replace("{float32: 1.0e12}", "{}"), "peak_flops: expected at least 1 entry"),
    "billion laughs": (LAUGHS, "aliases expand to more than 1,000,000 nodes"),
    "deep nesting": ("peak_flops: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested too deeply: more than 64 levels"),
}
DEVICE_COMMANDS = ("inspect", "annotate") + STRATEGIES


@pytest.mark.parametrize("kind, command", [(kind, command) for command in DEVICE_COMMANDS
                                           for kind in ("negative peak_flops",)] +
                         [(kind, DEVICE_COMMANDS[i]) for i, kind in enumerate(list(DEVICES)[1:])])
def test_a_bad_device_file(tmp_path, kind, command):
    text, says = DEVICES[kind]
    device = tmp_path / "mine.yaml"
    device.write_text(text)
    out = tmp_path / ("costs.json" if command == "annotate" else "out")
    guard = Guard(tmp_path / "cwd", (device, DIAMOND, SYSTEM), out)
    args = ["annotate", DIAMOND, "-o", out] if command == "annotate" else strategy_line(command, DIAMOND, out)
    guard.refused(*args, "--device", device, mention=says)


INLINE = ("devices:\n  - name: npu\n    spec: {peak_flops: {float32: 1.0e12}, memory_bandwidth: 1.0e11, "
          "memory_capacity: 8GiB, op_overhead: 0, interconnect_bandwidth: 1.0e10}\n  - {name: cpu, spec: cpu}\n"
          "links:\n  default: {bandwidth: 10GB/s, latency: 1us}\n")
SYSTEMS = {
    "missing": (None, "does not exist"),
    "folder": ("folder", "is a folder"),
    "billion laughs": (LAUGHS, "aliases expand to more than 1,000,000 nodes"),
    "deep nesting": ('{"devices": ' + DEEP_JSON + "}", "nested too deeply: more than 64 levels"),
    "negative peak_flops": (INLINE.replace("float32: 1.0e12", "float32: -1.0e12"),
                            "devices[0].spec.peak_flops.float32 (line 3): must be a FLOP/s rate"),
    "NaN latency": (INLINE.replace("latency: 1us", "latency: .nan"), "links.default.latency (line 6): must be"),
    "infinite bandwidth": (INLINE.replace("bandwidth: 10GB/s", "bandwidth: .inf"), "links.default.bandwidth"),
    "negative bandwidth": (INLINE.replace("memory_bandwidth: 1.0e11", "memory_bandwidth: -1"),
                           "devices[0].spec.memory_bandwidth (line 3): must be a bandwidth"),
    "count 1e9": (INLINE.replace("{name: cpu, spec: cpu}", "{name: cpu, spec: cpu, count: 1000000000}"),
                  "devices[1].count (line 4): must be an integer from 1 to 4096"),
    "empty mapping": (INLINE.replace("latency: 1us", "latency: {}"), "links.default.latency (line 6): must be"),
}


@pytest.mark.parametrize("kind", SYSTEMS)
def test_a_bad_system_file(tmp_path, kind):
    text, says = SYSTEMS[kind]
    system = tmp_path / ("system.json" if kind == "deep nesting" else "system.yaml")
    if text == "folder":
        system.mkdir()
    elif text is not None:
        system.write_text(text)
    guard = Guard(tmp_path / "cwd", (system, DIAMOND), tmp_path / "out")
    guard.refused("schedule", DIAMOND, "--system", system, "-o", tmp_path / "out", "--time-limit", "2",
                  mention=says)


@pytest.mark.parametrize("text, says", [
    ('[{"out": "C", "op": "inv", "in": ["A"], "weight": "x"}]', "program[0].weight: must be an integer"),
    ('{"program": [{"out": "C", "op": "inv", "in": ["A"]}], "default_size": [NaN, 2]}', "default_size[0]"),
    ('[{"loop": 100000, "body": [{"loop": 100000, "body": [{"out": "C", "op": "inv", "in": ["A"]}]}]}]',
     "above the limit 2147483647"),
    ('{"program": ' + DEEP_JSON + "}", "nested too deeply: more than 64 levels"),
], ids=["wrong type", "NaN size", "loop weights", "deep nesting"])
def test_a_bad_matrix_program(tmp_path, text, says):
    program = tmp_path / "program.json"
    program.write_text(text)
    guard = Guard(tmp_path / "cwd", (program,), tmp_path / "out")
    guard.refused("tile", program, "-o", tmp_path / "out", "--time-limit", "2", mention=says)
