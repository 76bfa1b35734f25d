"""Property tests on random ONNX DAGs: the OpGraph mirrors the file's data flow, and the memory profile
equals a direct simulation of live tensors."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxpart.graph import from_onnx
from onnxpart.memory import memory_profile
from onnxpart.onnx_io import prepare


@st.composite
def random_dag_models(draw):
    """Up to 14 Relu/Add/Mul nodes over tensors of random widths; some read a weight."""
    n = draw(st.integers(1, 14))
    widths = {"x": draw(st.integers(1, 6))}
    nodes, inits, tensors = [], [], ["x"]
    for i in range(n):
        first = draw(st.sampled_from(tensors))
        kind = draw(st.sampled_from(["Relu", "Add", "Mul", "AddW"]))
        # every tensor is [1, w]; binary ops pair tensors (or a weight) of equal width
        if kind == "Relu":
            nodes.append(helper.make_node("Relu", [first], [f"t{i}"], name=f"n{i}"))
            widths[f"t{i}"] = widths[first]
        elif kind == "AddW":
            w = f"w{i}"
            inits.append(numpy_helper.from_array(np.ones((1, widths[first]), np.float32), w))
            nodes.append(helper.make_node("Add", [first, w], [f"t{i}"], name=f"n{i}"))
            widths[f"t{i}"] = widths[first]
        else:
            same = [t for t in tensors if widths[t] == widths[first]]
            second = draw(st.sampled_from(same))
            nodes.append(helper.make_node(kind, [first, second], [f"t{i}"], name=f"n{i}"))
            widths[f"t{i}"] = widths[first]
        tensors.append(f"t{i}")
    read = {name for node in nodes for name in node.input}
    outputs = [t for t in tensors[1:] if t not in read] or [tensors[-1]]
    graph = helper.make_graph(
        nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, widths["x"]])],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, widths[t]]) for t in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@given(random_dag_models())
@settings(max_examples=60, deadline=None)
def test_opgraph_mirrors_file_and_memory_matches_direct_simulation(model):
    graph = from_onnx(prepare(model, {}))
    graph.check()
    nodes = list(model.graph.node)
    assert [op.name for op in graph.ops] == [node.name for node in nodes]
    # every data edge of the file is an OpGraph edge, and nothing else
    producer = {node.output[0]: i for i, node in enumerate(nodes)}
    file_edges = {(producer[name], i, name) for i, node in enumerate(nodes) for name in node.input if name in producer}
    assert set(graph.edges()) == file_edges
    # direct simulation: at step i, a tensor is live if produced at or before i and used at or after i
    size = {name: t.bytes for name, t in graph.tensors.items()}
    outputs = {o.name for o in model.graph.output}
    expected = []
    for i in range(len(nodes)):
        live = 0
        for name in size:
            born = -1 if name == "x" else producer[name]
            uses = [j for j, node in enumerate(nodes) if name in node.input]
            last = len(nodes) if name in outputs else max(uses, default=born)
            if name == "x" and not uses:
                continue
            if born <= i <= last or (name == "x" and i <= last):
                live += size[name]
        expected.append(float(live))
    assert list(memory_profile(graph).memory) == expected
