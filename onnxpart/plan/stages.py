"""A stage on its sub-mesh: tile's layout instance of the whole model on that mesh, cut down to the stage's ops
(:func:`restrict`), and tile's answer for it.

Tile's step time is a sum over ops, each op's term depending only on the layouts of the tensors it touches
(:mod:`onnxpart.tile.onnx.model`). So a stage's instance is the whole model's instance on the same mesh with
only the stage's ops and the tensors they touch — the same algorithms, prices and domains — except that a
tensor crossing the stage's boundary is never stored as partial sums (:mod:`onnxpart.plan.transfers`). The
tensors it hands on stay in their layouts for the transfer; the model's own outputs are gathered whole onto the
stage's devices, as ``onnxpart tile`` does (tile's final gathers).

Memory per device (:meth:`Stage.memory`), what an inference run holds: every weight shard resident; the
activations live at the stage's peak (:func:`live_peak`: a tensor from the op that makes it — or the stage's
start, for what it receives — to its last reader in the stage, or to the end when it is sent on or is a model
output); one more copy of the tensors it receives while micro-batches are in flight (the next micro-batch
arrives while one runs); and the largest buffer one resharding writes (a collective's output). Tile's own
instance on the stage keeps no memory bound (its model holds every tensor at once, which no runtime does:
Llama-70B's activations at sequence 2048 would not fit 8 A100s); the plan checks this one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from onnxpart.tile.onnx.mesh import parts
from onnxpart.tile.onnx.model import LayoutInstance, Plan


def no_partial(domain: tuple) -> tuple:
    """``domain`` without layouts holding partial sums on some mesh axis."""
    return tuple(a for a in domain if all(c.kind != "P" for c in parts(a)))


def restrict(inst: LayoutInstance, ops: Sequence[int], boundary: frozenset[str] = frozenset(),
             memory: float | None = None) -> LayoutInstance:
    """``inst`` with only the ops ``ops`` (indices, in order) and the tensors they touch; the tensors in
    ``boundary`` keep no partial-sum layout (module docstring)."""
    chosen = tuple(inst.ops[i] for i in ops)
    names = dict.fromkeys(t for op in chosen for t in op.inputs + op.outputs)
    tensors = []
    for name in names:
        t = inst.tensor(name)
        if name in boundary:
            t = dataclasses.replace(t, domain=no_partial(t.domain))
        tensors.append(t)
    return LayoutInstance(inst.name, inst.mesh, tuple(tensors), chosen, memory,
                          {t.name: i for i, t in enumerate(tensors)})


def signature(sub: LayoutInstance) -> tuple:
    """A key equal for two cut-down instances with the same ops, algorithms, prices and tensors wired alike
    (an LLM's layers): tile's build shares one tuple of choices, and one domain, between ops and tensors of
    the same signature, so their identities stand for their contents."""
    seen: dict[str, int] = {}

    def key(name: str):
        if name in seen:
            return seen[name]
        seen[name] = len(seen)
        t = sub.tensor(name)
        return (t.shape, t.bytes, t.kind, id(t.domain))

    return tuple((id(op.choices), op.op_type, op.work, tuple(key(t) for t in op.inputs + op.outputs))
                 for op in sub.ops)


def tensor_order(sub: LayoutInstance) -> list[str]:
    """The tensors of ``sub`` in the order :func:`signature` meets them (how equal units map their layouts)."""
    return list(dict.fromkeys(t for op in sub.ops for t in op.inputs + op.outputs))


def live_peak(inst: LayoutInstance, layouts: Mapping[str, object], kept: frozenset[str] = frozenset()) -> float:
    """The most bytes per device of activations live at once as ``inst``'s ops run in order (module docstring):
    weights excluded; a tensor with no reader in ``inst``, a model output, or one in ``kept`` lives to the end."""
    n = len(inst.ops)
    born: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(inst.ops):
        for t in op.inputs:
            born.setdefault(t, 0)
            last[t] = i
        for t in op.outputs:
            born.setdefault(t, i)
    delta = [0.0] * (n + 1)
    for name, start in born.items():
        t = inst.tensor(name)
        if t.kind == "weight":
            continue
        end = n if name in kept or t.kind == "output" or name not in last else last[name] + 1
        size = t.per_device(layouts[name], inst.mesh)
        delta[start] += size
        delta[end] -= size
    peak = live = 0.0
    for step in delta[:n]:
        live += step
        peak = max(peak, live)
    return peak


def weight_bytes(inst: LayoutInstance, layouts: Mapping[str, object]) -> float:
    """Bytes per device of the weight shards ``inst`` touches."""
    return float(sum(t.per_device(layouts[t.name], inst.mesh) for t in inst.tensors if t.kind == "weight"))


def least_weight_bytes(inst: LayoutInstance, names=None) -> float:
    """The least bytes per device of ``inst``'s weights (those in ``names`` when given), each in its smallest
    layout: what any plan holds resident at least."""
    return float(sum(min(t.per_device(a, inst.mesh) for a in t.domain) for t in inst.tensors
                     if t.kind == "weight" and (names is None or t.name in names)))


@dataclass
class Stage:
    """One stage of a plan on its mesh: the cut-down instance, tile's layouts, and what it costs."""

    ops: tuple[int, ...]
    instance: LayoutInstance
    layouts: dict[str, object]
    received: tuple[str, ...]  # the tensors other stages hand it
    in_flight: int = 1  # micro-batches whose inputs it holds at once
    method: str = "tile"
    sent: frozenset[str] = frozenset()  # the tensors it hands on (live to its end)
    plan: Plan = field(init=False)

    def __post_init__(self) -> None:
        self.plan = self.instance.plan(self.layouts)

    @property
    def compute(self) -> float:
        """Tile's step time of the stage (with the gathers of the model outputs it makes)."""
        return self.instance.cost(self.layouts)

    def memory(self) -> dict[str, float]:
        """Bytes per device: weights, live activations at the peak, in-flight inputs, resharding buffers, total
        (module docstring)."""
        inst, mesh = self.instance, self.instance.mesh
        weights = weight_bytes(inst, self.layouts)
        others = live_peak(inst, self.layouts, self.sent)
        extra = (self.in_flight - 1) * sum(inst.tensor(t).per_device(self.layouts[t], mesh) for t in self.received)
        buffers = 0
        for op in inst.ops:
            choice = op.choices[self.plan.algorithms[op.name]]
            for t, want in zip(op.inputs, choice.inputs):
                if want != self.layouts[t]:
                    buffers = max(buffers, inst.tensor(t).per_device(want, mesh))
        return {"weights": weights, "activations": float(others), "in_flight": float(extra),
                "buffers": float(buffers), "total": float(weights + others + extra + buffers)}


def merged_layouts(sub: LayoutInstance, pieces: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """One layout per tensor of ``sub`` from the units' plans, moved into the tensor's domain here (``R``
    where a unit stored it as partial sums and the stage may not). Where the units chose differently for a
    tensor they share (the rotary and mask tables every layer reads, the residual stream at their edges), the
    choice cheapest for all its ops together (:func:`_agreed`); the first plan naming it otherwise."""
    out: dict[str, object] = {}
    choices: dict[str, list] = {}
    for piece in pieces:
        for name, layout in piece.items():
            if name in sub.index:
                out.setdefault(name, layout)
                if layout not in choices.setdefault(name, []):
                    choices[name].append(layout)
    for t in sub.tensors:
        if out.get(t.name) not in t.domain:
            out[t.name] = sub.replicated
    for name, layouts in choices.items():
        if len(layouts) > 1:
            _agreed(sub, out, name, [a for a in layouts if a in sub.tensor(name).domain] or [out[name]])
    return out


def _agreed(sub: LayoutInstance, x: dict, name: str, layouts: list) -> None:
    """Set ``x[name]`` to the one of ``layouts`` that makes the ops touching it, and its final gather, cheapest
    (the first among equals); every layout is one some unit's plan fit with."""
    touching = sub.touching()[name]

    def price(layout) -> float:
        x[name] = layout
        return sum(sub.best_choice(sub.ops[i], x)[1] for i in touching) + sub.final_time(name, layout)

    x[name] = min(layouts, key=price)
