"""The ONNX side of ``onnxpart tile``: a costed OpGraph on a 1-D mesh of D devices as a layout instance.

This is the paper's TP(H, G, L, w) ("Matrix Tiling as Constrained Hypergraph Labeling", Sections 4–5)
with ONNX tensors as vertices, ONNX ops as hyperedges and sharding layouts as labels
(:mod:`onnxpart.tile.catalog`). Two departures from the paper's Hamming cost, both stated here:

* a retiling costs the collective it needs (:func:`~onnxpart.tile.catalog.reshard_time`: ring latency
  plus bytes over the link bandwidth), which depends on the pair (stored layout, wanted layout), not
  on a mismatch count — the paper's "use weights to scale the retiling cost" taken per pair;
* each feasible labeling (an op's *algorithm*) has a base cost: the op's compute time divided by the
  parallelism it gets (``Op.work / divisor``).

Data structures (kept stable for ``--verify`` and ``scripts/bench_tile.py``):

``LayoutInstance``
    ``mesh`` (:class:`~onnxpart.tile.catalog.Mesh`: devices D, latency, bandwidth), ``tensors``
    (:class:`TensorVar` per activation, graph input and weight: name, shape, bytes of the full tensor,
    ``kind`` in {"input", "activation", "output", "weight"}, ``domain`` — the candidate layouts —
    and ``excluded`` — (layout, reason) pairs for the layouts left out), ``ops`` (:class:`OpVar` per
    op in topological order: name, op_type, ``inputs``/``outputs`` (tensor names in the node's order;
    folded or omitted inputs are dropped), ``choices`` (:class:`Choice`), ``work`` (seconds on one
    device), ``catalog`` (False: "replicated only"), ``memory`` (bytes per device or None).

``Choice`` (an algorithm)
    ``name``, ``inputs``/``outputs`` (the layout it reads / writes per slot), ``divisor`` (1 or D).

``Plan`` (a solution)
    ``layouts`` (tensor -> Layout) and ``algorithms`` (op -> choice index); :meth:`LayoutInstance.cost`
    and :meth:`LayoutInstance.breakdown` recompute everything from them.

Objective (estimated step time, seconds)::

    T(X) = Σ_op min_c [ work/divisor(c) + Σ_in reshard(X[t] -> c.in) + Σ_out reshard(c.out -> X[t]) ]

A tensor's layout X[t] is how it is stored between ops; the producer reshards its algorithm's output
into X[t] once, each consumer reshards X[t] into what its algorithm reads. Graph inputs and weights
are laid out before the step (slicing is free); graph outputs are never left partial (P).
Memory (``--device-memory``): Σ_t bytes_per_device(t, X[t]) ≤ memory, with R and P holding the full
tensor and S(d) 1/D of it (exchange buffers are not counted).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.tile.catalog import (P, R, Algorithm, Layout, Mesh, S, elementwise_algorithms, gemm_algorithms,
                                   matmul_algorithms, normalization_algorithms, reshard, reshard_time,
                                   transpose_algorithms)
from onnxpart.tile.catalog_conv import POOLS, batchnorm_algorithms, conv_algorithms, pool_algorithms
from onnxpart.tile.catalog_reduce import REDUCTIONS, reduce_algorithms, reduced_axes
from onnxpart.tile.catalog_shape import RESHAPES, gather_algorithms, reshape_algorithms, untouched_algorithms

UNARY = {"Relu", "Erf", "Gelu", "Tanh", "Sigmoid", "Sqrt", "Exp", "Log", "Abs", "Neg", "Cast", "Identity",
         "Reciprocal", "Softplus", "LeakyRelu", "Elu", "Silu", "HardSigmoid", "Dropout", "Not", "Floor", "Ceil",
         "Round", "Sign", "Sin", "Cos", "HardSwish", "Mish", "IsNaN", "IsInf", "Selu", "ThresholdedRelu"}
#: broadcasting ops of two or more inputs -> how partial sums pass through them (catalog.elementwise_algorithms)
BINARY = {"Add": "sum", "Sub": "sum", "Sum": "sum", "Mul": "scale", "Div": "scale", "Pow": None, "Max": None,
          "Min": None, "Mean": None, "Where": None, "Clip": None, "PRelu": None, "Equal": None, "Less": None,
          "Greater": None, "LessOrEqual": None, "GreaterOrEqual": None, "And": None, "Or": None, "Xor": None}


@dataclass(frozen=True)
class Choice:
    """One algorithm of an op: the layout per input and output slot, and the compute divisor."""

    name: str
    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]
    divisor: int


@dataclass(frozen=True)
class TensorVar:
    name: str
    shape: tuple[int, ...]
    bytes: int
    kind: str  # input | activation | output | weight
    domain: tuple[Layout, ...]
    excluded: tuple[tuple[str, str], ...] = ()

    def per_device(self, layout: Layout, devices: int) -> int:
        """Bytes one device holds in ``layout`` (a shard rounded up)."""
        return -(-self.bytes // devices) if layout.kind == "S" else self.bytes


@dataclass(frozen=True)
class OpVar:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    choices: tuple[Choice, ...]
    work: float
    catalog: bool


@dataclass
class Plan:
    layouts: dict[str, Layout]
    algorithms: dict[str, int]


@dataclass(frozen=True)
class LayoutInstance:
    name: str
    mesh: Mesh
    tensors: tuple[TensorVar, ...]
    ops: tuple[OpVar, ...]
    memory: float | None = None
    index: Mapping[str, int] = field(default_factory=dict, compare=False)

    def tensor(self, name: str) -> TensorVar:
        return self.tensors[self.index[name]]

    @property
    def replicated_only(self) -> list[str]:
        return [op.name for op in self.ops if not op.catalog]

    def choice_cost(self, op: OpVar, c: int, layouts: Mapping[str, Layout]) -> float:
        """Compute plus resharding of op ``op`` run with choice ``c`` on ``layouts``."""
        choice = op.choices[c]
        total = op.work / choice.divisor
        for t, want in zip(op.inputs, choice.inputs):
            total += reshard_time(layouts[t], want, self.tensor(t).bytes, self.mesh)
        for t, made in zip(op.outputs, choice.outputs):
            total += reshard_time(made, layouts[t], self.tensor(t).bytes, self.mesh)
        return total

    def best_choice(self, op: OpVar, layouts: Mapping[str, Layout]) -> tuple[int, float]:
        """The op's cheapest algorithm on ``layouts`` (ties: the catalog's first)."""
        costs = [self.choice_cost(op, c, layouts) for c in range(len(op.choices))]
        best = min(range(len(costs)), key=costs.__getitem__)
        return best, costs[best]

    def cost(self, layouts: Mapping[str, Layout]) -> float:
        """T(X) (module docstring); ValueError for a layout outside a tensor's domain."""
        self.check(layouts)
        return sum(self.best_choice(op, layouts)[1] for op in self.ops)

    def plan(self, layouts: Mapping[str, Layout]) -> Plan:
        layouts = dict(layouts)
        return Plan(layouts, {op.name: self.best_choice(op, layouts)[0] for op in self.ops})

    def plan_cost(self, plan: Plan) -> float:
        """T of a plan with its stated algorithms (≥ :meth:`cost` of its layouts)."""
        self.check(plan.layouts)
        return sum(self.choice_cost(op, plan.algorithms[op.name], plan.layouts) for op in self.ops)

    def memory_per_device(self, layouts: Mapping[str, Layout]) -> float:
        return sum(t.per_device(layouts[t.name], self.mesh.devices) for t in self.tensors)

    def min_memory(self) -> float:
        """The least memory per device any layout needs (every tensor in its smallest layout)."""
        return sum(min(t.per_device(a, self.mesh.devices) for a in t.domain) for t in self.tensors)

    def fits(self, layouts: Mapping[str, Layout]) -> bool:
        return self.memory is None or self.memory_per_device(layouts) <= self.memory * (1 + 1e-12)

    def check(self, layouts: Mapping[str, Layout]) -> None:
        for t in self.tensors:
            if layouts.get(t.name) not in t.domain:
                raise ValueError(f"tensor {t.name}: layout {layouts.get(t.name)} is not among "
                                 f"{', '.join(map(str, t.domain))}")


# ------------------------------------------------------------------------------------------- layouts
_LAYOUT = re.compile(r"^\s*(R|P|S\s*[\(\[]\s*(-?\d+)\s*[\)\]])\s*$", re.IGNORECASE)


def parse_layout(text: str) -> Layout:
    """``R``, ``P``, ``S(d)`` (or ``S[d]``, the onnxruntime form) -> Layout; UserError otherwise."""
    m = _LAYOUT.match(text)
    if not m:
        raise UserError(f"unknown layout {text!r}: use R, P or S(d) (e.g. S(0))")
    word = m.group(1).upper()
    return S(int(m.group(2))) if word.startswith("S") else (R if word == "R" else P)


def candidate_layouts(shape: Sequence[int], devices: int, partial: bool,
                      kind: str = "activation") -> tuple[tuple[Layout, ...], tuple[tuple[str, str], ...]]:
    """(domain, excluded with reasons): R; S(d) for each dim divisible by D; P when its producer makes
    partial sums and it is an activation (never a graph output, input or weight)."""
    domain, excluded = [R], []
    for d, size in enumerate(shape):
        if devices > 1 and size % devices == 0 and size >= devices:
            domain.append(S(d))
        else:
            excluded.append((str(S(d)), f"dim {d} of size {size} does not divide by {devices} devices"))
    if partial and kind == "activation":
        domain.append(P)
    else:
        excluded.append(("P", {"output": "a graph output is never left as partial sums",
                               "activation": "no algorithm of its producer makes partial sums"}.get(
                                   kind, f"a {kind} arrives whole, never as partial sums")))
    return tuple(domain), tuple(excluded)


# -------------------------------------------------------------------------------------- op catalog
def op_algorithms(op_type: str, attrs: Mapping, in_shapes: Sequence[Sequence[int]],
                  out_shape: Sequence[int], p: int, consts: Sequence | None = None) -> list[Algorithm] | None:
    """The catalog's algorithms of one ONNX node (input slots in the node's order); None: not in it.
    ``consts``: per input slot, its value when it is a small known constant (axes), else None."""
    n = len(in_shapes)
    consts = list(consts) if consts is not None else [None] * n
    if op_type == "MatMul" and n == 2 and len(in_shapes[0]) >= 2 and len(in_shapes[1]) >= 2:
        return matmul_algorithms(len(in_shapes[0]), len(in_shapes[1]), p)
    if op_type == "Gemm" and n in (2, 3):
        c = in_shapes[2] if n == 3 else None
        return gemm_algorithms(bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)), p, c,
                               out_shape if c is not None else None)
    if op_type in UNARY and n == 1:
        return elementwise_algorithms(out_shape, in_shapes, p)
    if op_type in BINARY and n >= 1:
        algs = elementwise_algorithms(out_shape, in_shapes, p, BINARY[op_type] if n == 2 or op_type == "Sum" else None)
        if op_type == "Div":  # only the numerator may be partial
            algs = [a for a in algs if a.name != "partial-scale1"]
        return algs
    if op_type == "Transpose" and n == 1:
        perm = attrs.get("perm") or list(reversed(range(len(in_shapes[0]))))
        return transpose_algorithms(list(perm), p)
    if op_type in ("Softmax", "LayerNormalization") and n >= 1:
        axis = attrs.get("axis", -1)
        algs = normalization_algorithms(len(in_shapes[0]), axis, op_type, p)
        return [Algorithm(a.name, a.inputs[:n] + (R,) * (n - len(a.inputs)), a.output, a.divisor) for a in algs]
    return _cnn_and_movement_algorithms(op_type, attrs, in_shapes, out_shape, p, consts)


def _cnn_and_movement_algorithms(op_type: str, attrs: Mapping, in_shapes: Sequence[Sequence[int]],
                                 out_shape: Sequence[int], p: int, consts: list) -> list[Algorithm] | None:
    """The conv family (catalog_conv), data movement (catalog_shape) and reductions (catalog_reduce)."""
    n, rank = len(in_shapes), len(in_shapes[0]) if in_shapes else 0
    if op_type == "Conv" and n in (2, 3) and rank >= 3:
        return conv_algorithms(n, int(attrs.get("group", 1)), p)
    if op_type in POOLS and n == 1 and rank >= 3:
        return pool_algorithms(op_type, p)
    if op_type == "BatchNormalization" and n == 5 and rank >= 2 and not attrs.get("training_mode", 0):
        return batchnorm_algorithms(p)
    if op_type in RESHAPES and n >= 1 and not (op_type == "Squeeze" and n == 1 and "axes" not in attrs) \
            and not (op_type == "Reshape" and n != 2):  # Reshape-1 has its shape as an attribute
        return reshape_algorithms(in_shapes[0], out_shape, n, p)
    if op_type == "Concat" and n >= 1:
        return untouched_algorithms(rank, {int(attrs["axis"]) % rank}, n, 0, p)
    if op_type == "Split" and n >= 1:
        return untouched_algorithms(rank, {int(attrs.get("axis", 0)) % rank}, 1, n - 1, p)
    if op_type == "Slice" and n >= 1:
        axes = _slice_axes(attrs, in_shapes, consts)
        return None if axes is None else untouched_algorithms(rank, {a % rank for a in axes}, 1, n - 1, p)
    if op_type == "Gather" and n == 2 and rank >= 1:
        return gather_algorithms(rank, len(in_shapes[1]), int(attrs.get("axis", 0)), p)
    if op_type in REDUCTIONS and n in (1, 2) and rank >= 1:
        axes = attrs.get("axes") if n == 1 else consts[1]
        if n == 2 and axes is None:
            return None  # axes computed at run time: which dims are reduced is unknown
        axes = [] if axes is None else [int(a) for a in np.ravel(axes)]
        reduced = reduced_axes(rank, axes, bool(attrs.get("noop_with_empty_axes", 0)))
        return reduce_algorithms(op_type, rank, reduced, bool(attrs.get("keepdims", 1)), n, p)
    return None


def _slice_axes(attrs: Mapping, in_shapes: Sequence[Sequence[int]], consts: list) -> list[int] | None:
    """Slice's touched axes: the attribute (opset < 10), the constant ``axes`` input, or every axis
    ``starts`` names when ``axes`` is omitted; None when ``axes`` is computed at run time."""
    if len(in_shapes) == 1:
        return list(attrs.get("axes") or range(len(attrs.get("starts", ()))))
    if len(in_shapes) >= 4:
        return None if consts[3] is None else [int(a) for a in np.ravel(consts[3])]
    return list(range(int(in_shapes[1][0])))


def _valid(layout: Layout, shape: Sequence[int], p: int) -> bool:
    return layout.kind != "S" or (0 <= layout.dim < len(shape) and shape[layout.dim] % p == 0)


# ---------------------------------------------------------------------------------------- building
def build_layout_instance(graph, devices: int, bandwidth: float | None = None, latency: float = 5e-6,
                          memory: float | None = None, pins: Mapping[str, Layout] | None = None,
                          constants: Mapping | None = None) -> LayoutInstance:
    """The layout instance of a costed OpGraph on a ring of ``devices`` (module docstring). ``bandwidth``
    defaults to the graph's interconnect (the device spec's); ``pins`` fix tensors' layouts; ``constants``
    (:func:`onnxpart.tile.onnx_constants.small_constants`) tell the catalog which axes Slice and the
    reductions touch when those come as inputs (without them such ops are replicated only)."""
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    bandwidth = bandwidth or graph.bandwidth
    if not bandwidth:
        raise UserError("no interconnect bandwidth known for this graph: pass --mesh-bandwidth (e.g. 300GB/s)")
    mesh = Mesh(devices, latency, float(bandwidth))
    ops = tuple(_op_var(graph, op, devices, constants or {}) for op in graph.ops)
    partial = {t for op in ops for c in op.choices for t, lay in zip(op.outputs, c.outputs) if lay == P}
    used = list(dict.fromkeys(t for op in ops for t in op.inputs + op.outputs))
    tensors = tuple(_tensor_var(graph, name, devices, name in partial) for name in used)
    inst = LayoutInstance(graph.name, mesh, tensors, ops, memory, {t.name: i for i, t in enumerate(tensors)})
    if pins:
        inst = pin(inst, pins)
    if memory is not None and inst.min_memory() > memory:
        from onnxpart.units import format_bytes

        raise InfeasibleError(f"--device-memory {format_bytes(memory)} is below the smallest memory any layout "
                              f"needs per device: {format_bytes(inst.min_memory())} (every tensor in its "
                              "smallest layout)")
    return inst


def _op_var(graph, op, p: int, constants: Mapping) -> OpVar:
    """One op with its catalog algorithms, or "replicated only" (not in the catalog, coarsened, opaque, an
    omitted optional input before a given one, or several outputs other than Split's). Every output of
    an algorithm takes its one output layout."""
    raw = op.nodes[0].inputs if len(op.nodes) == 1 else op.inputs
    names = [n for n in raw if n]
    inputs = tuple(n for n in names if n in graph.tensors or n in graph.params)
    outputs = tuple(op.outputs)
    replicated = Choice("replicated", (R,) * len(inputs), (R,) * len(outputs), 1)
    present = [i for i, n in enumerate(raw) if n]
    gap = bool(present) and "" in tuple(raw)[:present[-1]] and op.op_type not in BINARY  # slots would shift
    if (len(op.nodes) != 1 or op.opaque or len(inputs) != len(names) or gap
            or (len(outputs) != 1 and op.op_type != "Split")):
        return OpVar(op.name, op.op_type, inputs, outputs, (replicated,), op.work, False)
    shapes = [_shape(graph, n) for n in inputs]
    out_shapes = [_shape(graph, t) for t in outputs]
    consts = [constants.get(n) for n in inputs]
    algs = op_algorithms(op.op_type, op.nodes[0].attrs, shapes, out_shapes[0], p, consts) if p > 1 else None
    if algs is None:
        return OpVar(op.name, op.op_type, inputs, outputs, (replicated,), op.work, False)
    choices = [Choice(a.name, a.inputs, (a.output,) * len(outputs), a.divisor) for a in algs
               if all(_valid(lay, s, p) for lay, s in zip(a.inputs, shapes))
               and all(_valid(a.output, s, p) for s in out_shapes)]
    return OpVar(op.name, op.op_type, inputs, outputs, tuple(choices) or (replicated,), op.work, True)


def _shape(graph, name: str) -> tuple[int, ...]:
    item = graph.tensors.get(name) or graph.params[name]
    return tuple(int(x) for x in item.shape)


def _tensor_var(graph, name: str, p: int, partial: bool) -> TensorVar:
    if name in graph.params:
        item, kind = graph.params[name], "weight"
    else:
        item = graph.tensors[name]
        kind = "output" if name in graph.outputs else "input" if item.producer is None else "activation"
    domain, excluded = candidate_layouts(item.shape, p, partial, kind)
    return TensorVar(name, tuple(item.shape), int(item.bytes), kind, domain, excluded)


def pin(inst: LayoutInstance, pins: Mapping[str, Layout]) -> LayoutInstance:
    """``inst`` with each pinned tensor's domain reduced to its pin; UserError naming the conflict."""
    tensors = list(inst.tensors)
    for name, layout in pins.items():
        if name not in inst.index:
            raise UserError(f"--pin {name}={layout}: no tensor {name!r} in the model's ops")
        t = tensors[inst.index[name]]
        if layout not in t.domain:
            why = dict(t.excluded).get(str(layout), f"it is not a layout of this {len(t.shape)}-D tensor")
            raise UserError(f"--pin {name}={layout} conflicts with the tensor: {why} "
                            f"(candidates: {', '.join(map(str, t.domain))})")
        tensors[inst.index[name]] = TensorVar(t.name, t.shape, t.bytes, t.kind, (layout,), t.excluded)
    return LayoutInstance(inst.name, inst.mesh, tuple(tensors), inst.ops, inst.memory, inst.index)


def parse_pins(specs: Sequence[str]) -> dict[str, Layout]:
    """``--pin tensor=layout`` values -> {tensor: Layout}."""
    out = {}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        if not sep or not name:
            raise UserError(f"--pin {spec!r}: use TENSOR=LAYOUT, e.g. w_q=S(1)")
        out[name] = parse_layout(text)
    return out


# ------------------------------------------------------------------------------------ explanations
def reshardings(inst: LayoutInstance, plan: Plan) -> list[dict]:
    """Every collective the plan runs: tensor, from, to, collective, bytes, seconds, and ``forced_by``:
    the two ops (or the graph input/weight) whose algorithms' preferences disagree."""
    out = []
    for op in inst.ops:
        choice = op.choices[plan.algorithms[op.name]]
        for t, want in zip(op.inputs, choice.inputs):
            stored = plan.layouts[t]
            if reshard(stored, want) is not None:
                out.append(_record(inst, t, stored, want, [_writer(inst, plan, t), _says(op, choice, "reads", want)]))
        for t, made in zip(op.outputs, choice.outputs):
            stored = plan.layouts[t]
            if reshard(made, stored) is not None:
                readers = [_says(o, o.choices[plan.algorithms[o.name]], "reads", stored) for o in inst.ops
                           if t in o.inputs and stored in o.choices[plan.algorithms[o.name]].inputs]
                out.append(_record(inst, t, made, stored, [_says(op, choice, "writes", made)] + readers[:1]))
    return out


def _record(inst: LayoutInstance, t: str, src: Layout, dst: Layout, forced_by: list[str]) -> dict:
    nbytes = inst.tensor(t).bytes
    return {"tensor": t, "from": str(src), "to": str(dst), "collective": reshard(src, dst), "bytes": nbytes,
            "seconds": reshard_time(src, dst, nbytes, inst.mesh), "forced_by": forced_by}


def _says(op: OpVar, choice: Choice, verb: str, layout: Layout) -> str:
    return f"{op.name} ({op.op_type} {choice.name}) {verb} {layout}"


def _writer(inst: LayoutInstance, plan: Plan, t: str) -> str:
    for op in inst.ops:
        if t in op.outputs:
            return f"{op.name} stores it as {plan.layouts[t]}"
    return f"{inst.tensor(t).kind} {t} is laid out as {plan.layouts[t]}"
