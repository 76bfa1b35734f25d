"""Multi-channel modularity (Section 3.3.2): modules that talk through several edges, and the
recursive lower bound with dependency and predecessor sets.

Modules are the k-edge-connected components of the undirected graph (Chechik et al.; networkx
``k_edge_components``): with ``k = c + 1`` any two modules joined by at most ``c`` edges ("channels")
fall apart. The bound needs them in a chain — every edge inside a module or from module ``s`` to
``s + 1`` — otherwise :func:`edge_modules` returns None.

The bound. Let ``G_s = M_s ∪ … ∪ M_q``, ``I_t`` the heads of the channels from ``M_s`` into
``M_{s+1}`` and ``O_t`` their tails, ``dep(I)_T`` the ops of ``T`` reachable from ``I`` (``I``
included), ``pre(O)_T`` those reaching ``O``. Then (the Remark of Section 3.3.2)::

    OPT(G_s) ≥ OPT(M_s) + min_t OPT(dep(I_t)_{M_{s+1}})      if every op of M_s reaches some I_t
    OPT(G_s) ≥ OPT(G_{s+1}) + min_t OPT(pre(O_t)_{M_s})      if every op of G_{s+1} is reached from some O_t
    OPT(G_s) ≥ max(OPT(M_s), OPT(G_{s+1}))                   always

*Proof of the first* (the second is its mirror): the op ``x`` of ``M_s`` that ends last, at ``T ≥
OPT(M_s)`` (the ops of ``M_s`` alone form a schedule of ``M_s``), reaches some head ``I_t``, so every op
of ``dep(I_t)`` starts after ``T`` and they form a schedule of that subgraph inside ``[T, C]``. The
preconditions are checked, not assumed (the thesis assumes single-input single-output graphs where
they hold). ``dep`` is taken inside ``M_{s+1}`` rather than all of ``G_{s+1}``: a subgraph's optimum
is no larger (restricting a schedule keeps it valid), so the bound stays valid and each solve stays
module-sized. Every ``OPT(·)`` is replaced by a proven lower bound: the CP-SAT bound of the
sub-instance or its simple bounds, whichever is larger.
"""

from __future__ import annotations

import time

import networkx as nx
import numpy as np

from onnxpart.schedule import bounds, exact, heuristics
from onnxpart.schedule.model import Instance


def edge_modules(inst: Instance, channels: int) -> list[list[int]] | None:
    """Modules joined by at most ``channels`` edges, in chain order; None if they do not form a chain
    of at least two modules."""
    und = nx.Graph()
    und.add_nodes_from(range(inst.n))
    und.add_edges_from((i, j) for i, j, _ in inst.edges)
    pos = {v: p for p, v in enumerate(inst.topo)}
    comps = sorted((sorted(c, key=pos.get) for c in nx.k_edge_components(und, channels + 1)),
                   key=lambda c: pos[c[0]])
    if len(comps) < 2:
        return None
    where = {v: m for m, comp in enumerate(comps) for v in comp}
    if any(where[j] - where[i] not in (0, 1) for i, j, _ in inst.edges):
        return None
    return comps


def _lower(inst: Instance, ops: list[int], limit: float, seed: int, memo: dict) -> tuple[float, bool]:
    """(proven lower bound on OPT of the sub-instance on ``ops``, whether it is proven optimal)."""
    key = tuple(sorted(ops))
    if key not in memo:
        sub, _ = inst.subinstance(key)
        warm = heuristics.heft(sub)
        res = exact.cpsat(sub, limit, warm.schedule if warm else None, seed=seed)
        simple = max(bounds.critical_path_bound(sub).value, bounds.work_bound(sub).value)
        memo[key] = (max(res.bound if res.bound is not None else 0.0, simple), res.status == "optimal")
    return memo[key]


def multichannel_bound(inst: Instance, modules: list[list[int]], time_limit: float = 10.0,
                       seed: int = 0) -> tuple[float, str, str]:
    """``(bound, status, note)`` by the recursion of the module docstring over chained ``modules``;
    status ``bound`` when every sub-solve was proven optimal, else ``time_limit`` (still proven)."""
    t0 = time.perf_counter()
    reach = inst.ancestors_closure() | np.eye(inst.n, dtype=bool)  # reflexive: I ∈ dep(I)
    solves = len(modules) + 2 * sum(1 for i, j, _ in inst.edges if _module(modules, i) != _module(modules, j))
    per = max(0.05, time_limit / max(1, solves))
    memo: dict = {}
    proven = True

    def lb(ops: list[int]) -> float:
        nonlocal proven
        value, optimal = _lower(inst, ops, per, seed, memo)
        proven &= optimal
        return value

    rest = lb(modules[-1])  # LB(G_q)
    rest_ops = np.zeros(inst.n, dtype=bool)
    rest_ops[modules[-1]] = True
    for s in range(len(modules) - 2, -1, -1):
        m, nxt = modules[s], modules[s + 1]
        nxt_set = set(nxt)
        chan = [(i, j) for i, j, _ in inst.edges if j in nxt_set and i in set(m)]
        heads = sorted({j for _, j in chan})
        tails = sorted({i for i, _ in chan})
        here = lb(m)
        best = max(here, rest)
        if heads and all(reach[x, heads].any() for x in m):
            best = max(best, here + min(lb([y for y in nxt if reach[h, y]]) for h in heads))
        if tails and reach[np.ix_(tails, np.flatnonzero(rest_ops))].any(axis=0).all():
            best = max(best, rest + min(lb([x for x in m if reach[x, t]]) for t in tails))
        rest = best
        rest_ops[m] = True
    note = f"{len(modules)} modules, {len(memo)} sub-solves, {time.perf_counter() - t0:.2f} s"
    return rest, ("bound" if proven else "time_limit"), note


def _module(modules: list[list[int]], v: int) -> int:
    return next(m for m, comp in enumerate(modules) if v in comp)
