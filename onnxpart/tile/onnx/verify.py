"""``onnxpart tile --verify``: a layout plan executed on the mesh's virtual devices, against the original model.
Each device holds only its own piece of every tensor; every resharding runs as the steps the plan was
priced with (:func:`onnxpart.tile.onnx.resharding.plan`), each step a collective performed as data movement
between the devices of every group along its mesh axis (:mod:`onnxpart.tile.onnx.exchange`).

The original model runs once, whole, on seeded inputs at the costed dims (``--dim``, ``--input-shape``),
with every value the plan touches added as an output: those are the reference. Then the plan runs:

1. graph inputs and weights are laid out per the plan: each device gets its own block (its index set,
   :func:`onnxpart.tile.onnx.exchange.lay_out`; a ``P`` layout: one device of each group holds it, the
   others zeros);
2. per op in topological order with its chosen algorithm, each input is converted from its stored
   layout X[t] into the layout the algorithm reads by the priced steps; after every step the bytes each
   device received must add up to what the step was priced for, else the check fails (a mispriced
   transition);
3. each device runs the op's ONNX node on its local inputs in onnxruntime (a one-node model per op,
   sessions cached by op, algorithm and local shapes); the outputs are read in the algorithm's output
   layout and converted to the stored layout the same way;
4. each op runs twice: alone, on the reference values laid out as the plan stores them — every device's
   piece of each output, placed by its layout's index sets (:func:`onnxpart.tile.onnx.exchange.assemble`,
   no collective), is compared with the reference, and the first tensor that differs (topological
   order) fails the check —, and end to end, on what the plan's earlier ops produced; the graph outputs
   of the end-to-end run, gathered by the priced final gather (or left sharded with
   ``--sharded-outputs``), are compared with the original's on every device.

A wrong transition (a step that leaves a device with another index set than its layout says) or a
wrong catalog entry therefore fails the check, naming the tensor.

Ops outside the catalog (coarsened, opaque, not in it) run whole on every device on replicated inputs,
with folded weights and weight generators' outputs taken from the reference run.

Local rules, where an algorithm's device program is not "the same node on the shards":

* Reshape, Expand and ConstantOfShape: the shape input is replaced by the local output shape (the
  output's shape with its sharded dims divided by the sizes of the mesh axes sharding them; the whole
  shape for R and P); Resize's ``sizes`` likewise, over its ``axes``;
* Shape and Size: the node's value is the input's whole static shape (its ``start``/``end`` slice) or
  element count, whatever layout the input is read in — a device knows the tensor's shape, not only its
  shard's;
* Conv and ConvTranspose ``groups``: the node runs with ``group`` = group/D (each device owns group/D whole groups);
* Gather ``rows``: device k owns table rows [k·V/D, (k+1)·V/D); it looks up the indices in that range at
  their offset (negative indices first made positive) and writes zeros where an index is not its own,
  so the partial outputs add up to the lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxpart import runtime
from onnxpart.tile.onnx import exchange
from onnxpart.tile.onnx.catalog import Layout
from onnxpart.tile.onnx.mesh import parts
from onnxpart.tile.onnx.model import LayoutInstance, OpVar, Plan
from onnxpart.verify import DEFAULT_TOLERANCE, VerificationError, VerifyReport, add_size, reference_run

REFERENCE_SUFFIX = "::tile-reference"


def convert(inst: LayoutInstance, t: str, pieces: Sequence[np.ndarray], src, dst) -> list[np.ndarray]:
    """Tensor ``t``'s per-device pieces in ``src`` -> in ``dst``, by the steps the plan was priced with, each
    run as data movement (:func:`onnxpart.tile.onnx.exchange.run_step`); VerificationError when a step moves
    other bytes than it was priced for."""
    out = list(pieces)
    sizes = inst.mesh.shape
    for step in inst.reshard_steps(src, dst, t):
        out, received = exchange.run_step(out, step, sizes)
        priced = step.volume(sizes[step.axis]) * len(out)
        if not np.isclose(sum(received), priced, rtol=1e-9, atol=0.5):
            raise VerificationError(
                f"--verify failed: resharding {t!r} {src} -> {dst}: the {step.collective or 'local'} step on mesh "
                f"axis {inst.mesh.names[step.axis]} moved {sum(received)} bytes over the devices, priced "
                f"{priced:.0f}; nothing was written")
    return out


# -------------------------------------------------------------------------------------------- runs
def verify_plan(inst: LayoutInstance, plan: Plan, graph, loaded, seed: int = 0,
                tolerance: float = DEFAULT_TOLERANCE) -> VerifyReport:
    """Run ``plan`` on ``inst.mesh.devices`` virtual devices against ``loaded`` (the
    :class:`onnxpart.onnx_io.LoadedModel` that ``graph``, the instance's OpGraph, came from);
    VerificationError naming the first tensor that differs.

    Two runs per op. *Alone*: its inputs are the reference values laid out as the plan stores them, so
    each op's outputs differ from the reference only by its own rounding, and every stored tensor is held
    to ``tolerance`` (this names the first wrong algorithm or collective). *End to end*: its inputs are
    what the plan's own earlier ops produced, as a deployment computes them; only the graph outputs are
    held to ``tolerance`` there, since rounding carried through many ops is amplified wherever an op
    shrinks the scale (an Erf after a wide MatMul: 1e-6 of its input's scale is 1e-4 of its own). Laid
    out alone, a ``P`` tensor is held by one device of each group (the others zeros); real partial
    sums, as their producers split them, are exercised by the end-to-end run."""
    report = VerifyReport(seed=seed, tolerance=tolerance)
    devices = VirtualDevices(inst, graph, loaded)
    reference = devices.reference(seed, report)
    sizes = inst.mesh.shape

    def laid_out(t: str) -> list[np.ndarray]:
        return exchange.lay_out(reference[t], plan.layouts[t], sizes)

    store = {t.name: laid_out(t.name) for t in inst.tensors if t.kind in ("input", "weight")}
    for op in inst.ops:
        choice = op.choices[plan.algorithms[op.name]]
        alone = [convert(inst, t, laid_out(t), plan.layouts[t], want) for t, want in zip(op.inputs, choice.inputs)]
        for j, outs in enumerate(zip(*devices.run(op, choice, alone, reference))):
            t = op.outputs[j]
            stored = convert(inst, t, list(outs), choice.outputs[j], plan.layouts[t])
            _check(inst, t, stored, plan.layouts[t], reference[t], tolerance, f"{op.name} ({op.op_type} {choice.name})")
        local = [convert(inst, t, store[t], plan.layouts[t], want) for t, want in zip(op.inputs, choice.inputs)]
        made = devices.run(op, choice, local, reference)
        for j, t in enumerate(op.outputs):
            store[t] = convert(inst, t, [outs[j] for outs in made], choice.outputs[j], plan.layouts[t])
    outputs = [t.name for t in inst.tensors if t.kind == "output"]
    returned = {t: plan.layouts[t] if inst.sharded_outputs else inst.replicated for t in outputs}
    wholes = {t: _wholes(inst, t, convert(inst, t, store[t], plan.layouts[t], returned[t]), returned[t])
              for t in outputs}
    first = {t: copies[0] for t, copies in wholes.items()}
    add_size(report, loaded.dims, runtime.compare({t: reference[t] for t in outputs}, first, tolerance))
    report.sizes[-1]["outputs"] = {t: runtime.compare({t: reference[t]}, {t: first[t]}, tolerance).to_dict()
                                   for t in outputs}
    report.raise_if_failed()
    for t, copies in wholes.items():  # every device's copy, not only the first
        _compare(t, copies, reference[t], tolerance, "the end-to-end run", returned[t])
    report.notes.append("every op was also run alone on the reference inputs and every tensor the plan stores "
                        "was checked on every device, not only the outputs")
    return report


def _wholes(inst: LayoutInstance, t: str, pieces: Sequence[np.ndarray], layout) -> list[np.ndarray]:
    """The whole tensor per replica (:func:`onnxpart.tile.onnx.exchange.assemble`); VerificationError when a
    device's piece has another shape than its block."""
    try:
        return exchange.assemble(pieces, layout, inst.mesh.shape, inst.tensor(t).shape)
    except ValueError as exc:
        raise VerificationError(f"--verify failed: tensor {t!r} stored {layout}: {exc}; nothing was written") from None


def _check(inst: LayoutInstance, name: str, pieces: Sequence[np.ndarray], layout: Layout, want: np.ndarray,
           tolerance: float, producer: str) -> None:
    _compare(name, _wholes(inst, name, pieces, layout), want, tolerance, producer, layout)


def _compare(name: str, wholes: Sequence[np.ndarray], want: np.ndarray, tolerance: float, producer: str,
             layout: Layout) -> None:
    for got in wholes:
        mismatch = runtime.compare({name: want}, {name: got}, tolerance)
        if not mismatch.ok:
            raise VerificationError(
                f"--verify failed: tensor {name!r} (written by {producer}, stored {layout}) differs from the "
                f"original's (max abs error {mismatch.max_abs_error:.3g}, relative {mismatch.max_rel_error:.3g}, "
                f"over --verify-tol {tolerance:g}); it is the first that differs; nothing was written")


class VirtualDevices:
    """The original model's nodes run one op at a time on each device's local inputs (sessions cached)."""

    def __init__(self, inst: LayoutInstance, graph, loaded):
        self.inst, self.loaded, self.model = inst, loaded, loaded.model
        producers = {out: node for node in self.model.graph.node for out in node.output if out}
        self.nodes = {op.name: [producers[next(o for o in node.outputs if o)] for node in op.nodes]
                      for op in graph.ops}
        self.sessions: dict = {}

    def reference(self, seed: int, report: VerifyReport) -> dict[str, np.ndarray]:
        """The original run whole, keeping every value the plan or an op run whole reads."""
        wanted = list(dict.fromkeys([t.name for t in self.inst.tensors] + [
            name for op in self.inst.ops for name in external_inputs(self.nodes[op.name])]))
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for name in wanted:
            model.graph.node.append(helper.make_node("Identity", [name], [name + REFERENCE_SUFFIX]))
            model.graph.output.append(helper.make_empty_tensor_value_info(name + REFERENCE_SUFFIX))
        with runtime.user_model(self.loaded.path):
            session = runtime.make_session(model, self.loaded.folder)
        _, values = reference_run(session, self.loaded, dict(self.loaded.dims), seed, report)
        return {name: values[name + REFERENCE_SUFFIX] for name in wanted}

    def run(self, op: OpVar, choice, local: list[list[np.ndarray]], reference: Mapping) -> list[list[np.ndarray]]:
        """Per device, the outputs (``op.outputs`` order) of ``op`` run with ``choice`` on ``local`` (per
        input slot, per device); inputs outside the instance (folded weights) come from ``reference``."""
        nodes = self.nodes[op.name]
        slots = list(op.inputs)
        if len(nodes) == 1 and len(set(slots)) < len(slots):  # x·x read in two layouts: one name per slot
            nodes, slots = _one_name_per_slot(nodes[0])
        names = external_inputs(nodes)
        made = []
        for k in range(self.inst.mesh.devices):
            feeds = {name: reference[name] for name in names if name in reference}
            feeds.update({t: local[i][k] for i, t in enumerate(slots)})
            program, feeds, mask = self._local_rule(op, choice, nodes, feeds, k)
            key = (op.name, choice.name, tuple((n, a.shape, a.dtype.str) for n, a in feeds.items()))
            if key not in self.sessions:
                self.sessions[key] = runtime.make_session(self._model(program, feeds, op.outputs))
            values = runtime.run_session(self.sessions[key], feeds)
            outs = [values[t] for t in op.outputs]
            made.append([np.where(mask, x, np.zeros_like(x)) for x in outs] if mask is not None else outs)
        return made

    def _local_rule(self, op: OpVar, choice, nodes: list, feeds: dict, k: int):
        """(nodes, feeds, output mask or None) of device ``k`` (module docstring's local rules). On an n-D
        mesh a rule applies over the mesh axes whose algorithm (``choice.name``'s ``·``-separated parts)
        calls for it: p is the product of their sizes, k the device's index along them, first axis major."""
        if len(nodes) != 1:
            return nodes, feeds, None
        node = nodes[0]
        if op.op_type in ("Reshape", "Expand") and len(node.input) == 2:
            feeds[node.input[1]] = np.array(self._local_output_shape(op, choice), dtype=np.int64)
        elif op.op_type == "ConstantOfShape" and op.catalog:
            feeds[node.input[0]] = np.array(self._local_output_shape(op, choice), dtype=np.int64)
        elif op.op_type == "Resize" and len(node.input) == 4 and node.input[3]:
            axes = helper.get_node_attr_value(node, "axes") if any(a.name == "axes" for a in node.attribute) else None
            shape = self._local_output_shape(op, choice)
            feeds[node.input[3]] = np.array([shape[a] for a in (axes or range(len(shape)))], dtype=np.int64)
        elif op.op_type in ("Shape", "Size") and op.catalog:
            shape = np.array(self.inst.tensor(op.inputs[0]).shape, dtype=np.int64)
            start, end = (next((a.i for a in node.attribute if a.name == key), None) for key in ("start", "end"))
            value = shape[start:end] if op.op_type == "Shape" else np.array(shape.prod(), dtype=np.int64)
            node = helper.make_node("Constant", [], list(node.output), value=numpy_helper.from_array(value))
        elif op.op_type in ("Conv", "ConvTranspose") and "groups" in choice.name.split("·"):
            p, _ = self._over(choice, "groups", k)
            node = _with_attribute(node, "group", helper.get_node_attr_value(node, "group") // p)
        elif op.op_type == "Gather" and "rows" in choice.name.split("·"):
            p, k = self._over(choice, "rows", k)
            data = feeds[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % data.ndim
            feeds[node.input[1]], mine = own_rows(feeds[node.input[1]], data.shape[axis], k, p)
            return [node], feeds, mine.reshape((1,) * axis + mine.shape + (1,) * (data.ndim - axis - 1))
        return [node], feeds, None

    def _local_output_shape(self, op: OpVar, choice) -> list[int]:
        """The output's shape on one device: its sharded dims divided by the sizes of the axes sharding them."""
        shape = list(self.inst.tensor(op.outputs[0]).shape)
        for a, size in zip(parts(choice.outputs[0]), self.inst.mesh.shape):
            if a.kind == "S":
                shape[a.dim] //= size
        return shape

    def _over(self, choice, name: str, k: int) -> tuple[int, int]:
        """(product of the sizes of the mesh axes running algorithm ``name``, device k's index along them)."""
        coords = np.unravel_index(k, self.inst.mesh.shape)
        p, index = 1, 0
        for part, size, c in zip(choice.name.split("·"), self.inst.mesh.shape, coords):
            if part == name:
                p, index = p * size, index * size + int(c)
        return p, index

    def _model(self, nodes: list, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                  for n, a in feeds.items()]
        graph = helper.make_graph(nodes, "tile-verify-op", inputs,
                                  [helper.make_empty_tensor_value_info(t) for t in outputs])
        extra = {"functions": self.model.functions} if self.model.functions else {}
        return helper.make_model(graph, opset_imports=self.model.opset_import, ir_version=self.model.ir_version,
                                 **extra)


def own_rows(indices: np.ndarray, rows: int, k: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Gather ``rows`` on device k of p, its table holding ``rows`` rows: (indices at their offset in the
    shard, 0 where not its own; the mask of its own)."""
    whole = rows * p
    positive = np.where(indices < 0, indices + whole, indices)
    mine = (positive >= k * rows) & (positive < (k + 1) * rows)
    return np.where(mine, positive - k * rows, 0).astype(indices.dtype), mine


def _one_name_per_slot(node: onnx.NodeProto) -> tuple[list[onnx.NodeProto], list[str]]:
    """``node`` reading each of its inputs under its own name (``x::slot1`` for a repeated ``x``), and
    those names in slot order."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    slots, seen = [], set()
    for j, name in enumerate(node.input):
        if name and name in seen:
            copy.input[j] = f"{name}::slot{j}"
        if name:
            seen.add(name)
            slots.append(copy.input[j])
    return [copy], slots


def _with_attribute(node: onnx.NodeProto, name: str, value) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    for attr in copy.attribute:
        if attr.name == name:
            attr.CopyFrom(helper.make_attribute(name, value))
    return copy


def external_inputs(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """The values ``nodes`` read from outside themselves, subgraphs' outer-scope names included."""
    produced = {o for node in nodes for o in node.output if o}
    names = [n for node in nodes for n in list(node.input) + _outer_names(node) if n and n not in produced]
    return list(dict.fromkeys(names))


def _outer_names(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs (If, Loop, Scan bodies) read from the enclosing graph."""
    out = []
    for attr in node.attribute:
        for sub in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
            local = {v.name for v in sub.input} | {i.name for i in sub.initializer}
            local |= {o for n in sub.node for o in n.output}
            out += [n for inner in sub.node for n in list(inner.input) + _outer_names(inner) if n and n not in local]
    return out
