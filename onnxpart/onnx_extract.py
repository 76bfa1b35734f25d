"""Subgraph extraction: a standalone ONNX model made of some of a model's nodes (a pipeline stage, a
schedule piece, a remat sequence), with the weight generators it needs pulled in, each placed just before
its first reader."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from onnxpart.onnx_graph import outer_scope_names, subgraphs
from onnxpart.onnx_io import copy_proto


@dataclass(frozen=True)
class ModelIndex:
    """A model's nodes by name and position, and its values' producers and initializers: what each
    extraction looks up. Built once per model (:meth:`of`), so extracting many small parts — a schedule's
    ~1,000 pieces of a 13,800-node 70B export — costs what the parts hold, not parts × model."""

    nodes: Sequence[onnx.NodeProto]
    position: Mapping[str, int]
    producer: Mapping[str, onnx.NodeProto]
    initializers: Mapping[str, onnx.TensorProto]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "ModelIndex":
        g = model.graph
        nodes = list(g.node)
        return cls(nodes, {node.name: i for i, node in enumerate(nodes)},
                   {o: node for node in nodes for o in node.output if o}, {init.name: init for init in g.initializer})

    def in_order(self, names: Iterable[str]) -> list[onnx.NodeProto]:
        """The nodes named, in the model's order."""
        return [self.nodes[i] for i in sorted(self.position[name] for name in names)]


def extract_subgraph(model: onnx.ModelProto, node_names: Iterable[str], inputs: Sequence[str],
                     outputs: Sequence[str], name: str | None = None,
                     declare: Callable[[str], onnx.ValueInfoProto] | None = None,
                     constants: Mapping[str, onnx.TensorProto] | None = None,
                     index: ModelIndex | None = None) -> onnx.ModelProto:
    """A standalone model made of ``node_names`` (compute nodes), reading ``inputs`` and producing
    ``outputs``; ``declare(name)`` gives their types (default: the types ``model`` states, e.g. after
    :func:`prepare`; for a file, :meth:`LoadedModel.value_info`, which keeps symbolic dims). Inputs in
    ``constants`` are initializers of the result instead (:mod:`onnxpart.frozen_constants`).

    Weight generators the nodes need (initializers, Constant and constant-only nodes such as
    ``ConstantOfShape``) are pulled in automatically, so this works on IR-3 models whose weights are built
    by nodes; so are those of an output no node in ``node_names`` makes (a model output that is a
    constant). Each generator sits just before its first reader (:func:`place_generators`). The result
    has IR version ≥ 4 so initializers need not be listed as inputs, keeps the opset imports, and passes
    ``onnx.checker``. Initializers are copied as they are: external ones stay references. ``index``:
    :meth:`ModelIndex.of` ``model``, when the caller extracts many parts of it.
    """
    g = model.graph
    index = index or ModelIndex.of(model)
    wanted = set(node_names)
    missing = wanted - index.position.keys()
    if missing:
        raise ValueError(f"unknown node names: {sorted(missing)[:5]}")
    initializers = index.initializers
    constants = constants or {}
    inputs = [v for v in inputs if v not in constants]
    selected_names, needed_inits = _closure(index, wanted, set(inputs) | set(constants), outputs)
    selected = place_generators(index.in_order(selected_names), selected_names - wanted)
    declare = declare or _stated_types(model)
    graph = onnx.helper.make_graph(
        nodes=selected,
        name=name or f"{g.name or 'model'}_part",
        inputs=[declare(v) for v in inputs],
        outputs=[declare(v) for v in outputs],
        initializer=[initializers[v] for v in needed_inits] + list(constants.values()),
    )
    part = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), producer_name="onnxpart")
    part.ir_version = max(model.ir_version, 4)
    part.functions.extend(model.functions)
    return part


def _closure(index: ModelIndex, wanted: set[str], provided: set[str],
             outputs: Sequence[str]) -> tuple[set[str], list[str]]:
    """Backward closure from the wanted nodes, and from outputs no wanted node makes (a model output that
    is a constant), through values nobody provides (i.e. weight generators): (node names, initializers)."""

    producer, initializers = index.producer, index.initializers
    selected: set[str] = set()
    needed_inits: list[str] = []
    wanted_nodes = index.in_order(wanted)
    stack = [node.name for node in wanted_nodes]

    def need(value: str) -> None:
        if value in provided:
            return
        if value in initializers:
            if value not in needed_inits:
                needed_inits.append(value)
        elif value in producer and producer[value].name not in wanted | selected:
            stack.append(producer[value].name)

    made_by_wanted = {o for node in wanted_nodes for o in node.output}
    for value in outputs:
        if value not in made_by_wanted:
            need(value)
    while stack:
        node = index.nodes[index.position[stack.pop()]]
        if node.name in selected:
            continue
        selected.add(node.name)
        reads = [n for n in node.input if n] + (outer_scope_names(node) if subgraphs(node) else [])
        for value in reads:
            need(value)
    return selected, needed_inits


def _stated_types(model: onnx.ModelProto) -> Callable[[str], onnx.ValueInfoProto]:
    g = model.graph
    stated = {vi.name: vi for vi in list(g.value_info) + list(g.input) + list(g.output)}
    initializers = {init.name: init for init in g.initializer}

    def declare(value: str) -> onnx.ValueInfoProto:
        if value in stated:
            return copy_proto(stated[value])
        if value in initializers:
            init = initializers[value]
            return onnx.helper.make_tensor_value_info(value, init.data_type, list(init.dims))
        raise ValueError(f"no type known for {value!r}")

    return declare


def place_generators(nodes: Sequence[onnx.NodeProto], generators: Iterable[str]) -> list[onnx.NodeProto]:
    """``nodes`` in their order, except that each weight generator (named in ``generators``) is moved to
    just before the first node that reads it, directly or from a subgraph body — where a runtime that
    frees tensors after their last reader starts to hold its output. Generators nobody reads keep their
    relative order at the end."""

    generators = set(generators)
    maker = {out: node for node in nodes if node.name in generators for out in node.output if out}
    placed: set[str] = set()
    order: list[onnx.NodeProto] = []

    def put(node: onnx.NodeProto) -> None:
        reads = list(node.input) + (outer_scope_names(node) if subgraphs(node) else [])
        for value in reads:
            gen = maker.get(value)
            if gen is not None and gen.name not in placed:
                placed.add(gen.name)
                put(gen)
        order.append(node)

    for node in nodes:
        if node.name not in generators:
            put(node)
    for node in nodes:
        if node.name in generators and node.name not in placed:
            placed.add(node.name)
            put(node)
    return order
