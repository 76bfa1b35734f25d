"""MILP-SPLIT's modules (Section 3.3.1), for both objectives: the *cut ops* through which all data
crossing a point of the graph flows, and the segments between them.

A cut op is an articulation point ``a`` of the undirected graph (networkx) — or the unique source or
sink — such that every other op is an ancestor or a descendant of ``a`` and no edge joins an ancestor to
a descendant. With cut ops ``c_1 < … < c_r`` the ops split into the prefix ``S_0`` (ancestors of
``c_1``), ``S_k = {c_k} ∪ (between c_k and c_{k+1})`` and ``S_r = {c_r} ∪ descendants``
(:mod:`onnxpart.schedule.latency.split` states the proofs that rest on them).
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from onnxpart.schedule.common.instance import Instance


def cut_ops(inst: Instance) -> list[int]:
    """The cut ops (module docstring) in topological order."""
    reach = inst.ancestors_closure()
    und = nx.Graph()
    und.add_nodes_from(range(inst.n))
    und.add_edges_from((i, j) for i, j, _ in inst.edges)
    candidates = set(nx.articulation_points(und))
    sources = [i for i in range(inst.n) if not inst.preds[i]]
    sinks = [i for i in range(inst.n) if not inst.succs[i]]
    candidates |= set(sources) if len(sources) == 1 else set()
    candidates |= set(sinks) if len(sinks) == 1 else set()
    src = np.array([i for i, _, _ in inst.edges], dtype=np.int64)
    dst = np.array([j for _, j, _ in inst.edges], dtype=np.int64)
    out = []
    for a in candidates:
        related = reach[:, a] | reach[a]
        if related.sum() != inst.n - 1:
            continue
        if len(src) and np.any(reach[src, a] & reach[a, dst]):
            continue  # an edge skips over a
        out.append(a)
    pos = {v: p for p, v in enumerate(inst.topo)}
    return sorted(out, key=pos.get)


def segments(inst: Instance, cuts: list[int]) -> list[tuple[list[int], int | None, int | None]]:
    """``(ops, entry cut, exit cut)`` per segment; the exit cut is not among the ops."""
    reach = inst.ancestors_closure()
    segs = []
    before = [i for i in inst.topo if reach[i, cuts[0]]]
    if before:
        segs.append((before, None, cuts[0]))
    for k, c in enumerate(cuts):
        nxt = cuts[k + 1] if k + 1 < len(cuts) else None
        inside = [i for i in inst.topo if reach[c, i] and (nxt is None or reach[i, nxt])]
        segs.append(([c] + inside, c, nxt))
    return segs


def has_modules(inst: Instance, cuts: list[int]) -> bool:
    """Whether a cut op other than the source or the sink separates the graph into modules."""
    return any(inst.preds[c] and inst.succs[c] for c in cuts)
