"""A tile folder's ``plan.json`` read back as tile's own objects, so that its shards can be run by the code
that ``tile --verify`` runs them with (:mod:`onnxpart.tile.onnx.verify`).

plan.json records the mesh, every tensor's layout and every op's algorithm and predicted per-device
``compute_seconds``, but not the options the instance was built with beyond the mesh. The instance is
rebuilt from the model at the costed dims (``--dim``, ``--input-shape``) on the recorded mesh; the device
spec only prices the choices, which bench does not use (the prediction is plan.json's), so the ``cpu`` spec
stands in. A plan whose ops are not the rebuilt instance's (a folder made with ``--coarsen``, or at other
dims) is refused, naming the first op that differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from onnxpart.errors import UserError
from onnxpart.units import SECONDS
from onnxpart.validate import OpenSchema, number

Seconds = number(SECONDS)


class _Slot(OpenSchema):
    tensor: str
    layout: str


class _TileOp(OpenSchema):
    name: str
    op_type: str
    algorithm: str
    inputs: list[_Slot]
    outputs: list[_Slot]
    compute_seconds: Seconds


class _TileTensor(OpenSchema):
    name: str
    layout: str


class _TileMesh(OpenSchema):
    shape: list[int]
    axis_names: list[str] = []
    latency_s: Union[float, list[float]]
    bandwidth_bytes_per_s: Union[float, list[float]]


class _TileTotals(OpenSchema):
    compute_s: Seconds
    one_device_s: Seconds
    resharding_s: Seconds = 0.0
    reshardings: int = 0


class TilePlan(OpenSchema):
    """The fields of ``onnxpart.tile-plan/1`` bench reads."""

    model: Optional[str] = None
    model_sha256: Optional[str] = None
    mesh: _TileMesh
    outputs: str = "gathered"
    tensors: list[_TileTensor]
    ops: list[_TileOp]
    totals: _TileTotals


@dataclass
class Rebuilt:
    """What the shards run with: the layout instance, the plan, the OpGraph and the loaded model."""

    inst: Any  # onnxpart.tile.onnx.model.LayoutInstance
    plan: Any  # onnxpart.tile.onnx.model.Plan
    graph: Any
    loaded: Any  # onnxpart.onnx_io.LoadedModel


def rebuild(model: Path, read: TilePlan, settings) -> Rebuilt:
    """The layout instance of ``model`` at ``settings``' dims on plan.json's mesh, and plan.json's plan."""
    from onnxpart.cost_models import analytic_costs, load_device
    from onnxpart.onnx_constants import small_constants
    from onnxpart.onnx_io import ShapeHint, load_graph
    from onnxpart.tile.onnx.build import build_layout_instance

    hints = {name: ShapeHint(dims) for name, dims in settings.shapes.items()}
    graph, loaded = load_graph(model, hints, dims=dict(settings.dims))
    spec = load_device("cpu")
    graph = analytic_costs(graph, spec)
    mesh = read.mesh
    inst = build_layout_instance(graph, tuple(mesh.shape), mesh.bandwidth_bytes_per_s, mesh.latency_s, None, None,
                                 small_constants(loaded.model), mesh.axis_names or None, spec,
                                 read.outputs == "sharded")
    return Rebuilt(inst, _plan(inst, read), graph, loaded)


def _plan(inst, read: TilePlan):
    """plan.json's layouts and, per op, the index of its algorithm with the plan's slot layouts."""
    from onnxpart.tile.onnx.build import parse_layout
    from onnxpart.tile.onnx.model import Plan

    axes = len(inst.mesh.shape)
    said, made = [o.name for o in read.ops], [op.name for op in inst.ops]
    if said != made or {t.name for t in read.tensors} != {t.name for t in inst.tensors}:
        i = next((i for i, (a, b) in enumerate(zip(said, made)) if a != b), min(len(said), len(made)))
        raise UserError(f"plan.json's ops are not the model's at these dims (entry {i}: "
                        f"{said[i] if i < len(said) else 'none'}, the model's {made[i] if i < len(made) else 'none'}): "
                        "give the --dim/--input-shape the folder was tiled at (a folder tiled with --coarsen is "
                        "not benched)")
    layouts = {t.name: parse_layout(t.layout, axes) for t in read.tensors}
    algorithms = {}
    for op, entry in zip(inst.ops, read.ops):
        slots = (tuple(parse_layout(s.layout, axes) for s in entry.inputs),
                 tuple(parse_layout(s.layout, axes) for s in entry.outputs))
        found = [c for c, choice in enumerate(op.choices)
                 if choice.name == entry.algorithm and (choice.inputs, choice.outputs) == slots]
        if not found:
            raise UserError(f"plan.json: op {op.name} ({op.op_type}) has no algorithm {entry.algorithm!r} with "
                            "the slot layouts the plan lists (a plan edited by hand, or made from another model)")
        algorithms[op.name] = found[0]
    return Plan(layouts, algorithms)
