"""The ONNX side of ``onnxpart tile``: a costed OpGraph on a device mesh (1-D ring of D devices, or an
n-D mesh such as 2x4, :mod:`onnxpart.tile.mesh`) as a layout instance.

This is the paper's TP(H, G, L, w) ("Matrix Tiling as Constrained Hypergraph Labeling", Sections 4–5)
with ONNX tensors as vertices, ONNX ops as hyperedges and sharding layouts as labels
(:mod:`onnxpart.tile.catalog`). Two departures from the paper's Hamming cost, both stated here:

* a retiling costs the collectives that move its index sets (:mod:`onnxpart.tile.resharding`: per-axis ring
  collectives, latency plus bytes over the link bandwidth, the cheapest sequence that leaves every device
  its piece), which depends on the pair (stored layout, wanted layout), not on a mismatch count — the
  paper's "use weights to scale the retiling cost" taken per pair;
* each feasible labeling (an op's *algorithm*) has a base cost: what one device spends on its part
  (:mod:`onnxpart.tile.compute`: the launch overhead in full plus the roofline of its shard, a replicated
  input read whole), ``Choice.seconds``.

Data structures (kept stable for ``--verify`` and ``scripts/bench_tile.py``):

``LayoutInstance``
    ``mesh`` (:class:`~onnxpart.tile.mesh.DeviceMesh`: shape, axis names, latency and bandwidth per
    axis; ``devices`` = their product), ``tensors``
    (:class:`TensorVar` per activation, graph input and weight: name, shape, bytes of the full tensor,
    ``kind`` in {"input", "activation", "output", "weight"}, ``domain`` — the candidate layouts —
    and ``excluded`` — (layout, reason) pairs for the layouts left out), ``ops`` (:class:`OpVar` per
    op in topological order: name, op_type, ``inputs``/``outputs`` (tensor names in the node's order;
    folded or omitted inputs are dropped), ``choices`` (:class:`Choice`), ``work`` (seconds on one
    device), ``catalog`` (False: "replicated only"), ``shape_computation`` (a replicated-only op on tiny
    integer or boolean tensors only, :func:`shape_computation`), ``memory`` (bytes per device or None).

Layouts are mesh layouts (:mod:`onnxpart.tile.mesh`): the catalog's ``R``, ``P``, ``S(d)`` on a 1-D mesh,
one component per axis (``S(0)R``) on an n-D one.

``Choice`` (an algorithm)
    ``name``, ``inputs``/``outputs`` (the layout it reads / writes per slot), ``divisor`` (the product
    of the per-axis catalog algorithms' divisors, :func:`~onnxpart.tile.mesh.compose_algorithms`),
    ``seconds`` (one device's compute).

``Plan`` (a solution)
    ``layouts`` (tensor -> Layout) and ``algorithms`` (op -> choice index); :meth:`LayoutInstance.cost`
    and :meth:`LayoutInstance.plan_cost` recompute everything from them.

Objective (estimated step time, seconds)::

    T(X) = Σ_op min_c [ seconds(c) + Σ_in reshard(X[t] -> c.in) + Σ_out reshard(c.out -> X[t]) ]
           + Σ_{graph outputs t} reshard(X[t] -> R)

A tensor's layout X[t] is how it is stored between ops; the producer reshards its algorithm's output
into X[t] once, each consumer reshards X[t] into what its algorithm reads. Graph inputs and weights
are laid out before the step (slicing is free); graph outputs are never left partial (P) and are gathered
whole onto every device at the end (the last term; with ``sharded_outputs`` they stay as stored). The
all-replicated plan costs Σ work, the one-device time (:attr:`LayoutInstance.one_device`).
Memory (``--device-memory``): Σ_t bytes_per_device(t, X[t]) ≤ memory, with a tensor cut into the product
of the sizes of the mesh axes that shard it (R and P components hold it whole; exchange buffers are
not counted).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.tile import mesh as meshes
from onnxpart.tile import resharding
from onnxpart.tile.catalog import P, R, Layout, S
from onnxpart.tile.compute import DeviceRoofline
from onnxpart.tile.mesh import DeviceMesh, compose, parts
from onnxpart.tile.onnx_constants import LIMIT
from onnxpart.tile.op_catalog import OPTIONAL_GAPS, op_algorithms


@dataclass(frozen=True)
class Choice:
    """One algorithm of an op: the layout per input and output slot, the compute divisor, and the seconds
    each device spends on its part (:mod:`onnxpart.tile.compute`: launch overhead plus its shard's roofline)."""

    name: str
    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]
    divisor: int
    seconds: float


@dataclass(frozen=True)
class TensorVar:
    name: str
    shape: tuple[int, ...]
    bytes: int
    kind: str  # input | activation | output | weight
    domain: tuple[Layout, ...]
    excluded: tuple[tuple[str, str], ...] = ()

    def per_device(self, layout: Layout, mesh: DeviceMesh) -> int:
        """Bytes one device holds in ``layout`` (a shard rounded up)."""
        return mesh.per_device(self.bytes, layout)

    @property
    def tiny(self) -> bool:
        """At most :data:`~onnxpart.tile.onnx_constants.LIMIT` elements: a scalar or an exporter's shape
        constant, never worth sharding."""
        return math.prod(self.shape) <= LIMIT


@dataclass(frozen=True)
class OpVar:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    choices: tuple[Choice, ...]
    work: float
    catalog: bool
    shape_computation: bool = False


@dataclass
class Plan:
    layouts: dict[str, Layout]
    algorithms: dict[str, int]


@dataclass(frozen=True)
class LayoutInstance:
    name: str
    mesh: DeviceMesh
    tensors: tuple[TensorVar, ...]
    ops: tuple[OpVar, ...]
    memory: float | None = None
    index: Mapping[str, int] = field(default_factory=dict, compare=False)
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # cost tables per op, reshard times
    sharded_outputs: bool = False  # graph outputs stay in their layouts (no final gather)

    def tensor(self, name: str) -> TensorVar:
        return self.tensors[self.index[name]]

    @property
    def replicated_only(self) -> list[str]:
        """Ops outside the catalog (shape computations included)."""
        return [op.name for op in self.ops if not op.catalog]

    @property
    def one_device(self) -> float:
        """The step time on one device: every op's whole time, nothing moved."""
        return sum(op.work for op in self.ops)

    def reshard_steps(self, src: Layout, dst: Layout, tensor: str) -> tuple[resharding.Step, ...]:
        """The steps turning ``tensor`` from ``src`` into ``dst`` (:func:`onnxpart.tile.resharding.plan`)."""
        t = self.tensor(tensor)
        return resharding.plan(src, dst, t.shape, t.bytes, self.mesh)

    def reshard_time(self, src: Layout, dst: Layout, tensor: str) -> float:
        """Seconds of :meth:`reshard_steps`, read from the tensor's :meth:`reshard_table`."""
        index, matrix = self.reshard_table(tensor)
        if src in index and dst in index:
            return float(matrix[index[src], index[dst]])
        t = self.tensor(tensor)
        return resharding.reshard_time(src, dst, t.shape, t.bytes, self.mesh)

    def reshard_table(self, tensor: str) -> tuple[dict, np.ndarray]:
        """(layout -> index, seconds[src, dst]) over every layout the tensor may be stored in, read or written in
        (:func:`onnxpart.tile.resharding.price_table`)."""
        tables = self.memo.setdefault("tables", {})
        if tensor not in tables:
            t = self.tensor(tensor)
            tables[tensor] = resharding.price_table(self._layouts_of()[tensor], t.shape, float(t.bytes), self.mesh)
        return tables[tensor]

    def _layouts_of(self) -> dict[str, tuple]:
        """Per tensor: its domain, then R, then every other layout an algorithm reads or writes it in."""
        if "layouts" not in self.memo:
            found = {t.name: dict.fromkeys(t.domain + (self.replicated,)) for t in self.tensors}
            for op in self.ops:
                for c in op.choices:
                    for t, a in zip(op.inputs + op.outputs, c.inputs + c.outputs):
                        found[t][a] = None
            self.memo["layouts"] = {t: tuple(layouts) for t, layouts in found.items()}
        return self.memo["layouts"]

    def slot_seconds(self, tensor: str, stored, slot, reads: bool) -> np.ndarray:
        """seconds[i, j] of the resharding between stored layout ``stored[i]`` and slot layout ``slot[j]``:
        stored -> slot for a read, slot -> stored for a write (vectorized :meth:`reshard_time`)."""
        index, matrix = self.reshard_table(tensor)
        rows, cols = [index[a] for a in stored], [index[b] for b in slot]
        return matrix[np.ix_(rows, cols)] if reads else matrix[np.ix_(cols, rows)].T

    def final_time(self, tensor: str, layout: Layout) -> float:
        """The final gather of a graph output stored in ``layout`` into R on every device (0 for other tensors,
        and with ``sharded_outputs``)."""
        if self.sharded_outputs or self.tensor(tensor).kind != "output":
            return 0.0
        return self.reshard_time(layout, self.replicated, tensor)

    @property
    def replicated(self) -> Layout:
        return compose((R,) * len(self.mesh.shape))

    def choice_cost(self, op: OpVar, c: int, layouts: Mapping[str, Layout]) -> float:
        """Compute plus resharding of op ``op`` run with choice ``c`` on ``layouts``."""
        choice = op.choices[c]
        total = choice.seconds
        for t, want in zip(op.inputs, choice.inputs):
            total += self.reshard_time(layouts[t], want, t)
        for t, made in zip(op.outputs, choice.outputs):
            total += self.reshard_time(made, layouts[t], t)
        return total

    def best_choice(self, op: OpVar, layouts: Mapping[str, Layout]) -> tuple[int, float]:
        """The op's cheapest algorithm on ``layouts`` (ties: the catalog's first), from its cost table:
        :meth:`choice_cost` of every choice at once, summed in the same order (so the same floats)."""
        base, slots = self._table(op)
        total = base
        for t, column, matrix in slots:
            total = total + matrix[:, column[layouts[t]]]
        best = int(np.argmin(total))
        return best, float(total[best])

    def _table(self, op: OpVar):
        """(compute seconds per choice, [(tensor, layout -> column, seconds[choice, column])] per slot)."""
        if ("table", op.name) not in self.memo:
            base = np.array([c.seconds for c in op.choices])
            slots = []
            for j, t in enumerate(op.inputs + op.outputs):
                domain = self.tensor(t).domain
                wanted = [(c.inputs + c.outputs)[j] for c in op.choices]
                matrix = self.slot_seconds(t, domain, wanted, j < len(op.inputs)).T
                slots.append((t, {a: i for i, a in enumerate(domain)}, matrix))
            self.memo[("table", op.name)] = (base, slots)
        return self.memo[("table", op.name)]

    def finals(self, layouts: Mapping[str, Layout]) -> float:
        """Σ :meth:`final_time` over the graph outputs."""
        return sum(self.final_time(t.name, layouts[t.name]) for t in self.tensors if t.kind == "output")

    def cost(self, layouts: Mapping[str, Layout]) -> float:
        """T(X) (module docstring); ValueError for a layout outside a tensor's domain."""
        self.check(layouts)
        return sum(self.best_choice(op, layouts)[1] for op in self.ops) + self.finals(layouts)

    def plan(self, layouts: Mapping[str, Layout]) -> Plan:
        layouts = dict(layouts)
        return Plan(layouts, {op.name: self.best_choice(op, layouts)[0] for op in self.ops})

    def plan_cost(self, plan: Plan) -> float:
        """T of a plan with its stated algorithms (≥ :meth:`cost` of its layouts)."""
        self.check(plan.layouts)
        return sum(self.choice_cost(op, plan.algorithms[op.name], plan.layouts) for op in self.ops) + \
            self.finals(plan.layouts)

    def replicated_plan(self) -> dict[str, Layout] | None:
        """Every tensor replicated — the one-device program on every device — when every domain allows it and it
        fits the memory; else None."""
        layouts = {t.name: self.replicated for t in self.tensors}
        if any(self.replicated not in t.domain for t in self.tensors) or not self.fits(layouts):
            return None
        return layouts

    def closed_form_bound(self) -> float:
        """A lower bound on every plan's step time: each op at its least compute over its algorithms, nothing
        moved. Proof: every term of T is at least that op's compute term, reshardings and gathers ≥ 0."""
        return sum(min(c.seconds for c in op.choices) for op in self.ops)

    def memory_per_device(self, layouts: Mapping[str, Layout]) -> float:
        return sum(t.per_device(layouts[t.name], self.mesh) for t in self.tensors)

    def min_memory(self) -> float:
        """The least memory per device any layout needs (every tensor in its smallest layout)."""
        return sum(min(t.per_device(a, self.mesh) for a in t.domain) for t in self.tensors)

    def fits(self, layouts: Mapping[str, Layout]) -> bool:
        return self.memory is None or self.memory_per_device(layouts) <= self.memory * (1 + 1e-12)

    def check(self, layouts: Mapping[str, Layout]) -> None:
        if "domains" not in self.memo:
            self.memo["domains"] = [(t, frozenset(t.domain)) for t in self.tensors]
        for t, domain in self.memo["domains"]:
            if layouts.get(t.name) not in domain:
                raise ValueError(f"tensor {t.name}: layout {layouts.get(t.name)} is not among "
                                 f"{', '.join(map(str, t.domain))}")


# ------------------------------------------------------------------------------------------- layouts
def parse_layout(text: str, axes: int = 1) -> Layout:
    """``R``, ``P``, ``S(d)`` (or ``S[d]``, the onnxruntime form) per mesh axis -> a mesh layout
    (:func:`onnxpart.tile.mesh.parse_mesh_layout`); UserError otherwise."""
    return meshes.parse_mesh_layout(text, axes)


_PARTIAL_WHY = {"output": "a graph output is never left as partial sums",
                "activation": "no algorithm of its producer makes partial sums"}


def candidate_layouts(shape: Sequence[int], mesh: DeviceMesh, partial: Sequence[bool],
                      kind: str = "activation") -> tuple[tuple[Layout, ...], tuple[tuple[str, str], ...]]:
    """(domain, excluded with reasons): every tuple of per-axis components (R, S(d), P; axis-0 major)
    whose sharded dims divide by the product of their axes' sizes; P on axis j only when the producer
    makes partial sums there (``partial[j]``) and it is an activation (never a graph output, input or
    weight). Axes of size 1 take R only."""
    options = [[R] if p == 1 else [R] + [S(d) for d in range(len(shape))] + [P] for p in mesh.shape]
    domain, excluded = [], []
    for combo in itertools.product(*options):
        why = _why_not(shape, combo, mesh, partial, kind)
        if why is None:
            domain.append(compose(combo))
        else:
            excluded.append((str(compose(combo)), why))
    return tuple(domain), tuple(excluded)


def _why_not(shape, combo, mesh: DeviceMesh, partial: Sequence[bool], kind: str) -> str | None:
    """Why the per-axis components ``combo`` are not a layout of the tensor (None: they are)."""
    where = (lambda j: "") if len(mesh.shape) == 1 else (lambda j: f" (mesh axis {mesh.names[j]})")
    for j, a in enumerate(combo):
        if a == P and not (partial[j] and kind == "activation"):
            return _PARTIAL_WHY.get(kind, f"a {kind} arrives whole, never as partial sums") + where(j)
    for d, size in enumerate(shape):
        axes = [j for j, a in enumerate(combo) if a == S(d)]
        pieces = 1
        for j in axes:
            pieces *= mesh.shape[j]
        if axes and (size % pieces or size < pieces):
            names = "" if len(mesh.shape) == 1 else f" (mesh axes {', '.join(mesh.names[j] for j in axes)})"
            return f"dim {d} of size {size} does not divide by {pieces} devices{names}"
    return None


# ---------------------------------------------------------------------------------------- building
def build_layout_instance(graph, devices: int | Sequence[int], bandwidth: float | Sequence[float] | None = None,
                          latency: float | Sequence[float] = 5e-6, memory: float | None = None,
                          pins: Mapping[str, Layout] | None = None, constants: Mapping | None = None,
                          axis_names: Sequence[str] | None = None, device=None,
                          sharded_outputs: bool = False) -> LayoutInstance:
    """The layout instance of a costed OpGraph on a mesh (module docstring): ``devices`` is D (a ring)
    or the mesh shape (2, 4); ``bandwidth`` and ``latency`` one value or one per axis, the bandwidth
    defaulting to the graph's interconnect (the device spec's); ``pins`` fix tensors' layouts; ``constants``
    (:func:`onnxpart.tile.onnx_constants.small_constants`) tell the catalog which axes Slice, Pad, Resize and
    the reductions touch when those come as inputs (without them such ops are replicated only); ``device``
    (a :class:`~onnxpart.cost_models.device.DeviceSpec`, default the built-in spec the graph was costed on)
    prices each device's part of an op (:mod:`onnxpart.tile.compute`); ``sharded_outputs`` leaves the graph
    outputs in their layouts instead of gathering them."""
    shape = (devices,) if isinstance(devices, int) else tuple(devices)
    if any(p < 1 for p in shape):
        raise UserError(f"--devices must be at least 1, got {devices}")
    bandwidth = bandwidth or graph.bandwidth
    if not bandwidth:
        raise UserError("no interconnect bandwidth known for this graph: pass --mesh-bandwidth (e.g. 300GB/s)")
    mesh = meshes.make_mesh(shape, axis_names, _values(latency), _values(bandwidth))
    roofline = DeviceRoofline.of(device if device is not None else _costed_on(graph))
    ops = tuple(_op_var(graph, op, mesh, constants or {}, roofline) for op in graph.ops)
    partial: dict[str, list[bool]] = {}
    for op in ops:
        for c in op.choices:
            for t, lay in zip(op.outputs, c.outputs):
                flags = partial.setdefault(t, [False] * len(shape))
                for j, a in enumerate(parts(lay)):
                    flags[j] |= a == P
    used = list(dict.fromkeys(t for op in ops for t in op.inputs + op.outputs))
    tensors = tuple(_tensor_var(graph, name, mesh, partial.get(name, [False] * len(shape))) for name in used)
    inst = LayoutInstance(graph.name, mesh, tensors, ops, memory, {t.name: i for i, t in enumerate(tensors)},
                          sharded_outputs=sharded_outputs)
    if pins:
        inst = pin(inst, pins)
    if memory is not None and inst.min_memory() > memory:
        from onnxpart.units import format_bytes

        raise InfeasibleError(f"--device-memory {format_bytes(memory)} is below the smallest memory any layout "
                              f"needs per device: {format_bytes(inst.min_memory())} (every tensor in its "
                              "smallest layout)")
    return inst


def _costed_on(graph):
    """The built-in device spec the graph's analytic costs came from; UserError when it has none."""
    from onnxpart.cost_models import load_device

    try:
        return load_device(graph.device or "")
    except UserError:
        raise UserError(f"the graph's costs name no built-in device ({graph.device!r}): pass --device to price "
                        "each device's launch overhead and roofline") from None


def _values(value: float | Sequence[float]) -> tuple[float, ...]:
    return (float(value),) if isinstance(value, (int, float)) else tuple(float(v) for v in value)


def _op_var(graph, op, mesh: DeviceMesh, constants: Mapping, roofline: DeviceRoofline) -> OpVar:
    """One op with its catalog algorithms composed over the mesh axes (:func:`onnxpart.tile.mesh.
    compose_algorithms`), or "replicated only" (not in the catalog, coarsened, opaque, an omitted optional
    input before a given one, several outputs other than Split's, or one device). Every output of an
    algorithm takes its one output layout."""
    raw = op.nodes[0].inputs if len(op.nodes) == 1 else op.inputs
    names = [n for n in raw if n]
    inputs = tuple(n for n in names if n in graph.tensors or n in graph.params)
    outputs = tuple(op.outputs)
    rep = compose((R,) * len(mesh.shape))
    replicated = Choice("replicated", (rep,) * len(inputs), (rep,) * len(outputs), 1, op.work)
    present = [i for i, n in enumerate(raw) if n]
    gap = bool(present) and "" in tuple(raw)[:present[-1]] and op.op_type not in OPTIONAL_GAPS  # slots would shift
    if (len(op.nodes) != 1 or op.opaque or len(inputs) != len(names) or gap or mesh.devices == 1
            or (len(outputs) != 1 and op.op_type != "Split")):
        return OpVar(op.name, op.op_type, inputs, outputs, (replicated,), op.work, False,
                     shape_computation(graph, inputs + outputs))
    attrs, consts = op.nodes[0].attrs, [constants.get(n) for n in inputs]

    def per_axis(in_shapes, out_shape, p):
        algs = op_algorithms(op.op_type, attrs, in_shapes, out_shape, p, consts, present)
        if algs is None or p > 1:
            return algs
        return [a for a in algs if a.output == R and all(x == R for x in a.inputs)]  # an axis of size 1

    composed = meshes.compose_algorithms(per_axis, [_shape(graph, n) for n in inputs],
                                         [_shape(graph, t) for t in outputs], mesh.shape)
    if composed is None:
        return OpVar(op.name, op.op_type, inputs, outputs, (replicated,), op.work, False,
                     shape_computation(graph, inputs + outputs))
    whole = [_bytes(graph, n) for n in inputs + outputs]
    dtype = _item(graph, outputs[0]).dtype

    def seconds(ins, out, div):
        local = [mesh.per_device(b, a) for b, a in zip(whole, ins + (out,) * len(outputs))]
        return roofline.seconds(op, dtype, whole, local, div)

    choices = tuple(Choice(name, ins, (out,) * len(outputs), div, seconds(ins, out, div))
                    for name, ins, out, div in composed)
    return OpVar(op.name, op.op_type, inputs, outputs, choices or (replicated,), op.work, True)


def shape_computation(graph, names: Sequence[str]) -> bool:
    """Whether every tensor an op reads and writes is an integer or boolean tensor of at most
    :data:`onnxpart.tile.onnx_constants.LIMIT` elements — the shape arithmetic of exports (Range, Equal,
    Where, an integer ConstantOfShape): nothing worth sharding, replicated at no real cost."""
    items = [graph.tensors.get(n) or graph.params[n] for n in names]
    return bool(items) and all(item.dtype.startswith(("int", "uint", "bool")) and math.prod(item.shape) <= LIMIT
                               for item in items)


def _item(graph, name: str):
    return graph.tensors.get(name) or graph.params[name]


def _shape(graph, name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _item(graph, name).shape)


def _bytes(graph, name: str) -> int:
    return int(_item(graph, name).bytes)


def _tensor_var(graph, name: str, mesh: DeviceMesh, partial: Sequence[bool]) -> TensorVar:
    if name in graph.params:
        item, kind = graph.params[name], "weight"
    else:
        item = graph.tensors[name]
        kind = "output" if name in graph.outputs else "input" if item.producer is None else "activation"
    domain, excluded = candidate_layouts(item.shape, mesh, partial, kind)
    return TensorVar(name, tuple(item.shape), int(item.bytes), kind, domain, excluded)


def replicated_only_tensors(inst: LayoutInstance) -> list[TensorVar]:
    """The tensors whose only layout is R on every mesh axis (no dim divides by the devices sharding it)."""
    return [t for t in inst.tensors if t.domain == (inst.replicated,)]


def pin(inst: LayoutInstance, pins: Mapping[str, Layout]) -> LayoutInstance:
    """``inst`` with each pinned tensor's domain reduced to its pin; UserError naming the conflict."""
    tensors = list(inst.tensors)
    for name, layout in pins.items():
        if name not in inst.index:
            raise UserError(f"--pin {name}={layout}: no tensor {name!r} in the model's ops")
        t = tensors[inst.index[name]]
        if len(parts(layout)) != len(inst.mesh.shape):
            raise UserError(f"--pin {name}={layout}: give one component per mesh axis ({len(inst.mesh.shape)})")
        if layout not in t.domain:
            why = dict(t.excluded).get(str(layout), f"it is not a layout of this {len(t.shape)}-D tensor")
            raise UserError(f"--pin {name}={layout} conflicts with the tensor: {why} "
                            f"(candidates: {', '.join(map(str, t.domain))})")
        tensors[inst.index[name]] = TensorVar(t.name, t.shape, t.bytes, t.kind, (layout,), t.excluded)
    return dataclasses.replace(inst, tensors=tuple(tensors), memo={})


def parse_pins(specs: Sequence[str], axes: int = 1) -> dict[str, Layout]:
    """``--pin tensor=layout`` values -> {tensor: mesh layout} on a mesh of ``axes`` axes."""
    out = {}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        if not sep or not name:
            raise UserError(f"--pin {spec!r}: use TENSOR=LAYOUT, e.g. w_q=S(1) (S(0)R on a 2-D mesh)")
        out[name] = parse_layout(text, axes)
    return out


# ------------------------------------------------------------------------------------ explanations
def reshardings(inst: LayoutInstance, plan: Plan) -> list[dict]:
    """Every resharding the plan runs that moves data, in execution order: tensor, from, to, the op and slot
    (``input j``, ``output j``, or ``final`` for a graph output's gather), collective, bytes, seconds, the
    per-axis ``steps`` (:func:`onnxpart.tile.resharding.plan`), and ``forced_by``: the two ops (or the graph
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
