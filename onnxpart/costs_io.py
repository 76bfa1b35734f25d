"""``costs.json``: a costed OpGraph as a file (written by ``onnxpart annotate``, read by every command
through ``--costs`` or, via :func:`onnxpart.readers.read_graph`, as the graph itself). The schema is
documented in README.md.

Reading needs only: ``ops[].name``, ``ops[].work`` and ``tensors[]`` with ``name``, ``bytes``,
``producer`` (an op name or null) and ``consumers`` (op names); everything else is optional, so any tool
can write a graph onnxpart will read. :class:`CostsFile` is the schema every reader validates against:
numbers finite and in range (:mod:`onnxpart.units`), names unique, every op a tensor names listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from onnxpart.dag import Dag
from onnxpart.errors import UserError
from onnxpart.files import read_json
from onnxpart.graph import Node, Op, OpGraph, Param, Tensor, TensorInfo
from onnxpart.units import BANDWIDTH, BATCH, BYTES, DIM, FLOPS, SECONDS
from onnxpart.validate import OpenSchema, located, number, validate

SCHEMA = "onnxpart.costs/1"


def graph_to_costs(graph: OpGraph, model_path: str | None = None, device_spec: dict | None = None,
                   extra: dict | None = None) -> dict[str, Any]:
    names = [op.name for op in graph.ops]
    return {
        "schema": SCHEMA,
        "model": {"path": model_path, "sha256": graph.model_sha256},
        "graph": graph.name,
        "cost_model": graph.cost_model,
        "device": graph.device,
        "device_spec": device_spec,
        "bandwidth": graph.bandwidth,
        **(extra or {}),
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "totals": {"ops": len(graph.ops), "work": graph.total_work,
                   "flops": sum(op.flops for op in graph.ops), "param_bytes": graph.total_param_bytes},
        "ops": [
            {
                "name": op.name, "op_type": op.op_type, "onnx_nodes": list(op.onnx_nodes),
                "const_nodes": list(op.const_nodes), "work": op.work, "flops": op.flops,
                "mem_bytes": op.mem_bytes, "param_bytes": op.param_bytes, "internal_bytes": op.internal_bytes,
                "inputs": list(op.inputs), "outputs": list(op.outputs), "params": list(op.params),
                "opaque": op.opaque,
            }
            for op in graph.ops
        ],
        "tensors": [
            {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.bytes,
             "producer": None if t.producer is None else names[t.producer],
             "consumers": [names[c] for c in t.consumers],
             **({"transfer": t.transfer} if t.transfer is not None else {})}
            for t in graph.tensors.values()
        ],
        "params": [
            {"name": p.name, "dtype": p.dtype, "shape": list(p.shape), "bytes": p.bytes,
             "owner": names[p.owner], "consumers": [names[c] for c in p.consumers]}
            for p in graph.params.values()
        ],
    }


def is_costs(data: Any) -> bool:
    """True for a costs file's shape: a JSON object with ``ops`` and ``tensors``."""
    return isinstance(data, dict) and "ops" in data and "tensors" in data


# ------------------------------------------------------------------------------------------- schema
Seconds = number(SECONDS)
Bytes = number(BYTES)
Dim = number(DIM)


class CostsOp(OpenSchema):
    """``ops[]``: what a strategy reads of an op; other keys (``inputs``, ``outputs`` …) are ignored."""

    name: str
    work: Seconds = 0.0
    op_type: str = "Op"
    onnx_nodes: Optional[list[str]] = None
    const_nodes: list[str] = []
    params: list[str] = []
    flops: number(FLOPS) = 0.0
    mem_bytes: Bytes = 0.0
    param_bytes: Bytes = 0.0
    internal_bytes: Bytes = 0.0
    opaque: bool = False


class CostsTensor(OpenSchema):
    """``tensors[]``: an edge; ``producer`` null for a graph input."""

    name: str
    bytes: Bytes
    producer: Optional[str] = None
    consumers: list[str] = []
    dtype: str = "unknown"
    shape: list[Dim] = []
    transfer: Optional[Seconds] = None


class CostsParam(OpenSchema):
    """``params[]``: a weight, owned by its first consumer."""

    name: str
    bytes: Bytes
    owner: str
    consumers: Optional[list[str]] = None
    dtype: str = "unknown"
    shape: list[Dim] = []


class CostsModel(OpenSchema):
    path: Optional[str] = None
    sha256: Optional[str] = None


class CostsFile(OpenSchema):
    """A costs file (README, "costs.json schema"); keys other tools add are ignored."""

    ops: list[CostsOp]
    tensors: list[CostsTensor]
    params: list[CostsParam] = []
    model: Optional[CostsModel] = None
    graph: str = "graph"
    cost_model: Optional[str] = None
    device: Optional[str] = None
    bandwidth: Optional[number(BANDWIDTH)] = None
    batch: Optional[number(BATCH)] = None
    inputs: Optional[list[str]] = None
    outputs: Optional[list[str]] = None


def read_costs_file(path: str | Path) -> CostsFile:
    """The costs file at ``path``, validated; a one-line UserError if it is not one."""
    data = read_json(path, "costs file")
    if not is_costs(data):
        raise UserError(f"{path} is not an onnxpart costs file (needs 'ops' and 'tensors'; see README)")
    return validate(CostsFile, data, str(path))


def graph_from_costs(data: Any, source: str = "costs file") -> OpGraph:
    """Rebuild a costed OpGraph from parsed JSON (validated against :class:`CostsFile`); ops are re-sorted
    topologically if the file lists them otherwise."""
    costs = validate(CostsFile, data, source)
    where = _op_index(costs, source)
    order = _topological(costs, where, source)
    new_index = {old: new for new, old in enumerate(order)}
    tensors: dict[str, Tensor] = {}
    op_inputs: list[list[str]] = [[] for _ in costs.ops]
    op_outputs: list[list[str]] = [[] for _ in costs.ops]
    for t in costs.tensors:
        producer = None if t.producer is None else new_index[where[t.producer]]
        consumers = tuple(sorted(new_index[where[c]] for c in t.consumers))
        tensors[t.name] = Tensor(t.name, t.dtype, tuple(t.shape), int(round(t.bytes)), producer, consumers,
                                 t.transfer)
        if producer is not None:
            op_outputs[producer].append(t.name)
        for c in consumers:
            op_inputs[c].append(t.name)
    params = {p.name: Param(p.name, p.dtype, tuple(p.shape), int(round(p.bytes)), new_index[where[p.owner]],
                            tuple(new_index[where[c]] for c in (p.consumers or [p.owner])))
              for p in costs.params}
    ops = [_op(costs.ops[old], new, op_inputs[new], op_outputs[new]) for new, old in enumerate(order)]
    values = {t.name: TensorInfo(t.dtype, t.shape, t.bytes) for t in tensors.values()}
    inputs = costs.inputs or [t.name for t in tensors.values() if t.producer is None]
    outputs = costs.outputs or [t.name for t in tensors.values() if t.producer is not None and not t.consumers]
    return OpGraph(
        name=costs.graph, ops=ops, tensors=tensors, params=params, inputs=inputs, outputs=outputs, values=values,
        model_sha256=costs.model.sha256 if costs.model else None, cost_model=costs.cost_model or "file",
        device=costs.device, bandwidth=costs.bandwidth,
    )


def _op_index(costs: CostsFile, source: str) -> dict[str, int]:
    """Op name -> its index in the file; every name a tensor or parameter refers to must be one."""
    where: dict[str, int] = {}
    for i, op in enumerate(costs.ops):
        if op.name in where:
            raise located(source, ("ops", i, "name"), f"op {op.name!r} is listed twice")
        where[op.name] = i
    seen: set[str] = set()
    for kind, entries in (("tensors", costs.tensors), ("params", costs.params)):
        for i, entry in enumerate(entries):
            if entry.name in seen:
                raise located(source, (kind, i, "name"), f"{entry.name!r} is listed twice")
            seen.add(entry.name)
            refs = ([("producer", entry.producer)] if kind == "tensors" else [("owner", entry.owner)]) + [
                ("consumers", c) for c in entry.consumers or []]
            for key, ref in refs:
                if ref is not None and ref not in where:
                    raise located(source, (kind, i, key), f"{entry.name!r} names unknown op {ref!r}")
    return where


def _topological(costs: CostsFile, where: dict[str, int], source: str) -> list[int]:
    """A topological order of the file's ops (ties: file order); a cycle is an error."""
    edges = [(where[t.producer], where[c]) for t in costs.tensors if t.producer is not None for c in t.consumers]
    try:
        return Dag(len(costs.ops), edges).topological_order().tolist()
    except ValueError:
        raise UserError(f"{source}: the graph has a cycle") from None


def _op(o: CostsOp, index: int, inputs: list[str], outputs: list[str]) -> Op:
    return Op(index=index, name=o.name, op_type=o.op_type,
              nodes=tuple(Node(n, o.op_type, "", (), ()) for n in (o.onnx_nodes or [o.name])),
              inputs=tuple(inputs), outputs=tuple(outputs), params=tuple(o.params),
              param_bytes=int(round(o.param_bytes)), const_nodes=tuple(o.const_nodes),
              internal_bytes=int(round(o.internal_bytes)), opaque=o.opaque, work=o.work, flops=o.flops,
              mem_bytes=o.mem_bytes)


def apply_costs(graph: OpGraph, costs: CostsFile, source: str = "costs file") -> OpGraph:
    """Put the work of a costs file (:func:`read_costs_file`) on ``graph`` (same model, same op names),
    refusing a mismatch."""
    recorded = costs.model.sha256 if costs.model else None
    if recorded and graph.model_sha256 and recorded != graph.model_sha256:
        raise UserError(f"{source} was made for another model (sha256 {recorded[:12]}…, this one is "
                        f"{graph.model_sha256[:12]}…): run annotate again")
    by_name = {o.name: o for o in costs.ops}
    missing = [op.name for op in graph.ops if op.name not in by_name]
    if missing:
        raise UserError(f"{source} has no cost for op {missing[0]!r} (and {len(missing) - 1} more): "
                        "was it made with the same --coarsen and --input-shape?")
    work = [by_name[op.name].work for op in graph.ops]
    flops = [by_name[op.name].flops for op in graph.ops]
    mem = [by_name[op.name].mem_bytes for op in graph.ops]
    return graph.with_costs(work, flops, mem, cost_model=costs.cost_model or "file", device=costs.device,
                            bandwidth=costs.bandwidth)
