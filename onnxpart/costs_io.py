"""``costs.json``: a costed OpGraph as a file (written by ``onnxpart annotate``, read by every command
through ``--costs`` or, via :func:`onnxpart.readers.read_graph`, as the graph itself). The schema is
documented in README.md.

Reading needs only: ``ops[].name``, ``ops[].work`` and ``tensors[]`` with ``name``, ``bytes``,
``producer`` (an op name or null) and ``consumers`` (op names); everything else is optional, so any tool
can write a graph onnxpart will read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from onnxpart.dag import Dag
from onnxpart.errors import UserError
from onnxpart.files import read_json
from onnxpart.graph import Node, Op, OpGraph, Param, Tensor, TensorInfo

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


def read_costs_file(path: str | Path) -> dict[str, Any]:
    """The parsed costs file at ``path``; a one-line UserError if it is not one."""
    data = read_json(path, "costs file")
    if not is_costs(data):
        raise UserError(f"{path} is not an onnxpart costs file (needs 'ops' and 'tensors'; see README)")
    return data


def graph_from_costs(data: dict[str, Any], source: str = "costs file") -> OpGraph:
    """Rebuild a costed OpGraph; ops are re-sorted topologically if the file lists them otherwise."""
    try:
        raw_ops = list(data["ops"])
        names = [str(o["name"]) for o in raw_ops]
        if len(set(names)) != len(names):
            raise UserError(f"{source}: op names are not unique")
        where = {name: i for i, name in enumerate(names)}
        raw_tensors = list(data["tensors"])
        for t in raw_tensors:
            for ref in [t.get("producer")] + list(t.get("consumers", [])):
                if ref is not None and ref not in where:
                    raise UserError(f"{source}: tensor {t['name']!r} names unknown op {ref!r}")
        try:
            order = Dag(len(raw_ops), [(where[t["producer"]], where[c]) for t in raw_tensors
                                       if t.get("producer") is not None
                                       for c in t.get("consumers", [])]).topological_order().tolist()
        except ValueError:
            raise UserError(f"{source}: the graph has a cycle") from None
        new_index = {old: new for new, old in enumerate(order)}
        tensors = {}
        op_inputs: list[list[str]] = [[] for _ in raw_ops]
        op_outputs: list[list[str]] = [[] for _ in raw_ops]
        for t in raw_tensors:
            producer = None if t.get("producer") is None else new_index[where[t["producer"]]]
            consumers = tuple(sorted(new_index[where[c]] for c in t.get("consumers", [])))
            size = float(t["bytes"])
            if size < 0 or not math.isfinite(size):
                raise UserError(f"{source}: tensor {t['name']!r} has bytes {t['bytes']!r}")
            transfer = None if t.get("transfer") is None else float(t["transfer"])
            if transfer is not None and (transfer < 0 or not math.isfinite(transfer)):
                raise UserError(f"{source}: tensor {t['name']!r} has transfer {t['transfer']!r}")
            tensors[t["name"]] = Tensor(str(t["name"]), str(t.get("dtype", "unknown")), tuple(t.get("shape", ())),
                                        int(round(size)), producer, consumers, transfer)
            if producer is not None:
                op_outputs[producer].append(t["name"])
            for c in consumers:
                op_inputs[c].append(t["name"])
        params = {}
        for p in data.get("params", []):
            params[p["name"]] = Param(p["name"], p.get("dtype", "unknown"), tuple(p.get("shape", ())), int(p["bytes"]),
                                      new_index[where[p["owner"]]],
                                      tuple(new_index[where[c]] for c in p.get("consumers", [p["owner"]])))
        ops = []
        for new, old in enumerate(order):
            o = raw_ops[old]
            work = float(o.get("work", 0.0))
            if work < 0 or not math.isfinite(work):
                raise UserError(f"{source}: op {o['name']!r} has work {o.get('work')!r}")
            onnx_nodes = o.get("onnx_nodes") or [o["name"]]
            op_type = str(o.get("op_type", "Op"))
            ops.append(Op(
                index=new, name=str(o["name"]), op_type=op_type,
                nodes=tuple(Node(n, op_type, "", (), ()) for n in onnx_nodes),
                inputs=tuple(op_inputs[new]), outputs=tuple(op_outputs[new]),
                params=tuple(o.get("params", ())), param_bytes=int(o.get("param_bytes", 0)),
                const_nodes=tuple(o.get("const_nodes", ())), internal_bytes=int(o.get("internal_bytes", 0)),
                opaque=bool(o.get("opaque", False)), work=work, flops=float(o.get("flops", 0.0)),
                mem_bytes=float(o.get("mem_bytes", 0.0)),
            ))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: malformed entry ({type(exc).__name__}: {exc})") from None
    values = {t.name: TensorInfo(t.dtype, t.shape, t.bytes) for t in tensors.values()}
    model = data.get("model") or {}
    inputs = data.get("inputs") or [t.name for t in tensors.values() if t.producer is None]
    outputs = data.get("outputs") or [t.name for t in tensors.values() if t.producer is not None and not t.consumers]
    return OpGraph(
        name=str(data.get("graph", "graph")), ops=ops, tensors=tensors, params=params, inputs=inputs,
        outputs=outputs, values=values, model_sha256=model.get("sha256"),
        cost_model=str(data.get("cost_model") or "file"), device=data.get("device"),
        bandwidth=float(data["bandwidth"]) if data.get("bandwidth") else None,
    )


def apply_costs(graph: OpGraph, data: dict[str, Any], source: str = "costs file") -> OpGraph:
    """Put the work of a costs file on ``graph`` (same model, same op names), refusing a mismatch."""
    recorded = (data.get("model") or {}).get("sha256")
    if recorded and graph.model_sha256 and recorded != graph.model_sha256:
        raise UserError(f"{source} was made for another model (sha256 {recorded[:12]}…, this one is "
                        f"{graph.model_sha256[:12]}…): run annotate again")
    by_name = {o["name"]: o for o in data["ops"]}
    missing = [op.name for op in graph.ops if op.name not in by_name]
    if missing:
        raise UserError(f"{source} has no cost for op {missing[0]!r} (and {len(missing) - 1} more): "
                        "was it made with the same --coarsen and --input-shape?")
    work = [float(by_name[op.name].get("work", 0.0)) for op in graph.ops]
    flops = [float(by_name[op.name].get("flops", 0.0)) for op in graph.ops]
    mem = [float(by_name[op.name].get("mem_bytes", 0.0)) for op in graph.ops]
    return graph.with_costs(work, flops, mem, cost_model=str(data.get("cost_model") or "file"),
                            device=data.get("device"),
                            bandwidth=float(data["bandwidth"]) if data.get("bandwidth") else None)
