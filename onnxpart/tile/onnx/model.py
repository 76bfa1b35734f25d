"""The layout instance of ``onnxpart tile`` on an ONNX model: a costed OpGraph on a device mesh (1-D ring of
D devices, or an n-D mesh such as 2x4, :mod:`onnxpart.tile.onnx.mesh`), built by
:func:`onnxpart.tile.onnx.build.build_layout_instance`.

This is the paper's TP(H, G, L, w) ("Matrix Tiling as Constrained Hypergraph Labeling", Sections 4–5)
with ONNX tensors as vertices, ONNX ops as hyperedges and sharding layouts as labels
(:mod:`onnxpart.tile.onnx.catalog`). Two departures from the paper's Hamming cost, both stated here:

* a retiling costs the collectives that move its index sets (:mod:`onnxpart.tile.onnx.resharding`: per-axis ring
  collectives, latency plus bytes over the link bandwidth, the cheapest sequence that leaves every device
  its piece), which depends on the pair (stored layout, wanted layout), not on a mismatch count — the
  paper's "use weights to scale the retiling cost" taken per pair;
* each feasible labeling (an op's *algorithm*) has a base cost: what one device spends on its part
  (:mod:`onnxpart.tile.onnx.compute`: the launch overhead in full plus the roofline of its shard, a replicated
  input read whole), ``Choice.seconds``.

Data structures (kept stable for ``--verify`` and ``scripts/bench_tile_onnx.py``):

``LayoutInstance``
    ``mesh`` (:class:`~onnxpart.tile.onnx.mesh.DeviceMesh`: shape, axis names, latency and bandwidth per
    axis; ``devices`` = their product), ``tensors``
    (:class:`TensorVar` per activation, graph input and weight: name, shape, bytes of the full tensor,
    ``kind`` in {"input", "activation", "output", "weight"}, ``domain`` — the candidate layouts —
    and ``excluded`` — (layout, reason) pairs for the layouts left out), ``ops`` (:class:`OpVar` per
    op in topological order: name, op_type, ``inputs``/``outputs`` (tensor names in the node's order;
    folded or omitted inputs are dropped), ``choices`` (:class:`Choice`), ``work`` (seconds on one
    device), ``catalog`` (False: "replicated only"), ``shape_computation`` (a replicated-only op on tiny
    integer or boolean tensors only, :func:`shape_computation`), ``memory`` (bytes per device or None).

Layouts are mesh layouts (:mod:`onnxpart.tile.onnx.mesh`): the catalog's ``R``, ``P``, ``S(d)`` on a 1-D mesh,
one component per axis (``S(0)R``) on an n-D one.

``Choice`` (an algorithm)
    ``name``, ``inputs``/``outputs`` (the layout it reads / writes per slot), ``divisor`` (the product
    of the per-axis catalog algorithms' divisors, :func:`~onnxpart.tile.onnx.mesh.compose_algorithms`),
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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from onnxpart.onnx_constants import LIMIT
from onnxpart.tile.onnx import resharding
from onnxpart.tile.onnx.catalog import R, Layout
from onnxpart.tile.onnx.mesh import DeviceMesh, compose


#: How many plans' costs :meth:`LayoutInstance.cost` keeps.
COSTS_KEPT = 8


@dataclass(frozen=True)
class Choice:
    """One algorithm of an op: the layout per input and output slot, the compute divisor, and the seconds
    each device spends on its part (:mod:`onnxpart.tile.onnx.compute`: launch overhead plus its shard's roofline)."""

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
        """At most :data:`~onnxpart.onnx_constants.LIMIT` elements: a scalar or an exporter's shape
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

    def touching(self) -> dict[str, list[int]]:
        """The ops reading or writing each tensor (their indices), kept: every greedy run and memory fit asks."""
        if "touching" not in self.memo:
            out: dict[str, list[int]] = {t.name: [] for t in self.tensors}
            for i, op in enumerate(self.ops):
                for t in dict.fromkeys(op.inputs + op.outputs):
                    out[t].append(i)
            self.memo["touching"] = out
        return self.memo["touching"]

    def reshard_steps(self, src: Layout, dst: Layout, tensor: str) -> tuple[resharding.Step, ...]:
        """The steps turning ``tensor`` from ``src`` into ``dst`` (:func:`onnxpart.tile.onnx.resharding.plan`)."""
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
        (:func:`onnxpart.tile.onnx.resharding.price_tables`, all tensors priced at once)."""
        if "tables" not in self.memo:  # every tensor at once: what one search reads of them, it reads of all
            layouts = self._layouts_of()
            tables = resharding.price_tables([(layouts[t.name], t.shape, float(t.bytes)) for t in self.tensors],
                                             self.mesh)
            self.memo["tables"] = {t.name: table for t, table in zip(self.tensors, tables)}
        return self.memo["tables"][tensor]

    def _layouts_of(self) -> dict[str, tuple]:
        """Per tensor: its domain, then R, then every other layout an algorithm reads or writes it in. Tensors
        with the same domain read and written by the same choices share one tuple."""
        if "layouts" not in self.memo:
            slots: dict[str, list] = {t.name: [] for t in self.tensors}
            for op in self.ops:
                for t, layouts in zip(op.inputs + op.outputs, self._slot_layouts(op.choices)):
                    slots[t].append(layouts)
            found: dict[tuple, tuple] = {}
            out = {}
            for t in self.tensors:
                key = (id(t.domain), *map(id, slots[t.name]))
                if key not in found:
                    union = dict.fromkeys(t.domain + (self.replicated,))
                    for layouts in slots[t.name]:
                        union.update(layouts)
                    found[key] = tuple(union)
                out[t.name] = found[key]
            self.memo["layouts"] = out
        return self.memo["layouts"]

    def _slot_layouts(self, choices: tuple[Choice, ...]) -> list[dict]:
        """Per slot (inputs, then outputs), the layouts the choices read or write there, in order; kept per tuple
        of choices (ops with the same algorithms share one)."""
        key = ("slot layouts", id(choices))
        if key not in self.memo:
            slots = [dict.fromkeys(layouts) for layouts in zip(*(c.inputs + c.outputs for c in choices))]
            self.memo[key] = (choices, slots)
        return self.memo[key][1]

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
        base, slots = self.table(op)
        total = base
        for t, column, matrix in slots:
            total = total + matrix[:, column[layouts[t]]]
        best = int(np.argmin(total))
        return best, float(total[best])

    def best_choices(self, layouts: Mapping[str, Layout]) -> tuple[np.ndarray, np.ndarray]:
        """(choice index, seconds) of every op, in op order: :meth:`best_choice` of all ops at once, one array
        operation per group of ops that share their cost tables (the same floats, summed in the same order)."""
        index, seconds = np.empty(len(self.ops), dtype=np.int64), np.empty(len(self.ops))
        for ops, base, slots in self._groups():
            total = np.broadcast_to(base, (len(ops), len(base)))
            for names, column, matrix in slots:
                total = total + matrix[:, [column[layouts[t]] for t in names]].T
            best = total.argmin(axis=1)
            index[ops], seconds[ops] = best, total[np.arange(len(ops)), best]
        return index, seconds

    def _groups(self) -> list[tuple[np.ndarray, np.ndarray, list[tuple[list[str], dict, np.ndarray]]]]:
        """The ops grouped by their shared cost tables (:meth:`table`): (op indices, compute seconds per choice,
        per slot (each op's tensor there, layout -> column, seconds[choice, column]))."""
        if "groups" not in self.memo:
            found: dict[tuple, tuple] = {}
            for i, op in enumerate(self.ops):
                base, slots = self.table(op)
                key = (id(base), *(id(matrix) for _, _, matrix in slots))
                group = found.setdefault(key, ([], base, [([], column, matrix) for _, column, matrix in slots]))
                group[0].append(i)
                for (t, _, _), (names, _, _) in zip(slots, group[2]):
                    names.append(t)
            self.memo["groups"] = [(np.array(ops), base, slots) for ops, base, slots in found.values()]
        return self.memo["groups"]

    def table(self, op: OpVar) -> tuple[np.ndarray, list[tuple[str, dict, np.ndarray]]]:
        """(compute seconds per choice, [(tensor, layout -> column, seconds[choice, column])] per slot): the
        resharding of each choice's slot layout from or into each layout of the tensor's domain. The arrays
        are shared (read-only) by ops with the same choices on tensors with the same domains and tables."""
        if ("table", op.name) not in self.memo:
            names = op.inputs + op.outputs
            domains = [self.tensor(t).domain for t in names]
            key = ("shared table", id(op.choices),
                   *((id(d), id(self.reshard_table(t)[1])) for t, d in zip(names, domains)))
            if key not in self.memo:
                base = np.array([c.seconds for c in op.choices])
                base.setflags(write=False)
                self.memo[key] = (base, [(self._column(d), self._slot_matrix(op, j, t, d))
                                         for j, (t, d) in enumerate(zip(names, domains))])
            base, slots = self.memo[key]
            self.memo[("table", op.name)] = (base, [(t, *slot) for t, slot in zip(names, slots)])
        return self.memo[("table", op.name)]

    def _column(self, domain: tuple) -> dict:
        """layout -> its index in ``domain`` (one dict per domain tuple)."""
        key = ("column", id(domain))
        if key not in self.memo:
            self.memo[key] = {a: i for i, a in enumerate(domain)}
        return self.memo[key]

    def _slot_matrix(self, op: OpVar, j: int, t: str, domain) -> np.ndarray:
        """seconds[choice, stored layout] of op's slot ``j`` (tensor ``t``), read-only."""
        wanted = [(c.inputs + c.outputs)[j] for c in op.choices]
        matrix = self.slot_seconds(t, domain, wanted, j < len(op.inputs)).T
        matrix.setflags(write=False)
        return matrix

    def finals(self, layouts: Mapping[str, Layout]) -> float:
        """Σ :meth:`final_time` over the graph outputs."""
        return sum(self.final_time(t.name, layouts[t.name]) for t in self.tensors if t.kind == "output")

    def cost(self, layouts: Mapping[str, Layout]) -> float:
        """T(X) (module docstring); ValueError for a layout outside a tensor's domain. The last few plans' costs
        are kept: the methods and the final choice price the same plans again, at n ops each."""
        key = tuple(layouts.get(t.name) for t in self.tensors)
        costs = self.memo.setdefault("costs", {})
        if key not in costs:
            self.check(layouts)
            if len(costs) >= COSTS_KEPT:
                del costs[next(iter(costs))]
            costs[key] = sum(self.best_choices(layouts)[1].tolist()) + self.finals(layouts)
        return costs[key]

    def plan(self, layouts: Mapping[str, Layout]) -> Plan:
        layouts = dict(layouts)
        index = self.best_choices(layouts)[0].tolist()
        return Plan(layouts, {op.name: c for op, c in zip(self.ops, index)})

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
        if "domains" not in self.memo:  # one set per domain tuple: tensors of one shape share theirs
            sets: dict[int, frozenset] = {}
            for t in self.tensors:
                if id(t.domain) not in sets:
                    sets[id(t.domain)] = frozenset(t.domain)
            self.memo["domains"] = [(t, sets[id(t.domain)]) for t in self.tensors]
        for t, domain in self.memo["domains"]:
            if layouts.get(t.name) not in domain:
                raise ValueError(f"tensor {t.name}: layout {layouts.get(t.name)} is not among "
                                 f"{', '.join(map(str, t.domain))}")


def replicated_only_tensors(inst: LayoutInstance) -> list[TensorVar]:
    """The tensors whose only layout is R on every mesh axis (no dim divides by the devices sharding it)."""
    return [t for t in inst.tensors if t.domain == (inst.replicated,)]
