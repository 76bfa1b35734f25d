"""What ``onnxpart inspect`` reports about a costed graph, as plain data."""

from __future__ import annotations

from collections import Counter
from typing import Any

from onnxpart.graph import OpGraph
from onnxpart.memory import memory_profile


def inspect_report(graph: OpGraph, top: int = 10) -> dict[str, Any]:
    """The report of ``onnxpart inspect``: counts, parameters, FLOPs, activations, the file order's memory
    peak and the ``top`` costliest ops."""
    profile = memory_profile(graph)
    activation_bytes = sum(t.bytes for t in graph.tensors.values() if t.producer is not None)
    costliest = sorted(graph.ops, key=lambda op: (-op.work, op.index))[:top]
    return {
        "graph": graph.name,
        "model_sha256": graph.model_sha256,
        "cost_model": graph.cost_model,
        "device": graph.device,
        "bandwidth": graph.bandwidth,
        "onnx_nodes": graph.node_count,
        "ops": len(graph.ops),
        "opaque_ops": [op.name for op in graph.ops if op.opaque],
        "edges": sum(1 for _ in graph.edges()),
        "op_types": dict(Counter(op.op_type for op in graph.ops).most_common()),
        "params": len(graph.params),
        "param_bytes": graph.total_param_bytes,
        "flops": sum(op.flops for op in graph.ops),
        "work": graph.total_work,
        "activation_bytes": activation_bytes,
        "inputs": [{"name": n, "shape": list(graph.values[n].shape), "dtype": graph.values[n].dtype}
                   for n in graph.inputs if n in graph.values],
        "outputs": [{"name": n, "shape": list(graph.values[n].shape), "dtype": graph.values[n].dtype}
                    for n in graph.outputs if n in graph.values],
        "peak_activation_bytes": profile.peak,
        "peak_at_op": graph.ops[profile.order[profile.peak_event]].name if graph.ops else None,
        "costliest_ops": [
            {"name": op.name, "op_type": op.op_type, "work": op.work, "flops": op.flops,
             "param_bytes": op.param_bytes, "share": op.work / graph.total_work if graph.total_work else 0.0}
            for op in costliest
        ],
    }
