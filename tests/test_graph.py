"""OpGraph construction on the onnx wheel's real models and the hand-made fixtures."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from onnxpart.graph import from_onnx
from onnxpart.onnx_io import load_graph, parse_input_shapes, prepare
from tests.conftest import FIXTURES, LIGHT_MODELS, light

WEIGHT_GENERATORS = {"ConstantOfShape", "Constant"}


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_every_node_accounted_for(name):
    graph, loaded = load_graph(light(name))
    raw = onnx.load(str(light(name)))
    # every ONNX node is either (part of) an op, a folded generator, or a dead constant node
    names = [n for op in graph.ops for n in op.onnx_nodes] + [c for op in graph.ops for c in op.const_nodes]
    names += list(graph.dead_nodes)
    assert sorted(names) == sorted(n.name for n in loaded.model.graph.node)
    assert graph.node_count == len(raw.graph.node)
    # weight generators are folded away: only real compute ops remain
    assert not WEIGHT_GENERATORS & {op.op_type for op in graph.ops}
    compute_in_file = [n for n in raw.graph.node if n.op_type not in WEIGHT_GENERATORS]
    assert len(graph.ops) <= len(compute_in_file)
    graph.check()  # topological order and tensor index consistency


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_params_match_the_weights(name):
    """Recount the weights independently: evaluate the element count of every constant value (shape
    initializers feed ConstantOfShape; Unsqueeze keeps the count) and sum those read by compute nodes."""
    graph, _ = load_graph(light(name))
    raw = onnx.load(str(light(name)))
    values = {i.name: onnx.numpy_helper.to_array(i) for i in raw.graph.initializer}
    numel = {name: value.size for name, value in values.items()}
    itemsize = {name: value.itemsize for name, value in values.items()}
    read_by_compute = set()
    for node in raw.graph.node:
        if all(n in numel for n in node.input if n):  # constant-only node: a weight generator
            if node.op_type == "ConstantOfShape":
                numel[node.output[0]] = int(np.prod(values[node.input[0]]))
                itemsize[node.output[0]] = 4  # float32 fill value (the attribute's default type here)
            else:
                assert node.op_type in ("Unsqueeze", "Reshape", "Identity", "Cast"), node.op_type
                numel[node.output[0]] = numel[node.input[0]]
                itemsize[node.output[0]] = itemsize[node.input[0]]
        else:
            read_by_compute |= {n for n in node.input if n in numel}
    assert set(graph.params) == read_by_compute
    assert graph.total_param_bytes == sum(numel[n] * itemsize[n] for n in read_by_compute)
    assert sum(op.param_bytes for op in graph.ops) == graph.total_param_bytes


def test_resnet50_counts():
    graph, _ = load_graph(light("resnet50"))
    counts = Counter(op.op_type for op in graph.ops)
    assert counts["Conv"] == 53 and counts["BatchNormalization"] == 53 and counts["Gemm"] == 1
    # 25.5M parameters (ResNet-50 with BN) in float32; BN running stats included
    assert 100e6 < graph.total_param_bytes < 106e6
    assert graph.inputs == ("gpu_0/data_0",)
    assert graph.tensors["gpu_0/data_0"].shape == (1, 3, 224, 224)


def test_shared_param_counted_once(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="first"),
             helper.make_node("MatMul", ["a", "w"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    model = prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {})
    g = from_onnx(model)
    assert g.params["w"].owner == 0 and g.params["w"].consumers == (0, 1)
    assert [op.param_bytes for op in g.ops] == [64, 0]
    assert all("w" in op.params for op in g.ops)


def test_unnamed_nodes_get_deterministic_names():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Relu", ["b"], ["y"], name="dup")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    first = [op.name for op in from_onnx(prepare(model, {})).ops]
    second = [op.name for op in from_onnx(prepare(model, {})).ops]
    assert first == second == ["Relu_0", "dup", "dup__2"]
    assert model.graph.node[0].name == ""  # the caller's model is not modified


def test_if_is_one_opaque_op_with_outer_scope_edges():
    graph, _ = load_graph(FIXTURES / "if_model.onnx")
    choose = graph.op("choose")
    assert choose.opaque and choose.op_type == "If"
    assert set(choose.inputs) == {"flag", "h"}  # 'h' is read only inside the branches
    assert "w_then" in choose.params
    producer = graph.tensors["h"].producer
    assert choose.index in graph.successors(producer)


def test_unsorted_file_is_sorted():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"), helper.make_node("Relu", ["x"], ["a"], name="first")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    g = from_onnx(prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {}))
    assert [op.name for op in g.ops] == ["first", "second"]
    g.check()


def test_custom_domain_op_is_opaque_and_needs_shapes(tmp_path):
    from onnx import TensorProto, helper

    from onnxpart.errors import UserError

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="pre"),
             helper.make_node("MyOp", ["a"], ["b"], name="custom", domain="com.example"),
             helper.make_node("Relu", ["b"], ["y"], name="post")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UserError, match="'b'.*--input-shape b=DIMS"):
        from_onnx(prepare(model, {}))
    with pytest.raises(UserError, match="element type of 'b'.*--input-shape b=2x3:float32"):
        prepare(model, {"b": (2, 3)})  # never a default type
    g = from_onnx(prepare(model, parse_input_shapes(["b=2x3:float16"])))
    assert g.op("custom").opaque and g.tensors["b"].bytes == 12 and g.tensors["b"].dtype == "float16"


def test_to_networkx_is_a_dag_with_the_same_edges():
    import networkx as nx

    graph, _ = load_graph(light("inception_v1"))
    dag = graph.to_networkx()
    assert nx.is_directed_acyclic_graph(dag)
    assert dag.number_of_nodes() == len(graph.ops)
    assert set(dag.edges()) == {(u, v) for u, v, _ in graph.edges()}


def test_dtype_names_and_packed_sizes():
    from onnx import TensorProto

    from onnxpart.graph import dtype_name, tensor_bytes

    names = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.FLOAT16: "float16",
             TensorProto.BFLOAT16: "bfloat16", TensorProto.BOOL: "bool", TensorProto.INT64: "int64",
             TensorProto.STRING: "string", TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
             TensorProto.FLOAT4E2M1: "float4e2m1", TensorProto.FLOAT8E8M0: "float8e8m0", 0: "dtype0",
             999: "dtype999"}
    assert {t: dtype_name(t) for t in names} == names
    # bytes of 5 elements: whole bytes per element, sub-byte types packed and rounded up per tensor
    sizes = {TensorProto.FLOAT: 20, TensorProto.DOUBLE: 40, TensorProto.BOOL: 5, TensorProto.BFLOAT16: 10,
             TensorProto.COMPLEX64: 40, TensorProto.COMPLEX128: 80, TensorProto.FLOAT8E5M2: 5,
             TensorProto.INT4: 3, TensorProto.UINT4: 3, TensorProto.FLOAT4E2M1: 3, TensorProto.INT2: 2,
             TensorProto.UINT2: 2, TensorProto.FLOAT6E2M3: 4, 999: 20}
    assert {t: tensor_bytes(t, (5,)) for t in sizes} == sizes
    assert tensor_bytes(TensorProto.INT4, ()) == 1 and tensor_bytes(TensorProto.FLOAT, (0, 3)) == 0
