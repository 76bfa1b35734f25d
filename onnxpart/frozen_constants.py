"""Values that are constants once the dims are frozen (``--freeze-dims``): what a part file holds as an
initializer instead of a graph input.

Legacy exports compute every Reshape target and mask shape at run time: ``Shape(x) -> Gather ->
Unsqueeze -> Concat``. A cut between that chain and its reader makes the shape tensor an input of the
later part, whose value the part alone cannot know: shape inference leaves the Reshape's output unknown,
and remat cannot cost the part. With the dims frozen every ``Shape``/``Size`` of a statically typed
tensor is a known constant, and so is every deterministic node computed only from those and from
initializers: :func:`frozen_constants` evaluates such a tensor (``onnx.reference``, on the few nodes of its
chain) and returns it as a ``TensorProto``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from onnxpart.onnx_graph import subgraphs
from onnxpart.shapes import SMALL_CONSTANT_BYTES, ValueType

log = logging.getLogger(__name__)

#: Ops whose output is not a function of their inputs: never folded.
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})
#: A chain longer than this many nodes is not a shape computation: not folded.
MAX_CHAIN_NODES = 256


def frozen_constants(model: onnx.ModelProto, types: Mapping[str, ValueType],
                     names: Iterable[str]) -> dict[str, onnx.TensorProto]:
    """``{name: value}`` for each of ``names`` computed only from ``Shape``/``Size`` of tensors whose
    ``types`` are static, initializers held inline and ``Constant`` nodes, through deterministic
    default-domain nodes without subgraphs, and at most :data:`SMALL_CONSTANT_BYTES` large. Names that do
    not qualify (a graph input, data read at run time, a weight in external data) are left out."""
    g = model.graph
    producer = {out: node for node in g.node for out in node.output if out}
    initializers = {init.name: init for init in g.initializer}
    found = {}
    for name in names:
        chain = _chain(name, producer, initializers, types)
        if chain is None:
            continue
        value = _evaluate(model, chain, name, initializers, types)
        if value is not None and value.nbytes <= SMALL_CONSTANT_BYTES:
            found[name] = numpy_helper.from_array(value, name)
    return found


def _chain(name: str, producer: Mapping[str, onnx.NodeProto], initializers: Mapping[str, onnx.TensorProto],
           types: Mapping[str, ValueType]) -> list[onnx.NodeProto] | None:
    """The nodes ``name`` is computed by, back to frozen shapes and inline constants (``Shape``/``Size``
    nodes included, as leaves), or None if it reads anything else."""
    chain: dict[str, onnx.NodeProto] = {}
    stack = [name]
    while stack:
        value = stack.pop()
        if value in initializers:
            if external_data_helper.uses_external_data(initializers[value]):
                return None
            continue
        node = producer.get(value)
        if node is None or node.domain not in ("", "ai.onnx") or node.op_type in RANDOM_OPS or subgraphs(node):
            return None  # a graph input, or a value no fold can know
        if node.name in chain:
            continue
        chain[node.name] = node
        if len(chain) > MAX_CHAIN_NODES:
            return None
        if node.op_type in ("Shape", "Size"):
            if not (types.get(node.input[0]) and types[node.input[0]].static):
                return None
            continue
        stack += [x for x in node.input if x]
    return list(chain.values())


def _evaluate(model: onnx.ModelProto, chain: list[onnx.NodeProto], name: str,
              initializers: Mapping[str, onnx.TensorProto], types: Mapping[str, ValueType]) -> np.ndarray | None:
    """``name``'s value: ``chain`` in the model's node order, each ``Shape``/``Size`` replaced by the
    constant the frozen dims give, run by ``onnx.reference``; None if the evaluator fails."""
    position = {node.name: i for i, node in enumerate(model.graph.node)}
    nodes = []
    for node in sorted(chain, key=lambda n: position[n.name]):
        if node.op_type in ("Shape", "Size"):
            node = onnx.helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                         value=numpy_helper.from_array(_shape_value(node, types)))
        nodes.append(node)
    reads = {x for node in nodes for x in node.input if x}
    graph = onnx.helper.make_graph(nodes, "frozen", [], [onnx.helper.make_tensor_value_info(name, 0, None)],
                                   initializer=[initializers[x] for x in sorted(reads) if x in initializers])
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=list(model.opset_import)))
        return np.asarray(evaluator.run(None, {})[0])
    except Exception as exc:  # noqa: BLE001 - an op the reference evaluator lacks: the value stays an input
        log.debug("cannot fold %s: %s", name, exc)
        return None


def _shape_value(node: onnx.NodeProto, types: Mapping[str, ValueType]) -> np.ndarray:
    """What ``Shape`` (with its ``start``/``end``, opset 15) or ``Size`` of a static tensor returns."""
    dims = np.array(types[node.input[0]].dims, dtype=np.int64)
    if node.op_type == "Size":
        return np.array(dims.prod(), dtype=np.int64)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return dims[slice(attrs.get("start", 0), attrs.get("end"))]
