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

Every reader's errors are one-line :class:`UserError` naming the file and the problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from onnxpart.costs_io import graph_from_costs, is_costs
from onnxpart.errors import UserError
from onnxpart.files import read_json
from onnxpart.dag import Dag
from onnxpart.graph import Node, Op, OpGraph, Param, Tensor, TensorInfo

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


# ------------------------------------------------------------------------------- dnn-partitioning
def is_dnn_partitioning(data: Any) -> bool:
    """True for the dnn-partitioning artifact's format (``nodes`` with ``fpgaLatency``, ``edges`` with
    ``sourceId``/``destId``/``cost``)."""
    try:
        return (isinstance(data, dict) and isinstance(data.get("nodes"), list) and isinstance(data.get("edges"), list)
                and (not data["nodes"] or "fpgaLatency" in data["nodes"][0]))
    except (TypeError, KeyError):
        return False


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
    nodes = _dnn_nodes(data, source)
    op_of = _dnn_ops(nodes.color, nodes.edges, source)
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


def _dnn_nodes(data: dict[str, Any], source: str) -> _DnnNodes:
    """Parse and check the nodes and edges of a dnn-partitioning graph."""
    try:
        nodes = list(data["nodes"])
        ids = [int(n["id"]) for n in nodes]
        if len(set(ids)) != len(ids):
            raise UserError(f"{source}: node ids are not unique")
        where = {node_id: i for i, node_id in enumerate(ids)}
        latency = [float(n["fpgaLatency"]) for n in nodes]
        size = [float(n.get("size", 0.0)) for n in nodes]
        labels = [str(n.get("name", n["id"])) for n in nodes]
        color = [n.get("colorClass", ("solo", n["id"])) for n in nodes]
        edges, out_cost, out_bytes = [], {}, {}
        for e in data["edges"]:
            u, v = where[int(e["sourceId"])], where[int(e["destId"])]
            cost = float(e["cost"])
            if u in out_cost and abs(out_cost[u] - cost) > 1e-6:
                raise UserError(f"{source}: node {ids[u]} has two different outgoing edge costs")
            out_cost[u] = cost
            out_bytes[u] = max(out_bytes.get(u, 0.0), float(e.get("size", 0.0)))
            edges.append((u, v))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: malformed dnn-partitioning graph ({type(exc).__name__}: {exc})") from None
    if not all(x >= 0 and math.isfinite(x) for x in latency + size + [*out_cost.values(), *out_bytes.values()]):
        raise UserError(f"{source}: negative or non-finite latency, size or edge cost")
    if len(set(labels)) != len(labels):
        labels = [f"{label}#{node_id}" for label, node_id in zip(labels, ids)]
    return _DnnNodes(labels, latency, size, color, edges, out_cost, out_bytes)


def _dnn_ops(color: list[Any], edges: list[tuple[int, int]], source: str) -> list[int]:
    """Op index of every node: colour classes contracted, then the strongly connected components of the
    contraction fused (so a cycle is never an error), ops numbered in a topological order (ties: first
    appearance in the file)."""
    import networkx as nx

    try:
        class_of = {c: i for i, c in enumerate(dict.fromkeys(color))}
    except TypeError:
        raise UserError(f"{source}: a colorClass is not a number or a string") from None
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


def read_node_link(data: dict[str, Any], source: str = "graph") -> OpGraph:
    """An OpGraph from a networkx node-link graph (the Moccasin benchmark graphs), parsed by
    :func:`networkx.node_link_graph` (edges under ``links`` or ``edges``; always read as directed).

    Node attributes: ``duration`` and ``out_cost`` (random layered graphs; the graph attribute
    ``node_duration_tag`` / ``node_output_cost_tag`` may rename them) or ``cost_cpu`` and ``cost_ram``
    (Checkmate graphs); ``param_cost`` is not read. Node ids are ``id`` (or ``name``); edge endpoints are
    ``source``/``target`` (or ``"0"``/``"1"``, as networkx writes some multigraph exports). The op order is
    the graph attribute ``order`` when present (the input topological order whose peak sets the budget),
    else the node-list order; sinks are the graph outputs. Each node has one output tensor, named after
    the node.
    """
    graph, attrs = _node_link_graph(data, source)
    duration_tag = attrs.get("node_duration_tag", "duration")
    size_tag = attrs.get("node_output_cost_tag", "out_cost")
    ids = list(graph.nodes)
    nodes = [graph.nodes[i] for i in ids]
    try:
        names = [str(a.get("name", i)) for i, a in zip(ids, nodes)]
        durations = [float(a[duration_tag] if duration_tag in a else a["cost_cpu"]) for a in nodes]
        sizes = [int(a[size_tag] if size_tag in a else a["cost_ram"]) for a in nodes]
        where = {node_id: i for i, node_id in enumerate(ids)}
        order = [where[i] for i in attrs["order"]] if attrs.get("order") else list(range(len(ids)))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: not a graph onnxpart can read (missing or bad {exc}); nodes need "
                        "duration/out_cost or cost_cpu/cost_ram") from None
    if len(set(names)) != len(names):
        names = [f"{name}#{i}" for i, name in enumerate(names)]
    if any(d < 0 or not math.isfinite(d) for d in durations) or any(s < 0 for s in sizes):
        raise UserError(f"{source}: negative or non-finite duration or size")
    edges = [(where[u], where[v]) for u, v in graph.edges()]
    order = _node_link_order(order, edges, source)
    return _node_link_opgraph(names, durations, sizes, edges, order,
                              str(attrs.get("name", Path(source).stem)))


def _node_link_graph(data: dict[str, Any], source: str):
    """(``networkx`` directed graph, graph attribute dict) of a node-link dict; one-line errors."""
    import networkx as nx

    links = "links" if "links" in data else "edges"
    raw_nodes, raw_links = data.get("nodes"), data.get(links)
    if not isinstance(raw_nodes, list) or not isinstance(raw_links, list):
        raise UserError(f"{source}: a node-link graph needs lists 'nodes' and '{links}'")
    key = "id" if all(isinstance(n, dict) and "id" in n for n in raw_nodes) else "name"
    if not all(isinstance(n, dict) and key in n for n in raw_nodes):
        raise UserError(f"{source}: every node needs an 'id' (or a 'name')")
    first = raw_links[0] if raw_links and isinstance(raw_links[0], dict) else {}
    ends = ("0", "1") if "source" not in first and "0" in first else ("source", "target")
    try:
        graph = nx.node_link_graph({**data, "directed": True}, source=ends[0], target=ends[1], name=key,
                                   edges=links)
    except (KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{source}: malformed node-link graph ({type(exc).__name__}: {exc})") from None
    if graph.number_of_nodes() != len(raw_nodes):
        raise UserError(f"{source}: node ids are not unique, or a link names a node that is not in 'nodes'")
    attrs = data.get("graph") or {}
    if isinstance(attrs, list):  # older networkx wrote graph attributes as [[key, value], ...]
        attrs = {k: v for k, v in attrs}
    return graph, attrs


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
