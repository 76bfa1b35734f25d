"""One reader for every graph format, into the one view every strategy sees: a costed :class:`OpGraph`.

:func:`read_graph` reads a file as ``--format`` says, or by suffix and content (``auto``: a ``.json`` file
is a graph, recognised by its keys; anything else is an ONNX model):

- ``onnx``: an ONNX model, costed with the analytic roofline on ``device``. (The CLI's
  :func:`onnxpart.cli.common.load_costed` loads models itself: it also keeps the model for emission and
  offers measured costs and ``--costs``; every other format it reads through here.)
- ``costs``: a costs.json from ``onnxpart annotate`` or any tool (:func:`onnxpart.costs_io.graph_from_costs`).
- ``dnn-partitioning``: the JSON graphs of the dnn-partitioning artifact (Tarnawski et al., NeurIPS 2020),
  :func:`read_dnn_partitioning`.
- ``node-link``: networkx node-link JSON (the Moccasin and Checkmate benchmark graphs),
  :func:`read_node_link`.

Every JSON format has its pydantic schema (:class:`~onnxpart.costs_io.CostsFile`, :class:`DnnGraph`, the
node-link schema of :func:`_node_link_schema`), so every reader's errors are one-line :class:`UserError`
naming the file, the field and the problem: a wrong type, a negative or non-finite number, an unknown
node in an edge.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Mapping, Optional, Sequence

from pydantic import Field, PlainValidator, create_model
from pydantic_core import PydanticCustomError

from onnxpart.costs_io import Bytes, Seconds, graph_from_costs, is_costs
from onnxpart.dag import Dag
from onnxpart.errors import UserError
from onnxpart.files import read_json
from onnxpart.graph import Node, Op, OpGraph, Param, Tensor, TensorInfo
from onnxpart.units import quoted
from onnxpart.validate import OpenSchema, Schema, located, validate

FORMATS = ("auto", "onnx", "costs", "dnn-partitioning", "node-link")


def check_format(fmt: str) -> None:
    """Refuse a ``--format`` that is not one of :data:`FORMATS`."""
    if fmt not in FORMATS:
        raise UserError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")


def reads_model(path: str | Path, fmt: str = "auto") -> bool:
    """True when ``path`` is read as an ONNX model: ``--format onnx``, or ``auto`` and not ``.json``."""
    check_format(fmt)
    is_json = Path(path).suffix.lower() == ".json"
    if fmt == "onnx" and is_json:
        raise UserError(f"{path} is a JSON graph, not an ONNX model (drop --format onnx)")
    return fmt == "onnx" or (fmt == "auto" and not is_json)


def read_graph(path: str | Path, fmt: str = "auto", *, input_shapes: Mapping[str, Sequence[int]] | None = None,
               dims: Mapping[str, int] | None = None, coarsen: bool = False, device: str = "a100") -> OpGraph:
    """The costed OpGraph of the file at ``path`` in format ``fmt`` (one of :data:`FORMATS`).

    ``input_shapes``, ``dims``, ``coarsen`` and ``device`` apply to ONNX models only (as in
    :func:`onnxpart.onnx_io.load_graph` and the analytic cost model)."""
    path = Path(path)
    if reads_model(path, fmt):
        from onnxpart.cost_models import analytic_costs, load_device
        from onnxpart.onnx_io import load_graph

        graph, _ = load_graph(path, input_shapes, coarsen=coarsen, dims=dims)
        return analytic_costs(graph, load_device(device))
    return read_graph_data(read_json(path, "graph file"), fmt, str(path))


def detect_format(data: Any) -> str | None:
    """The format of parsed JSON (``costs``, ``node-link`` or ``dnn-partitioning``), None if none fits."""
    for fmt, (fits, _, _) in _JSON_FORMATS.items():
        if fits(data):
            return fmt
    return None


def read_graph_data(data: Any, fmt: str, source: str) -> OpGraph:
    """The OpGraph of parsed JSON ``data`` in format ``fmt`` (``auto``: detected); ``source`` names it in
    errors."""
    kind = detect_format(data) if fmt == "auto" else fmt
    if kind is None:
        raise UserError(f"{source} is not a graph onnxpart can read: expected " + ", ".join(
            what for _, _, what in _JSON_FORMATS.values()) + " (see README)")
    fits, read, what = _JSON_FORMATS[kind]
    if not fits(data):
        raise UserError(f"{source} is not {what}")
    return read(data, source)


# ------------------------------------------------------------------------------------------ schemas
def _is_label(value: Any) -> Any:
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    raise PydanticCustomError("label", "must be an integer or a string, got {got}", {"got": quoted(value)})


#: A node id or a colour class: an integer or a string.
Label = Annotated[Any, PlainValidator(_is_label)]


class _DnnNode(OpenSchema):
    id: int
    fpgaLatency: Seconds
    size: Bytes = 0.0
    name: Optional[str] = None
    colorClass: Optional[Label] = None


class _DnnEdge(OpenSchema):
    sourceId: int
    destId: int
    cost: Seconds
    size: Bytes = 0.0


class DnnGraph(OpenSchema):
    """The schema of a dnn-partitioning graph (what onnxpart reads of it)."""

    nodes: list[_DnnNode]
    edges: list[_DnnEdge]


# ------------------------------------------------------------------------------- dnn-partitioning
def is_dnn_partitioning(data: Any) -> bool:
    """True for the dnn-partitioning artifact's format (``nodes`` with ``fpgaLatency``, ``edges`` with
    ``sourceId``/``destId``/``cost``)."""
    return (isinstance(data, dict) and isinstance(data.get("nodes"), list) and isinstance(data.get("edges"), list)
            and (not data["nodes"] or (isinstance(data["nodes"][0], dict) and "fpgaLatency" in data["nodes"][0])))


def read_dnn_partitioning(data: dict[str, Any], source: str = "graph") -> OpGraph:
    """The OpGraph of a dnn-partitioning JSON graph (accelerator-only; ``cpuLatency``, ``maxCPUs``,
    ``maxFPGAs``, ``maxSizePerFPGA`` and backward nodes' training semantics are ignored).

    - Work: ``fpgaLatency``, the accelerator latency, since every stage is an accelerator (the artifact's
      CPU side is not modelled; ``cpuLatency`` could become a second device column later).
    - Ops: nodes of one ``colorClass`` must share a device, so they are contracted into one op; if that
      creates a cycle, the strongly connected components are fused (as the artifact does). Ops are in a
      topological order, ties broken by first appearance in the file.
    - Tensors: a node with edges to other ops has one output tensor, named after it, read by those ops.
      Its edge ``cost`` is a *time* (the same on every edge out of the node), carried as
      :attr:`Tensor.transfer`, so partition pays exactly that time and needs no bandwidth (the graph
      records none: ``--bandwidth`` only prices ``--stage-memory`` overflow). Its bytes (the memory remat
      counts) are the largest edge ``size`` out of the node, 0 where the file gives none. Edges inside one
      op carry no tensor; sources and sinks are free, so the graph has no inputs or outputs.
    - Parameters: a node's ``size`` is parameter bytes, one :class:`Param` per node owned by its op.
    """
    nodes = _dnn_nodes(validate(DnnGraph, data, source), source)
    op_of = _dnn_ops(nodes.color, nodes.edges)
    return _dnn_graph(nodes, op_of, Path(source).stem)


@dataclass(frozen=True)
class _DnnNodes:
    """The numbers of a dnn-partitioning file, per node index (file order)."""

    labels: list[str]
    latency: list[float]
    size: list[float]
    color: list[Any]
    edges: list[tuple[int, int]]
    out_cost: dict[int, float]  # node -> transfer time of its output
    out_bytes: dict[int, float]  # node -> largest edge size out of it


def _dnn_nodes(graph: DnnGraph, source: str) -> _DnnNodes:
    """The nodes and edges of a validated dnn-partitioning graph: ids unique, every edge between listed
    nodes, one transfer time per node."""
    where: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        if n.id in where:
            raise located(source, ("nodes", i, "id"), f"node id {n.id} is listed twice")
        where[n.id] = i
    edges, out_cost, out_bytes = [], {}, {}
    for i, e in enumerate(graph.edges):
        for key in ("sourceId", "destId"):
            if getattr(e, key) not in where:
                raise located(source, ("edges", i, key), f"unknown node id {getattr(e, key)}")
        u, v = where[e.sourceId], where[e.destId]
        if u in out_cost and abs(out_cost[u] - e.cost) > 1e-6:
            raise located(source, ("edges", i, "cost"), f"node {e.sourceId} has two different outgoing edge costs")
        out_cost[u] = e.cost
        out_bytes[u] = max(out_bytes.get(u, 0.0), e.size)
        edges.append((u, v))
    labels = [n.name if n.name is not None else str(n.id) for n in graph.nodes]
    if len(set(labels)) != len(labels):
        labels = [f"{label}#{n.id}" for label, n in zip(labels, graph.nodes)]
    return _DnnNodes(labels, [n.fpgaLatency for n in graph.nodes], [n.size for n in graph.nodes],
                     [n.colorClass if n.colorClass is not None else ("solo", n.id) for n in graph.nodes], edges,
                     out_cost, out_bytes)


def _dnn_ops(color: list[Any], edges: list[tuple[int, int]]) -> list[int]:
    """Op index of every node: colour classes contracted, then the strongly connected components of the
    contraction fused (so a cycle is never an error), ops numbered in a topological order (ties: first
    appearance in the file)."""
    import networkx as nx

    class_of = {c: i for i, c in enumerate(dict.fromkeys(color))}
    group = [class_of[c] for c in color]
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(class_of)))
    contracted.add_edges_from((group[u], group[v]) for u, v in edges if group[u] != group[v])
    scc = {}
    for index, component in enumerate(nx.strongly_connected_components(contracted)):
        for g in component:
            scc[g] = index
    group = [scc[g] for g in group]
    count = len(set(group))
    first: dict[int, int] = {}
    for i, g in enumerate(group):
        first.setdefault(g, i)
    group_edges = {(group[u], group[v]) for u, v in edges if group[u] != group[v]}
    order = Dag(count, group_edges).topological_order([first[g] for g in range(count)]).tolist()  # acyclic
    rank = {g: r for r, g in enumerate(order)}
    return [rank[g] for g in group]


def _dnn_graph(nodes: _DnnNodes, op_of: list[int], name: str) -> OpGraph:
    """Assemble the OpGraph of :func:`read_dnn_partitioning` (tensors in (op, node) order)."""
    labels = nodes.labels
    members: list[list[int]] = [[] for _ in range(len(set(op_of)))]
    for i, op in enumerate(op_of):
        members[op].append(i)
    users: dict[int, set[int]] = {}
    for u, v in nodes.edges:
        if op_of[u] != op_of[v]:
            users.setdefault(u, set()).add(op_of[v])
    tensors: dict[str, Tensor] = {}
    params: dict[str, Param] = {}
    reads: list[list[str]] = [[] for _ in members]
    writes: list[list[str]] = [[] for _ in members]
    owns: list[list[Param]] = [[] for _ in members]
    for op, member in enumerate(members):
        for u in member:
            if u in users:
                size = int(round(nodes.out_bytes[u]))
                tensors[labels[u]] = Tensor(labels[u], "bytes", (size,), size, op, tuple(sorted(users[u])),
                                            nodes.out_cost[u])
                writes[op].append(labels[u])
                for consumer in users[u]:
                    reads[consumer].append(labels[u])
            if nodes.size[u] > 0:
                size = int(round(nodes.size[u]))
                param = params[f"{labels[u]}:params"] = Param(f"{labels[u]}:params", "bytes", (size,), size, op, (op,))
                owns[op].append(param)
    names = [("+".join(labels[i] for i in m) if len(m) <= 3 else f"{labels[m[0]]}+{len(m) - 1}") for m in members]
    if len(set(names)) != len(names):
        names = [f"{label}#{op}" for op, label in enumerate(names)]
    ops = [Op(index=op, name=names[op], op_type="Node",
              nodes=tuple(Node(labels[i], "Node", "", (), ()) for i in member), inputs=tuple(reads[op]),
              outputs=tuple(writes[op]), params=tuple(p.name for p in owns[op]),
              param_bytes=sum(p.bytes for p in owns[op]), work=sum(nodes.latency[i] for i in member))
           for op, member in enumerate(members)]
    values = {t.name: TensorInfo(t.dtype, t.shape, t.bytes) for t in [*tensors.values(), *params.values()]}
    return OpGraph(name=name, ops=ops, tensors=tensors, params=params, inputs=[], outputs=[], values=values,
                   cost_model="dnn-partitioning fpgaLatency")


# ------------------------------------------------------------------------------------ node-link
def is_node_link(data: Any) -> bool:
    """networkx node-link JSON: ``nodes`` plus ``links`` (or ``edges``) and a ``graph`` attribute dict."""
    return isinstance(data, dict) and "nodes" in data and ("links" in data or "edges" in data) \
        and "graph" in data and "ops" not in data


class _NodeLinkAttrs(OpenSchema):
    node_duration_tag: str = "duration"
    node_output_cost_tag: str = "out_cost"
    order: Optional[list[Label]] = None
    name: Optional[str] = None


@functools.lru_cache(maxsize=None)
def _node_link_schema(id_key: str, duration_key: str, size_key: str, links_key: str,
                      ends: tuple[str, str]) -> type[Schema]:
    """The schema of a node-link graph whose nodes are keyed ``id_key`` with times ``duration_key`` and
    output bytes ``size_key``, and whose links (under ``links_key``) run ``ends[0]`` -> ``ends[1]``."""
    node = create_model("NodeLinkNode", __base__=OpenSchema, **{
        "node_id": (Label, Field(alias=id_key)), "duration": (Seconds, Field(alias=duration_key)),
        "size": (Bytes, Field(alias=size_key)), "label": (Optional[Label], Field(None, alias="name"))})
    link = create_model("NodeLinkLink", __base__=OpenSchema, source=(Label, Field(alias=ends[0])),
                        target=(Label, Field(alias=ends[1])))
    return create_model("NodeLinkGraph", __base__=OpenSchema, nodes=(list[node], ...),
                        links=(list[link], Field(alias=links_key)))


def read_node_link(data: dict[str, Any], source: str = "graph") -> OpGraph:
    """An OpGraph from a networkx node-link graph (the Moccasin benchmark graphs).

    Node attributes: ``duration`` and ``out_cost`` (random layered graphs; the graph attribute
    ``node_duration_tag`` / ``node_output_cost_tag`` may rename them) or ``cost_cpu`` and ``cost_ram``
    (Checkmate graphs); ``param_cost`` is not read. Node ids are ``id`` (or ``name``); edge endpoints are
    ``source``/``target`` (or ``"0"``/``"1"``, as networkx writes some multigraph exports). Edges are
    always read as directed. The op order is the graph attribute ``order`` when present (the input
    topological order whose peak sets the budget), else the node-list order; sinks are the graph outputs.
    Each node has one output tensor, named after the node.
    """
    attrs = _node_link_attrs(data, source)
    keys = _node_link_keys(data, attrs)
    graph = validate(_node_link_schema(*keys), data, source)
    where: dict[Any, int] = {}
    for i, node in enumerate(graph.nodes):
        if node.node_id in where:
            raise located(source, ("nodes", i, keys[0]), f"node {node.node_id!r} is listed twice")
        where[node.node_id] = i
    edges = []
    for i, link in enumerate(graph.links):
        for end, key in ((link.source, keys[4][0]), (link.target, keys[4][1])):
            if end not in where:
                raise located(source, (keys[3], i, key), f"unknown node {end!r}: not in 'nodes'")
        edges.append((where[link.source], where[link.target]))
    for k, node_id in enumerate(attrs.order or []):
        if node_id not in where:
            raise located(source, ("graph", "order", k), f"unknown node {node_id!r}: not in 'nodes'")
    order = [where[i] for i in attrs.order] if attrs.order else list(range(len(graph.nodes)))
    names = [str(n.label if n.label is not None else n.node_id) for n in graph.nodes]
    if len(set(names)) != len(names):
        names = [f"{name}#{i}" for i, name in enumerate(names)]
    return _node_link_opgraph(names, [n.duration for n in graph.nodes], [int(round(n.size)) for n in graph.nodes],
                              edges, _node_link_order(order, edges, source), attrs.name or Path(source).stem)


def _node_link_attrs(data: dict[str, Any], source: str) -> _NodeLinkAttrs:
    """The graph attributes (a mapping, or the ``[[key, value], ...]`` older networkx wrote)."""
    attrs = data.get("graph") or {}
    if isinstance(attrs, list) and all(isinstance(pair, list) and len(pair) == 2 for pair in attrs):
        attrs = {str(k): v for k, v in attrs}
    return validate(_NodeLinkAttrs, attrs, source, at=("graph",))


def _node_link_keys(data: dict[str, Any], attrs: _NodeLinkAttrs) -> tuple[str, str, str, str, tuple[str, str]]:
    """The keys a node-link file uses, read from its first node and link: the node id, time and output
    bytes, the links list, and the links' two ends."""
    nodes = data.get("nodes") if isinstance(data.get("nodes"), list) else []
    first = nodes[0] if nodes and isinstance(nodes[0], dict) else {}
    id_key = "id" if "id" in first else "name"
    duration = attrs.node_duration_tag if attrs.node_duration_tag in first or "cost_cpu" not in first else "cost_cpu"
    size = attrs.node_output_cost_tag if attrs.node_output_cost_tag in first or "cost_ram" not in first else "cost_ram"
    links = "links" if "links" in data else "edges"
    raw = data.get(links) if isinstance(data.get(links), list) else []
    link = raw[0] if raw and isinstance(raw[0], dict) else {}
    ends = ("0", "1") if "source" not in link and "0" in link else ("source", "target")
    return id_key, duration, size, links, ends


def _node_link_order(order: list[int], edges: list[tuple[int, int]], source: str) -> list[int]:
    """``order`` if it is a topological permutation of the nodes, else the stable topological order."""
    n = len(order)
    if sorted(order) != list(range(n)):
        raise UserError(f"{source}: the graph attribute 'order' is not a permutation of the nodes")
    position = {v: p for p, v in enumerate(order)}
    if any(position[u] >= position[v] for u, v in edges):
        try:
            return Dag(n, edges).topological_order().tolist()
        except ValueError:
            raise UserError(f"{source}: the graph has a cycle") from None
    return order


def _node_link_opgraph(names: list[str], durations: list[float], sizes: list[int], edges: list[tuple[int, int]],
                       order: list[int], name: str) -> OpGraph:
    """One op per node in ``order``, each with one output tensor of its size; sinks are the outputs."""
    position = {v: p for p, v in enumerate(order)}
    succ: list[set[int]] = [set() for _ in order]
    pred: list[set[int]] = [set() for _ in order]
    for u, v in edges:
        if u != v:
            succ[position[u]].add(position[v])
            pred[position[v]].add(position[u])
    tensors, ops = {}, []
    for p, old in enumerate(order):
        tensors[names[old]] = Tensor(names[old], "bytes", (sizes[old],), sizes[old], p, tuple(sorted(succ[p])))
    for p, old in enumerate(order):
        ops.append(Op(index=p, name=names[old], op_type="Node", nodes=(Node(names[old], "Node", "", (), ()),),
                      inputs=tuple(names[order[q]] for q in sorted(pred[p])), outputs=(names[old],),
                      params=(), param_bytes=0, work=durations[old]))
    outputs = [names[order[p]] for p in range(len(order)) if not succ[p]]
    values = {t.name: TensorInfo(t.dtype, t.shape, t.bytes) for t in tensors.values()}
    return OpGraph(name=name, ops=ops, tensors=tensors, params={}, inputs=[], outputs=outputs, values=values,
                   cost_model="graph file")


#: JSON formats in detection order: (does it fit, reader, what it is).
_JSON_FORMATS = {
    "costs": (is_costs, graph_from_costs, "an onnxpart costs file (needs 'ops' and 'tensors')"),
    "node-link": (is_node_link, read_node_link,
                  "a networkx node-link graph (needs 'nodes', 'links' or 'edges', and 'graph')"),
    "dnn-partitioning": (is_dnn_partitioning, read_dnn_partitioning,
                         "a dnn-partitioning graph (needs 'nodes' with 'fpgaLatency' and 'edges')"),
}
