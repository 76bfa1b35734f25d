"""Frozen copies of the per-strategy readers that :mod:`onnxpart.readers` replaced (partition's
``from_dnn_json`` and remat's ``read_node_link`` as of commit 16985a2), kept verbatim as the oracle of the
identity tests in test_readers.py: the instances built through ``read_graph`` must equal theirs exactly."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from onnxpart.dag import Dag
from onnxpart.errors import UserError
from onnxpart.graph import Node, Op, OpGraph, Tensor, TensorInfo
from onnxpart.partition.model import Instance, _csr


def from_dnn_json(data: dict, name: str = "graph", bandwidth: float | None = None,
                  stage_memory: float | None = None) -> Instance:
    """Instance of a dnn-partitioning JSON graph (accelerator-only: ``cpuLatency`` and ``maxCPUs`` are
    ignored, as are backward nodes' training semantics).

    Nodes of one ``colorClass`` must share a device, so they are contracted into one op; if that creates
    a cycle, the strongly connected components are fused (as the artifact does). Each source node's
    output is one tensor whose transfer time is the edge ``cost``; ``size`` becomes parameter bytes.
    """
    try:
        nodes = list(data["nodes"])
        ids = [int(n["id"]) for n in nodes]
        if len(set(ids)) != len(ids):
            raise UserError(f"{name}: node ids are not unique")
        where = {node_id: i for i, node_id in enumerate(ids)}
        latency = [float(n["fpgaLatency"]) for n in nodes]
        size = [float(n.get("size", 0.0)) for n in nodes]
        labels = [str(n.get("name", n["id"])) for n in nodes]
        color = [n.get("colorClass", ("solo", n["id"])) for n in nodes]
        edges = []
        out_cost: dict[int, float] = {}
        for e in data["edges"]:
            u, v = where[int(e["sourceId"])], where[int(e["destId"])]
            cost = float(e["cost"])
            if u in out_cost and abs(out_cost[u] - cost) > 1e-6:
                raise UserError(f"{name}: node {ids[u]} has two different outgoing edge costs")
            out_cost[u] = cost
            edges.append((u, v))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{name}: malformed dnn-partitioning graph ({type(exc).__name__}: {exc})") from None
    if any(x < 0 for x in latency) or any(c < 0 for c in out_cost.values()):
        raise UserError(f"{name}: negative latency or edge cost")

    # Contract colour classes, then strongly connected components of the contracted graph.
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
    # Topological order of groups, ties broken by first appearance in the file.
    first = {}
    for i, g in enumerate(group):
        first.setdefault(g, i)
    group_edges = {(group[u], group[v]) for u, v in edges if group[u] != group[v]}
    try:
        order = Dag(count, group_edges).topological_order([first[g] for g in range(count)]).tolist()
    except ValueError:
        raise UserError(f"{name}: the graph has a cycle") from None
    rank = {g: r for r, g in enumerate(order)}
    op_of = [rank[g] for g in group]

    members: list[list[int]] = [[] for _ in range(count)]
    for i, op in enumerate(op_of):
        members[op].append(i)
    work = np.zeros(count)
    params = np.zeros(count)
    np.add.at(work, op_of, latency)
    np.add.at(params, op_of, size)
    users: dict[int, set[int]] = {}
    for u, v in edges:
        if op_of[u] != op_of[v]:
            users.setdefault(u, set()).add(op_of[v])
    sources = sorted(users, key=lambda u: (op_of[u], u))
    ptr, idx = _csr([users[u] for u in sources])
    if stage_memory is not None and not bandwidth:
        raise UserError("--stage-memory on a dnn-partitioning graph needs --bandwidth to price the overflow")
    return Instance(
        name=name, op_names=tuple("+".join(labels[i] for i in m) if len(m) <= 3 else f"{labels[m[0]]}+{len(m) - 1}"
                                  for m in members),
        members=tuple(tuple(labels[i] for i in m) for m in members), work=work, params=params,
        tensor_names=tuple(labels[u] for u in sources),
        producer=np.array([op_of[u] for u in sources], dtype=np.int64), cons_ptr=ptr, cons_idx=idx,
        transfer=np.array([out_cost[u] for u in sources], dtype=float), bandwidth=bandwidth,
        stage_memory=stage_memory,
    )


def read_node_link(data: dict[str, Any], source: str = "graph") -> OpGraph:
    """An OpGraph from a networkx node-link graph (the Moccasin benchmark graphs).

    Node attributes: ``duration`` and ``out_cost`` (random layered graphs; the graph attribute
    ``node_duration_tag`` / ``node_output_cost_tag`` may rename them) or ``cost_cpu`` and ``cost_ram``
    (Checkmate graphs). Node ids are ``id`` (or ``name``); edge endpoints are ``source``/``target`` (or
    ``"0"``/``"1"``, as networkx writes some multigraph exports). The op order is the graph attribute
    ``order`` when present (the input topological order whose peak sets the budget), else the node-list
    order; sinks are the graph outputs. Each node has one output tensor, named after the node.
    """
    attrs = data.get("graph") or {}
    if isinstance(attrs, list):  # older networkx wrote graph attributes as [[key, value], ...]
        attrs = {k: v for k, v in attrs}
    duration_tag = attrs.get("node_duration_tag", "duration")
    size_tag = attrs.get("node_output_cost_tag", "out_cost")
    raw_nodes = list(data["nodes"])
    raw_links = list(data.get("links", data.get("edges", [])))
    try:
        ids = [n["id"] if "id" in n else n["name"] for n in raw_nodes]
        names = [str(n.get("name", n.get("id"))) for n in raw_nodes]
        durations = [float(n[duration_tag] if duration_tag in n else n["cost_cpu"]) for n in raw_nodes]
        sizes = [int(n[size_tag] if size_tag in n else n["cost_ram"]) for n in raw_nodes]
        where = {node_id: i for i, node_id in enumerate(ids)}
        edges = []
        for link in raw_links:
            u = link["source"] if "source" in link else link["0"]
            v = link["target"] if "target" in link else link["1"]
            edges.append((where[u], where[v]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: not a graph onnxpart can read (missing or bad {exc}); nodes need "
                        "duration/out_cost or cost_cpu/cost_ram") from None
    if len(set(names)) != len(names):
        names = [f"{name}#{i}" for i, name in enumerate(names)]
    if any(d < 0 or not math.isfinite(d) for d in durations) or any(s < 0 for s in sizes):
        raise UserError(f"{source}: negative or non-finite duration or size")
    order = [where[i] for i in attrs["order"]] if attrs.get("order") else list(range(len(ids)))
    if sorted(order) != list(range(len(ids))):
        raise UserError(f"{source}: the graph attribute 'order' is not a permutation of the nodes")
    position = {v: p for p, v in enumerate(order)}
    if any(position[u] >= position[v] for u, v in edges):
        try:
            order = Dag(len(ids), edges).topological_order().tolist()
        except ValueError:
            raise UserError(f"{source}: the graph has a cycle") from None
        position = {v: p for p, v in enumerate(order)}
    succ: list[set[int]] = [set() for _ in ids]
    pred: list[set[int]] = [set() for _ in ids]
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
    return OpGraph(name=str(attrs.get("name", Path(source).stem)), ops=ops, tensors=tensors, params={},
                   inputs=[], outputs=outputs, values=values, cost_model="graph file")
