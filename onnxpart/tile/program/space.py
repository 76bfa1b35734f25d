"""Exact enumeration over a few vertices' labels, the rest of the labeling assigned or left free.

The one primitive behind the exhaustive search (Algorithm 2, line 4), the greedy's bucket step
(Algorithm 3, line 5: "choose an optimal tiling for the set of vertices in ∪ E''") and its γ scores
(Algorithm 4: min_{S ∈ S_E} C(e, S), "the remaining search space conditioned on S").

An edge is *reduced* to the enumerated vertices: an assigned vertex's mismatch against each feasible
labeling l is a constant per l, and an unassigned vertex that is not enumerated is free — it takes
l's label when its domain allows (cost 0), else it pays its weight — so

    C(e | S) = min_l ( w·base(l) + Σ_{assigned v} w·c(v)·[S[v] ≠ l[v]] + Σ_{free v} w·c(v)·[l[v] ∉ D(v)]
                      + Σ_{enumerated v} w·c(v)·[Y[v] ≠ l[v]] ).

Free vertices that appear in one edge only never need enumerating: that is exact (their best label is
the chosen l's), and it is what makes the exhaustive search of the paper's programs cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.errors import UserError
from onnxpart.tile.program.model import Instance

_CHUNK = 1 << 15


class SpaceTooLarge(UserError):
    """An exhaustive search was asked to enumerate more labelings than its limit."""

    def __init__(self, size: int, vertices: int, limit: int) -> None:
        super().__init__(f"exhaustive search refused: {size:,} labelings of {vertices} vertices exceed the "
                         f"limit of {limit:,}; use the exact (CP-SAT) method or raise the limit")
        self.size = size


@dataclass(frozen=True)
class Reduced:
    """An edge restricted to the enumerated vertices: their positions, labels per feasible labeling,
    weighted costs, and the per-labeling constant of everything else."""

    cols: np.ndarray  # (k',) positions in the enumerated vertex list
    tuples: np.ndarray  # (s, k')
    cw: np.ndarray  # (k',)
    base: np.ndarray  # (s,)


def reduce_edges(instance: Instance, edge_ids: Sequence[int], assigned: np.ndarray,
                 enumerated: Sequence[int]) -> list[Reduced]:
    """Reduce ``edge_ids`` given ``assigned`` (label per vertex, -1 = unassigned) onto ``enumerated``."""
    pos = {v: i for i, v in enumerate(enumerated)}
    out = []
    for i in edge_ids:
        verts, tuples, cw, base = instance.arrays[i]
        extra = base.copy()
        keep = []
        for j, v in enumerate(verts.tolist()):
            if v in pos:
                keep.append(j)
            elif assigned[v] >= 0:
                extra += cw[j] * (tuples[:, j] != assigned[v])
            else:
                extra += cw[j] * ~np.isin(tuples[:, j], instance.domains[v])
        cols = np.asarray([pos[int(verts[j])] for j in keep], dtype=np.int64)
        out.append(Reduced(cols, tuples[:, keep], cw[keep], extra))
    return out


def conditional_cost(instance: Instance, edge: int, assigned: np.ndarray) -> int:
    """C(e | S): the edge's least cost over the labelings that extend the partial labeling S."""
    return int(reduce_edges(instance, [edge], assigned, [])[0].base.min())


def evaluate(reduced: Sequence[Reduced], labels: np.ndarray) -> np.ndarray:
    """Σ_e C(e | S, Y) for each row Y of ``labels`` (N, len(enumerated))."""
    total = np.zeros(labels.shape[0], dtype=np.int64)
    for r in reduced:
        if r.cols.size == 0:
            total += r.base.min()
            continue
        sub = labels[:, r.cols]
        total += ((sub[:, None, :] != r.tuples[None, :, :]) @ r.cw + r.base[None, :]).min(axis=1)
    return total


def search(instance: Instance, edge_ids: Sequence[int], assigned: np.ndarray, enumerated: Sequence[int],
           limit: int | None = None) -> tuple[np.ndarray, int]:
    """The labels of ``enumerated`` minimizing Σ C(e | S, Y) over ``edge_ids``, and that minimum.
    Every labeling in the product of the domains is tried (first minimum in lexicographic order);
    raises :class:`SpaceTooLarge` when there are more than ``limit``."""
    doms = [np.asarray(instance.domains[v], dtype=np.int64) for v in enumerated]
    sizes = [len(d) for d in doms]
    total = int(np.prod(sizes, dtype=object)) if sizes else 1
    if limit is not None and total > limit:
        raise SpaceTooLarge(total, len(enumerated), limit)
    reduced = reduce_edges(instance, edge_ids, assigned, enumerated)
    best_value, best = None, np.zeros(len(enumerated), dtype=np.int64)
    for start in range(0, total, _CHUNK):
        labels = _decode(np.arange(start, min(total, start + _CHUNK), dtype=np.int64), doms, sizes)
        values = evaluate(reduced, labels)
        i = int(np.argmin(values))
        if best_value is None or values[i] < best_value:
            best_value, best = int(values[i]), labels[i]
    return best, int(best_value)


def _decode(ids: np.ndarray, doms: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    """Mixed-radix digits of ``ids`` (first vertex most significant), mapped to domain labels."""
    labels = np.empty((ids.size, len(sizes)), dtype=np.int64)
    rest = ids.copy()
    for j in range(len(sizes) - 1, -1, -1):
        labels[:, j] = doms[j][rest % sizes[j]]
        rest //= sizes[j]
    return labels


def complete(instance: Instance, assigned: np.ndarray, edge_ids: Sequence[int] | None = None) -> np.ndarray:
    """Give each unassigned vertex of ``edge_ids`` (all edges by default) the label of its edge's best
    feasible labeling given the rest (exact for vertices in one edge), and vertices in no edge their
    first domain label. Returns a new array."""
    x = assigned.copy()
    for i in range(instance.m) if edge_ids is None else edge_ids:
        verts = instance.arrays[i][0]
        if (x[verts] >= 0).all():
            continue
        r = reduce_edges(instance, [i], x, [])[0]
        t = instance.arrays[i][1][int(np.argmin(r.base))]
        for v, label in zip(verts.tolist(), t.tolist()):
            if x[v] < 0:
                x[v] = label if label in instance.domains[v] else instance.domains[v][0]
    for v in np.flatnonzero(x < 0).tolist():
        x[v] = instance.domains[v][0]
    return x
