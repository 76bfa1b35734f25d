"""onnxpart.readers: every graph format into one OpGraph. The identity tests check that partition's and
remat's instances built through ``read_graph`` are exactly those of the per-strategy readers it replaced
(frozen in tests/legacy_readers.py) on every shared benchmark graph."""

import json

import numpy as np
import pytest

from onnxpart.costs_io import graph_from_costs, graph_to_costs
from onnxpart.errors import UserError
from onnxpart.partition.model import from_graph
from onnxpart.readers import detect_format, read_graph, read_graph_data, read_node_link, reads_model
from onnxpart.remat.model import build_instance
from tests.conftest import SHARED, light, requires_shared
from tests.legacy_readers import from_dnn_json, read_node_link as legacy_read_node_link
from tests.remat.helpers import node_link

BENCHMARKS = SHARED / "benchmarks"
DNN_FILES = sorted((BENCHMARKS / "dnn-partitioning" / "throughput-inputs").glob("*/*.json"))
NODE_LINK_FILES = sorted((BENCHMARKS / "moccasin-graphs").glob("*.json"))


def assert_same_instance(expected, actual) -> None:
    """Every field equal; arrays with the same dtype and the same numbers, bit for bit."""
    for name in expected.__dataclass_fields__:
        want, got = getattr(expected, name), getattr(actual, name)
        if isinstance(want, np.ndarray):
            assert want.dtype == got.dtype and np.array_equal(want, got), name
        else:
            assert want == got, name
    assert expected.digest() == actual.digest()


def tiny_dnn() -> dict:
    """a -> b -> c and a -> c; b and c share a colour class (one op); edge sizes give the tensor bytes."""
    return {"nodes": [{"id": 1, "name": "a", "fpgaLatency": 1.0, "size": 400},
                      {"id": 2, "name": "b", "fpgaLatency": 2.0, "size": 0, "colorClass": 7},
                      {"id": 3, "name": "c", "fpgaLatency": 3.0, "size": 100, "colorClass": 7}],
            "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 64},
                      {"sourceId": 1, "destId": 3, "cost": 0.5, "size": 96},
                      {"sourceId": 2, "destId": 3, "cost": 9.0, "size": 8}]}


# ------------------------------------------------------------------------------------ identity
@requires_shared
@pytest.mark.parametrize("path", DNN_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_dnn_partitioning_instance_is_identical_to_the_old_reader(path):
    data = json.loads(path.read_text())
    graph = read_graph(path)
    assert_same_instance(from_dnn_json(data, name=path.stem), from_graph(graph))
    assert_same_instance(from_dnn_json(data, name=path.stem, bandwidth=2e9, stage_memory=5e7),
                         from_graph(graph, bandwidth=2e9, stage_memory=5e7))


@requires_shared
@pytest.mark.parametrize("path", NODE_LINK_FILES, ids=lambda p: p.stem[:24])
def test_node_link_instance_is_identical_to_the_old_reader(path):
    old = legacy_read_node_link(json.loads(path.read_text()), source=str(path))
    new = read_graph(path)
    assert new.name == old.name and new.outputs == old.outputs
    for include_params in (False, True):
        assert build_instance(new, include_params) == build_instance(old, include_params)


@requires_shared
def test_the_identity_tests_see_every_benchmark_graph():
    names = {p.name for p in NODE_LINK_FILES}
    assert len(DNN_FILES) == 16 and len(NODE_LINK_FILES) == 18
    assert {"random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json",  # G1
            "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json"} <= names


# ------------------------------------------------------------------------------- dnn-partitioning
def test_dnn_graph_carries_transfer_times_bytes_and_parameters(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_dnn()))
    graph = read_graph(path)
    assert [op.name for op in graph.ops] == ["a", "b+c"] and [op.work for op in graph.ops] == [1.0, 5.0]
    assert graph.bandwidth is None and graph.inputs == () and graph.outputs == ()
    (tensor,) = graph.tensors.values()  # b -> c is inside the colour class
    assert (tensor.name, tensor.bytes, tensor.transfer, tensor.consumers) == ("a", 96, 0.5, (1,))
    assert [op.param_bytes for op in graph.ops] == [400, 100] and graph.total_param_bytes == 500
    inst = from_graph(graph)
    assert list(inst.transfer) == [0.5] and inst.bandwidth is None
    with pytest.raises(UserError, match="--stage-memory needs --bandwidth"):
        from_graph(graph, stage_memory=10.0)
    # costs.json keeps the transfer times
    again = graph_from_costs(json.loads(json.dumps(graph_to_costs(graph))))
    assert_same_instance(inst, from_graph(again))
    # a cycle between colour classes fuses them (as the artifact does)
    data = tiny_dnn()
    data["edges"].append({"sourceId": 3, "destId": 1, "cost": 0.25})
    assert [op.name for op in read_graph_data(data, "auto", "cyclic.json").ops] == ["a+b+c"]


@pytest.mark.parametrize("change,message", [
    (lambda d: d["nodes"][0].update(fpgaLatency=-1), r"nodes\[0\]\.fpgaLatency: must be a duration"),
    (lambda d: d["edges"].append({"sourceId": 9, "destId": 1, "cost": 1}), r"edges\[3\]\.sourceId: unknown node id 9"),
    (lambda d: d["nodes"][0].update(colorClass=[1]), "colorClass"),
])
def test_dnn_errors_are_one_line_and_name_the_file(tmp_path, change, message):
    data = tiny_dnn()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=message) as info:
        read_graph(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------------ node-link
def test_node_link_variants_read_like_the_old_reader():
    base = node_link([10, 20, 30, 40], [1, 2, 3, 4], [(0, 1), (1, 2), (0, 3), (2, 3)], order=[0, 1, 2, 3])
    expected = build_instance(legacy_read_node_link(base))
    variants = {
        "edges key": {**{k: v for k, v in base.items() if k != "links"}, "edges": base["links"]},
        "0/1 endpoints": {**base, "links": [{"0": e["source"], "1": e["target"]} for e in base["links"]]},
        "graph attributes as pairs": {**base, "graph": [[k, v] for k, v in base["graph"].items()]},
        "says undirected": {**base, "directed": False},
        "ids are names": {**base, "nodes": [{k: v for k, v in n.items() if k != "id"} for n in base["nodes"]],
                          "links": [{"source": f"n{e['source']}", "target": f"n{e['target']}"}
                                    for e in base["links"]], "graph": {"name": "tiny"}},
    }
    for label, data in variants.items():
        assert build_instance(read_node_link(data)) == expected, label
        assert build_instance(read_node_link(data)) == build_instance(legacy_read_node_link(data)), label


@pytest.mark.parametrize("change,message", [
    (lambda d: d["links"].append({"source": 0, "target": 9}), "not in 'nodes'"),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), "node 0 is listed twice"),
    (lambda d: d["nodes"][1].pop("duration"), r"nodes\[1\]\.duration: missing"),
    (lambda d: d["graph"].update(order=[0, 0, 1]), "not a permutation"),
    (lambda d: d["links"].append({"source": 2, "target": 0}), "has a cycle"),
])
def test_node_link_errors_are_one_line(change, message):
    data = node_link([1, 2, 3], [1, 1, 1], [(0, 1), (1, 2)])
    change(data)
    with pytest.raises(UserError, match=message) as info:
        read_node_link(data, source="g.json")
    assert str(info.value).startswith("g.json") and "\n" not in str(info.value)


# ------------------------------------------------------------------------------ detection, formats
def test_detection_and_format_errors(tmp_path):
    assert detect_format(tiny_dnn()) == "dnn-partitioning"
    assert detect_format(node_link([1], [1], [])) == "node-link"
    assert detect_format({"ops": [], "tensors": []}) == "costs"
    assert detect_format({"nodes": [{"id": 1}]}) is None
    with pytest.raises(UserError, match="x.json is not a graph onnxpart can read"):
        read_graph_data({"hello": 1}, "auto", "x.json")
    with pytest.raises(UserError, match="x.json is not a networkx node-link graph"):
        read_graph_data(tiny_dnn(), "node-link", "x.json")
    with pytest.raises(UserError, match="unknown --format 'xml'"):
        reads_model("m.onnx", "xml")
    with pytest.raises(UserError, match="is a JSON graph, not an ONNX model"):
        reads_model("g.json", "onnx")
    assert reads_model("m.onnx") and not reads_model("g.json") and not reads_model("m.onnx", "costs")


def test_onnx_models_are_read_costed():
    graph = read_graph(light("squeezenet"))
    assert graph.cost_model == "analytic" and graph.total_work > 0 and graph.bandwidth > 0
