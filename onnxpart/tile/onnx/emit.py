"""The ONNX layout problem's results as files: ``plan.json`` (schema ``onnxpart.tile-plan/1``), the shared certificate
(problem ``tile``), and ``annotated.onnx`` with ONNX's own sharding fields (IR 11):

* ``ModelProto.configuration``: one ``DeviceConfigurationProto`` named ``tile-mesh`` with the D devices
  (the mesh's devices in row-major order: device (i, j) of a 2x4 mesh is 4·i + j);
* per compute node a ``NodeDeviceConfigurationProto`` (``configuration_id = "tile-mesh"``) holding one
  ``ShardingSpecProto`` per input and output the node's algorithm reads or writes, as in ONNX's
  ShardingFormalism.md: one ``ShardedDimProto(axis=d, simple_sharding=[SimpleShardedDimProto(
  dim_value=size, num_shards=k)])`` per tensor dim d the layout shards, k the product of the sizes of
  the mesh axes sharding it; ``device`` lists one entry per shard (row-major over the sharded dims):
  the device holding it, or a negative id that ``index_to_device_group_map`` maps to the group of
  devices that all hold it (the mesh axes that replicate it). On a 1-D mesh ``S(d)`` is ``device =
  [0..D-1]`` and ``R`` is ``device = [-1]``, ``{-1: [0..D-1]}``. ONNX has no partial-sum spec, so a slot
  with a ``P`` component gets none (plan.json has it).

The plan's layouts follow the paper's labels ("Matrix Tiling as Constrained Hypergraph Labeling",
Section 3) per mesh axis (:mod:`onnxpart.tile.onnx.mesh`): ``layout`` is ``R``/``S(0)``/``P`` on a 1-D mesh and
one component per axis on an n-D one (``S(0)R``, ``RS(1)``, ``S(0)S(0)``); ``placements`` in DTensor
style, one per mesh axis (``[Shard(0), Replicate()]``); ``ort_spec`` in onnxruntime's per-tensor-axis
string form (``R``, or ``S[j]`` for a tensor axis sharded along mesh axis j); none for a layout with a
``P`` component or a tensor axis sharded along several mesh axes (onnxruntime's form has no word for
either). Per-axis mesh values (latency, bandwidth) are one number on a 1-D mesh, a list on an n-D one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from onnxpart.certificate import Certificate
from onnxpart.parts import annotate
from onnxpart import tile
from onnxpart.tile.onnx import resharding
from onnxpart.tile.onnx.catalog import Layout
from onnxpart.tile.onnx.mesh import parts
from onnxpart.tile.onnx.model import Choice, LayoutInstance, OpVar, Plan

if TYPE_CHECKING:  # the package's __init__, named for the annotations only: no module imports its own package
    from onnxpart.tile.onnx import LayoutSolution

SCHEMA = "onnxpart.tile-plan/1"
CONFIGURATION = "tile-mesh"
OBJECTIVE = "estimated step time (s): sharded compute + resharding collectives"


def placements(layout: Layout) -> list[str]:
    """DTensor's placements, one per mesh axis."""
    return [{"R": "Replicate()", "P": "Partial()"}.get(a.kind, f"Shard({a.dim})") for a in parts(layout)]


def ort_spec(layout: Layout, rank: int) -> str | None:
    """onnxruntime's form: per tensor axis ``R`` or ``S[j]`` (mesh axis j); None where it has no word."""
    comps = parts(layout)
    if any(a.kind == "P" for a in comps):
        return None
    words = []
    for d in range(max(rank, 1)):
        axes = [j for j, a in enumerate(comps) if a.kind == "S" and a.dim == d]
        if len(axes) > 1:
            return None
        words.append(f"S[{axes[0]}]" if axes else "R")
    return "".join(words)


def axis_values(values) -> float | list[float]:
    """A per-axis value as written: the number on a 1-D mesh, the list on an n-D one."""
    return values[0] if len(values) == 1 else list(values)


def mesh_payload(inst: LayoutInstance) -> dict[str, Any]:
    m = inst.mesh
    return {"shape": list(m.shape), "axis_names": list(m.names), "devices": m.devices,
            "topology": "ring" if len(m.shape) == 1 else "ring per axis", "latency_s": axis_values(m.latencies),
            "bandwidth_bytes_per_s": axis_values(m.bandwidths), "device_memory": inst.memory}


def plan_payload(solution: LayoutSolution, model: str, model_sha: str | None) -> dict[str, Any]:
    """plan.json (module docstring)."""
    inst, plan = solution.instance, solution.plan
    tensors = [{"name": t.name, "kind": t.kind, "shape": list(t.shape), "layout": str(plan.layouts[t.name]),
                "placements": placements(plan.layouts[t.name]), "ort_spec": ort_spec(plan.layouts[t.name], len(t.shape)),
                "bytes": t.bytes, "bytes_per_device": t.per_device(plan.layouts[t.name], inst.mesh),
                "candidates": [str(a) for a in t.domain],
                "excluded": [{"layout": a, "reason": why} for a, why in t.excluded]} for t in inst.tensors]
    ops = [_op_payload(inst, op, plan) for op in inst.ops]
    moves = reshardings(inst, plan)
    compute = sum(o["compute_seconds"] for o in ops)
    return {"schema": SCHEMA, "model": model, "model_sha256": model_sha, "mesh": mesh_payload(inst),
            "outputs": "sharded" if inst.sharded_outputs else "gathered", "method": solution.method,
            "tensors": tensors, "ops": ops, "reshardings": moves, "replicated_only": inst.replicated_only,
            "totals": {"step_time_s": solution.cost, "compute_s": compute,
                       "resharding_s": sum(r["seconds"] for r in moves), "reshardings": len(moves),
                       "memory_per_device": inst.memory_per_device(plan.layouts),
                       "one_device_s": solution.one_device, "speed_up": solution.speed_up, "replicated": solution.replicated}}


def _op_payload(inst: LayoutInstance, op, plan: Plan) -> dict[str, Any]:
    c = op.choices[plan.algorithms[op.name]]
    return {"name": op.name, "op_type": op.op_type, "algorithm": c.name, "replicated_only": not op.catalog,
            "shape_computation": op.shape_computation,
            "inputs": [{"tensor": t, "layout": str(a)} for t, a in zip(op.inputs, c.inputs)],
            "outputs": [{"tensor": t, "layout": str(a)} for t, a in zip(op.outputs, c.outputs)],
            "compute_seconds": c.seconds, "seconds": inst.choice_cost(op, plan.algorithms[op.name], plan.layouts)}


def reshardings(inst: LayoutInstance, plan: Plan) -> list[dict]:
    """Every resharding the plan runs that moves data, in execution order: tensor, from, to, the op and slot
    (``input j``, ``output j``, or ``final`` for a graph output's gather), collective, bytes, seconds, the
    per-axis ``steps`` (:func:`onnxpart.tile.onnx.resharding.plan`), and ``forced_by``: the two ops (or the graph
    input/weight, or the returned output) whose preferences disagree."""
    out = []
    for op in inst.ops:
        choice = op.choices[plan.algorithms[op.name]]
        for j, (t, want) in enumerate(zip(op.inputs, choice.inputs)):
            stored = plan.layouts[t]
            if inst.reshard_time(stored, want, t) > 0:
                out.append(_record(inst, t, stored, want, op.name, f"input {j}",
                                   [_writer(inst, plan, t), _says(op, choice, "reads", want)]))
        for j, (t, made) in enumerate(zip(op.outputs, choice.outputs)):
            stored = plan.layouts[t]
            if inst.reshard_time(made, stored, t) > 0:
                readers = [_says(o, o.choices[plan.algorithms[o.name]], "reads", stored) for o in inst.ops
                           if t in o.inputs and stored in o.choices[plan.algorithms[o.name]].inputs]
                out.append(_record(inst, t, made, stored, op.name, f"output {j}",
                                   [_says(op, choice, "writes", made)] + readers[:1]))
    for t in inst.tensors:
        if inst.final_time(t.name, plan.layouts[t.name]) > 0:
            out.append(_record(inst, t.name, plan.layouts[t.name], inst.replicated, None, "final",
                               [_writer(inst, plan, t.name), f"graph output {t.name} is returned whole (R)"]))
    return out


def _record(inst: LayoutInstance, t: str, src: Layout, dst: Layout, op: str | None, slot: str,
            forced_by: list[str]) -> dict:
    mesh = inst.mesh
    steps = inst.reshard_steps(src, dst, t)
    return {"tensor": t, "from": str(src), "to": str(dst), "op": op, "slot": slot,
            "collective": resharding.collective_name(steps, mesh), "bytes": inst.tensor(t).bytes,
            "seconds": inst.reshard_time(src, dst, t), "forced_by": forced_by,
            "steps": [{"axis": mesh.names[s.axis], "from": str(s.before), "to": str(s.after),
                       "collective": s.collective, "bytes": s.group_bytes, "seconds": s.seconds} for s in steps]}


def _says(op: OpVar, choice: Choice, verb: str, layout: Layout) -> str:
    return f"{op.name} ({op.op_type} {choice.name}) {verb} {layout}"


def _writer(inst: LayoutInstance, plan: Plan, t: str) -> str:
    for op in inst.ops:
        if t in op.outputs:
            return f"{op.name} stores it as {plan.layouts[t]}"
    return f"{inst.tensor(t).kind} {t} is laid out as {plan.layouts[t]}"


def instance_digest(inst: LayoutInstance) -> list:
    """What the certificate's instance hash covers: the mesh, every tensor's domain and bytes, every op's work
    and choices. A domain or a tuple of choices shared by many tensors or ops is written out once and the
    list reused (the JSON is the same)."""
    m = inst.mesh
    written: dict[int, tuple] = {}

    def once(values, write):
        if id(values) not in written:
            written[id(values)] = (values, write(values))
        return written[id(values)][1]

    return [list(m.shape), list(m.latencies), list(m.bandwidths), inst.memory, inst.sharded_outputs,
            [(t.name, once(t.domain, lambda d: [str(a) for a in d]), t.bytes) for t in inst.tensors],
            [(op.name, op.work, once(op.choices, lambda cs: [(c.name, c.seconds) for c in cs])) for op in inst.ops]]


def certificate(solution: LayoutSolution, model_sha: str | None, options: dict[str, Any]) -> Certificate:
    return tile.certificate(solution, model_sha, instance_digest(solution.instance), OBJECTIVE, options)


def annotated_model(model: onnx.ModelProto, graph, solution: LayoutSolution) -> onnx.ModelProto:
    """The model with the mesh configuration and a sharding spec per node slot (module docstring)."""
    inst = solution.instance
    return sharded_model(model, graph, inst, solution.plan, CONFIGURATION,
                         [f"device_{i}" for i in range(inst.mesh.devices)], range(inst.mesh.devices))


def sharded_model(model: onnx.ModelProto, graph, inst: LayoutInstance, plan: Plan, configuration: str,
                  names: Sequence[str], devices: Sequence[int]) -> onnx.ModelProto:
    """``model`` — the original of ``graph``, or a part of it holding some of its ops (a pipeline stage) — with
    the device configuration ``configuration`` (devices ``names``) and, on the nodes of ``inst``'s ops, a
    sharding spec per slot of ``plan`` (module docstring) whose device indices are ``devices[k]`` for device
    k of ``inst``'s mesh (row-major): tile's own ``0 .. D-1``, or a cluster's device numbers."""
    specs = {}
    for op in inst.ops:
        c = op.choices[plan.algorithms[op.name]]
        slots = list(zip(op.inputs, c.inputs)) + list(zip(op.outputs, c.outputs))
        specs[op.name] = [_spec(t, a, inst.tensor(t).shape, inst.mesh.shape, devices) for t, a in slots
                          if all(x.kind != "P" for x in parts(a))]
    out = annotate(model, graph, np.arange(len(graph.ops)), configuration, list(names),
                   lambda i: {"sharding_spec": specs.get(graph.ops[i].name, [])})
    for node in out.graph.node:  # folded weight generators share their op's entry: keep their own names only
        names_here = set(node.input) | set(node.output)
        for config in node.device_configurations:
            keep = [s for s in config.sharding_spec if s.tensor_name in names_here]
            del config.sharding_spec[:]
            config.sharding_spec.extend(keep)
    return out


def _spec(tensor: str, layout: Layout, shape, mesh_shape,
          devices: Sequence[int] | None = None) -> onnx.ShardingSpecProto:
    """The ShardingSpecProto of ``tensor`` in ``layout`` on a mesh of ``mesh_shape`` (an int: a 1-D
    mesh), module docstring; mesh device k is written ``devices[k]`` (default k)."""
    sizes = (mesh_shape,) if isinstance(mesh_shape, int) else tuple(mesh_shape)
    comps = parts(layout)
    dims = sorted({a.dim for a in comps if a.kind == "S"})
    sharded = []
    for d in dims:
        axes = [j for j, a in enumerate(comps) if a.kind == "S" and a.dim == d]
        shards = int(np.prod([sizes[j] for j in axes]))
        sharded.append(onnx.ShardedDimProto(axis=d, simple_sharding=[
            onnx.SimpleShardedDimProto(dim_value=int(shape[d]), num_shards=shards)]))
    holders: dict[tuple[int, ...], list[int]] = {}
    for device, coords in enumerate(np.ndindex(*sizes)):
        holders.setdefault(_shard_of(coords, comps, dims, sizes), []).append(
            device if devices is None else int(devices[device]))
    ids, groups = [], []
    for key in sorted(holders):  # row-major over the sharded dims
        group = holders[key]
        if len(group) == 1:
            ids.append(group[0])
        else:
            ids.append(-1 - len(groups))
            groups.append(onnx.IntIntListEntryProto(key=ids[-1], value=group))
    return onnx.ShardingSpecProto(tensor_name=tensor, device=ids, index_to_device_group_map=groups,
                                  sharded_dim=sharded)


def _shard_of(coords, comps, dims, sizes) -> tuple[int, ...]:
    """The shard (index per sharded dim) a device at mesh ``coords`` holds: along each dim, the mesh axes
    sharding it count in axis order, the first one major."""
    key = []
    for d in dims:
        index = 0
        for j, a in enumerate(comps):
            if a.kind == "S" and a.dim == d:
                index = index * sizes[j] + coords[j]
        key.append(index)
    return tuple(key)
