"""A proven lower bound where bucket elimination's order is too wide: tensors split into copies per group of
readers (mini-bucket elimination, Dechter & Rish, "Mini-buckets: a general scheme for bounded inference",
Journal of the ACM 50, 2003).

Elimination (:mod:`onnxpart.tile.onnx.elimination`) refuses an instance whose min-fill order builds a function
over more than ``max_table`` assignments. A transformer stage on a 2-D mesh is one: the mask and rotary tables
that every layer reads tie all the layers together (25 layouts each on 2×4, five such tensors: 25⁵ > 10⁶).

:func:`split` gives each group of ops (a plan's units) its own copy of every tensor that many groups share
and it reads but does not hold — same shape and domain, no final gather, no memory bound. It is a relaxation: every plan of the instance
is a plan of the split one, each copy in the original's layout, at the same step time (tile's T is a sum of
per-op terms, each reading only its own slots' layouts). So the split instance's optimum is at most the
instance's, and elimination solves it when each group alone is narrow enough. What it gives up is the
coupling between groups through a shared tensor: what converting it costs where groups want it differently.
:func:`split_bound` splits the instance's dominance-reduced domains (each copy keeps its original's), and
where elimination refuses the split instance too (a stage on a 16- or 32-device mesh), bounds it by
mini-buckets (:mod:`onnxpart.tile.onnx.minibucket`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from onnxpart.certificate import LowerBound
from onnxpart.tile.onnx.model import LayoutInstance
from onnxpart.tile.onnx.reduce import Reduced


#: A tensor is split when this many groups touch it: a chain's edges (a unit's output read by the next) stay
#: whole, so what crossing them costs stays in the bound; the tables every layer reads are split.
SHARED = 3


def split(inst: LayoutInstance, groups: Sequence[Sequence[int]]) -> LayoutInstance:
    """``inst`` with a copy of each tensor that :data:`SHARED` or more groups (lists of op indices covering
    ``inst.ops``) touch, for each group that reads it but is not its home — the group of its producer, else of
    its first reader; memory unbounded."""
    return _split(inst, groups)[0]


def _split(inst: LayoutInstance, groups: Sequence[Sequence[int]]) -> tuple[LayoutInstance, dict[str, str]]:
    """:func:`split`'s instance and {copy: the tensor it copies}."""
    group_of = {i: g for g, ops in enumerate(groups) for i in ops}
    home: dict[str, int] = {}
    touched: dict[str, set] = {}
    for i, op in enumerate(inst.ops):
        for t in op.outputs:
            home.setdefault(t, group_of[i])
    for i, op in enumerate(inst.ops):
        for t in op.inputs + op.outputs:
            home.setdefault(t, group_of[i])
            touched.setdefault(t, set()).add(group_of[i])
    shared = {t for t, reached in touched.items() if len(reached) >= SHARED}
    tensors, ops, copies = list(inst.tensors), [], {}
    for i, op in enumerate(inst.ops):
        g = group_of[i]
        names = []
        for t in op.inputs:
            if t not in shared:
                names.append(t)
                continue
            if home[t] != g and (t, g) not in copies:
                copies[(t, g)] = f"{t}@{g}"
                original = inst.tensor(t)
                kind = "activation" if original.kind == "output" else original.kind
                tensors.append(dataclasses.replace(original, name=copies[(t, g)], kind=kind))
            names.append(t if home[t] == g else copies[(t, g)])
        ops.append(dataclasses.replace(op, inputs=tuple(names)))
    relaxed = LayoutInstance(inst.name, inst.mesh, tuple(tensors), tuple(ops), None,
                             {t.name: i for i, t in enumerate(tensors)}, sharded_outputs=inst.sharded_outputs)
    return relaxed, {copy: t for (t, _), copy in copies.items()}


def split_bound(inst: LayoutInstance, groups: Sequence[Sequence[int]], deadline: float) -> LowerBound | None:
    """The optimum of :func:`split` ``(inst, groups)`` restricted to ``inst``'s dominance-reduced domains, by
    elimination, or where elimination refuses it, the mini-bucket bound on it
    (:mod:`onnxpart.tile.onnx.minibucket`); None when the deadline passes first. A proven lower bound on every
    plan of ``inst``: the reduction keeps an optimum of ``inst`` (:mod:`onnxpart.tile.onnx.reduce`), and that
    plan, each copy in its original's layout, is a plan of the split instance at the same step time."""
    from onnxpart.tile.onnx import elimination, minibucket
    from onnxpart.tile.onnx.reduce import reduce_instance

    start = time.monotonic()
    reduced = reduce_instance(inst, deadline=deadline)
    if reduced is None:
        return None
    relaxed, original = _split(inst, groups)
    kept = Reduced({t.name: reduced.domains[original.get(t.name, t.name)] for t in relaxed.tensors},
                   reduced.choices, {})
    note = (f"each of {len(groups)} groups of ops given its own copy of the tensors it reads from another (a "
            "relaxation: Dechter & Rish's mini-buckets), memory unbounded")
    found = elimination.solve(relaxed, kept, deadline=deadline)
    if found.status == "refused":
        mini = minibucket.lower_bound(found.network, deadline)
        if mini is None:
            return None
        return LowerBound("tile-split", mini.value, "bound", "mini-bucket elimination", time.monotonic() - start,
                          note=f"mini-bucket elimination ({mini.splits} buckets split, tables of at most "
                               f"{elimination.MAX_TABLE:,} entries) with {note}")
    if found.status != "optimal":
        return None
    value = min(found.seconds, relaxed.cost(found.layouts))  # equal up to float rounding: keep the lower
    return LowerBound("tile-split", value, "bound", "mini-bucket elimination", time.monotonic() - start,
                      note=f"bucket elimination with {note}")
