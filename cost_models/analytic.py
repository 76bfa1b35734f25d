"""Analytic cost model: FLOPs and bytes per ONNX node, time by roofline.

``time(op) = Σ_nodes max(flops / peak[dtype], bytes / memory_bandwidth) + overhead`` — the roofline
model (Williams, Waterman & Patterson, CACM 2009). ``bytes`` counts every input read (activations and
parameters) and every output written once. FLOPs count a multiply-add as 2.

Unknown op types get FLOPs 0 (bytes-only, i.e. bandwidth bound) and one warning naming them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.graph import CostTable, Node, OpGraph, TensorInfo
from onnxpart.op_types import ELEMENTWISE_FLOPS
from onnxpart.cost_models.device import DeviceSpec

log = logging.getLogger(__name__)

#: ops that only move memory (FLOPs 0, bytes = read + write).
_MEMORY_MOVES = {"Concat", "Split", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice",
                 "Pad", "Expand", "Tile", "Gather", "GatherElements", "GatherND", "ScatterElements",
                 "ScatterND", "Scatter", "Shape", "Size", "DepthToSpace", "SpaceToDepth", "Resize",
                 "Upsample", "ConstantOfShape", "Range", "OneHot", "NonZero", "TopK", "ArgMax", "ArgMin",
                 "Compress", "ReverseSequence", "Trilu", "EyeLike", "SplitToSequence", "Col2Im"}
_REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "CumSum"}


@dataclass(frozen=True)
class NodeCost:
    flops: float
    bytes: float
    known: bool


def node_cost(node: Node, values: Mapping[str, TensorInfo]) -> NodeCost:
    """FLOPs and bytes of one ONNX node, from the inferred shapes of its inputs and outputs."""
    ins = [values.get(name) if name else None for name in node.inputs]
    outs = [values.get(name) for name in node.outputs if name]
    moved = float(sum(t.bytes for t in ins if t is not None) + sum(t.bytes for t in outs if t is not None))
    shape = lambda t: t.shape if t is not None else ()  # noqa: E731
    out_numel = float(sum(math.prod(t.shape) for t in outs if t is not None))
    flops = _flops(node, [shape(t) for t in ins], [shape(t) for t in outs], out_numel)
    return NodeCost(flops if flops is not None else 0.0, moved, flops is not None)


def _flops(node: Node, ins: Sequence[tuple[int, ...]], outs: Sequence[tuple[int, ...]], out_numel: float) -> float | None:
    t = node.op_type
    a = node.attrs
    numel = lambda s: float(math.prod(s))  # noqa: E731
    if t in ELEMENTWISE_FLOPS:  # BatchNormalization included (4 FLOPs per output element)
        arity = max(1, len([s for s in ins if s is not None]) - 1) if t in ("Sum", "Mean", "Max", "Min") else 1
        return ELEMENTWISE_FLOPS[t] * out_numel * arity
    if t in _MEMORY_MOVES:
        return 0.0
    if t in ("Conv", "ConvInteger", "QLinearConv"):
        w = ins[1] if t != "QLinearConv" else ins[3]
        kernel = numel(w[2:])
        cin_per_group = w[1] if len(w) > 1 else 1  # W is (Cout, Cin/group, k...): groups are in W already
        bias = out_numel if len(ins) > 2 and t == "Conv" and ins[2] else 0.0
        return 2.0 * out_numel * cin_per_group * kernel + bias
    if t == "ConvTranspose":
        x, w = ins[0], ins[1]  # W is (Cin, Cout/group, k...): each input element feeds Cout/group * k outputs
        return 2.0 * numel(x) * (w[1] if len(w) > 1 else 1) * numel(w[2:])
    if t in ("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"):
        k = ins[0][-1] if ins[0] else 1
        return 2.0 * out_numel * k
    if t == "Gemm":
        a_shape = ins[0]
        k = a_shape[0] if int(a.get("transA", 0)) else a_shape[-1]
        bias = out_numel if len(ins) > 2 and ins[2] else 0.0
        return 2.0 * out_numel * k + bias
    if t == "Einsum":
        return _einsum_flops(str(a.get("equation", "")), ins)
    if t in ("MaxPool", "AveragePool", "LpPool"):
        kernel = numel(a.get("kernel_shape", (1,)))
        return out_numel * kernel
    if t in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
        return numel(ins[0])
    if t in _REDUCTIONS:
        return numel(ins[0])
    if t in ("Softmax", "LogSoftmax", "Hardmax"):
        return 5.0 * out_numel
    if t in ("LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
             "InstanceNormalization", "GroupNormalization", "RMSNormalization", "MeanVarianceNormalization"):
        return 8.0 * out_numel
    if t == "LRN":
        return (2.0 * int(a.get("size", 1)) + 3.0) * out_numel
    if t in ("Attention", "MultiHeadAttention"):
        return _attention_flops(ins)
    if t in ("If", "Loop", "Scan"):
        return None
    return None


def _attention_flops(ins: Sequence[tuple[int, ...]]) -> float:
    """Q·Kᵀ and P·V (2·2·B·H·Sq·Skv·D) plus the softmax (5·B·H·Sq·Skv), for 4-D (B,H,S,D) or 3-D
    (B,S,H·D) inputs, i.e. the attention pattern as its parts."""
    q, k = ins[0], ins[1] if len(ins) > 1 and ins[1] else ins[0]
    if len(q) == 4:
        b, h, sq, d = q
        skv = k[-2] if len(k) == 4 else sq
    else:
        b, sq, hd = q if len(q) == 3 else (1, q[0], q[-1])
        h, d = 1, hd
        skv = k[-2] if len(k) >= 2 else sq
    scores = float(b * h * sq * skv)
    return 4.0 * scores * d + 5.0 * scores


def _einsum_flops(equation: str, ins: Sequence[tuple[int, ...]]) -> float | None:
    """2 × the product of every distinct index's extent (one multiply-add per point of the joint space)."""
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if "..." in lhs or len(terms) != len(ins):
        return None
    extent: dict[str, int] = {}
    for term, shape in zip(terms, ins):
        for letter, size in zip(term, shape):
            extent[letter] = size
    return 2.0 * float(math.prod(extent.values()))


def roofline(flops: float, nbytes: float, device: DeviceSpec, dtype: str = "float32") -> float:
    """Seconds of ``flops`` operations moving ``nbytes`` on ``device``: ``max(flops / peak[dtype],
    bytes / memory_bandwidth)``, launch overhead not included (module docstring)."""
    return max(flops / device.peak_for(dtype), nbytes / device.memory_bandwidth)


def analytic_costs(graph: OpGraph, device: DeviceSpec) -> OpGraph:
    """Cost every op of ``graph`` on ``device`` with the roofline model; returns a new, costed graph."""
    work, flops, moved = [], [], []
    unknown: dict[str, int] = {}
    for op in graph.ops:
        op_time = op_flops = op_bytes = 0.0
        for node in op.nodes:
            cost = node_cost(node, graph.values)
            if not cost.known:
                unknown[node.op_type] = unknown.get(node.op_type, 0) + 1
            dtype = next((graph.values[o].dtype for o in node.outputs if o in graph.values), "float32")
            op_time += roofline(cost.flops, cost.bytes, device, dtype)
            op_time += device.op_overhead
            op_flops += cost.flops
            op_bytes += cost.bytes
        work.append(op_time)
        flops.append(op_flops)
        moved.append(op_bytes)
    if unknown:
        log.warning("no FLOP formula for %s: costed by bytes moved only",
                    ", ".join(f"{t} (x{c})" for t, c in sorted(unknown.items())))
    return graph.with_costs(work, flops, moved, cost_model="analytic", device=device.name,
                            bandwidth=device.interconnect_bandwidth)


def device_costs(graph: OpGraph, devices: Mapping[str, DeviceSpec],
                 links: Mapping[tuple[str, str], float] | None = None) -> OpGraph:
    """Cost ``graph`` on every device kind of ``devices`` (name -> spec; one roofline pass per distinct
    spec); ``Op.work`` is the first device's column. ``links`` default to each spec's interconnect
    bandwidth between two devices of that kind."""
    columns: dict[int, list[float]] = {}
    for spec in devices.values():
        if id(spec) not in columns:
            columns[id(spec)] = [op.work for op in analytic_costs(graph, spec).ops]
    names = tuple(devices)
    work = np.array([columns[id(devices[name])] for name in names], dtype=float).T.reshape(len(graph.ops), len(names))
    table_links = dict(links) if links is not None else {
        (name, name): spec.interconnect_bandwidth for name, spec in devices.items() if spec.interconnect_bandwidth}
    return graph.with_cost_table(CostTable(names, work, table_links), names[0], "analytic")
