"""``onnxpart remat --ort-optimize``: plan on onnxruntime's BASIC-optimized graph
(:mod:`onnxpart.ort_optimize` makes the optimized copy). The budget stays relative to the peak of the model
the user gave, and ``--verify`` compares with it: :class:`OrtPrePass` keeps both models' numbers."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from onnxpart.errors import UserError
from onnxpart.ort_optimize import LEVEL, ort_optimized
from onnxpart.remat.model import build_instance
from onnxpart.remat.sequence import baseline


@dataclass(frozen=True)
class OrtPrePass:
    """What --ort-optimize did: the model the user gave (what --verify compares with, and whose file-order
    peak --budget P% is relative to) and the optimized graph the plan is for."""

    original_model: Any  # LoadedModel: the model the user gave
    original_sha256: str
    optimized_sha256: str
    original_nodes: int  # ONNX nodes
    optimized_nodes: int
    original_ops: int  # compute ops (weight generators folded)
    optimized_ops: int
    original_peak: float  # file order, no recomputation
    optimized_peak: float

    def to_dict(self) -> dict:
        import onnxruntime

        return {"level": LEVEL, "onnxruntime_version": onnxruntime.__version__,
                "original_sha256": self.original_sha256, "optimized_sha256": self.optimized_sha256,
                "original_nodes": self.original_nodes, "optimized_nodes": self.optimized_nodes,
                "original_ops": self.original_ops, "optimized_ops": self.optimized_ops,
                "original_peak_bytes": self.original_peak, "optimized_peak_bytes": self.optimized_peak}


def refuse_ort_optimize(model: Path, costs: Optional[Path], graph_format: str) -> None:
    """--ort-optimize needs an ONNX model and costs it itself."""
    from onnxpart.readers import reads_model

    if not reads_model(model, graph_format):
        raise UserError(f"--ort-optimize needs an ONNX model: {model} is a graph file, which onnxruntime has "
                        f"nothing to optimize in")
    if costs is not None:
        raise UserError(f"--ort-optimize cannot use --costs {costs}: those costs are for the unoptimized graph, "
                        f"whose nodes the optimizer fuses and removes; drop --costs (the optimized graph is "
                        f"costed with --cost) or drop --ort-optimize")


def load_ort_optimized(model: Path, input_shape, force_shape: bool, dim, coarsen: bool, cost: str, device: str,
                       include_params: bool, scratch: contextlib.ExitStack):
    """The costed, BASIC-optimized graph of ``model`` (what remat plans) and the :class:`OrtPrePass` report;
    the optimized model's folder lives as long as ``scratch`` (remat.onnx reads its weights from there)."""
    from onnxpart.loading import load_costed
    from onnxpart.onnx_io import load_graph, parse_dims, parse_input_shapes

    def file_order_peak(graph) -> float:
        return baseline(build_instance(graph, include_params)).peak

    original_graph, original = load_graph(model, parse_input_shapes(input_shape or [], force_shape), coarsen=coarsen,
                                          dims=parse_dims(dim or []))
    path = scratch.enter_context(ort_optimized(model))  # its weights stay there: remat.onnx reads them
    optimized = load_costed(path, input_shape=input_shape, coarsen=coarsen, cost=cost, device=device, dim=dim,
                            force_shape=force_shape)
    prepass = OrtPrePass(
        original_model=original, original_sha256=original.sha256, optimized_sha256=optimized.model.sha256,
        original_nodes=len(original.model.graph.node), optimized_nodes=len(optimized.model.model.graph.node),
        original_ops=len(original_graph.ops), optimized_ops=len(optimized.graph.ops),
        original_peak=file_order_peak(original_graph), optimized_peak=file_order_peak(optimized.graph))
    return optimized, prepass
