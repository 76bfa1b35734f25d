"""Multi-channel modularity (Section 3.3.2): modules that talk through several tensors, and the
recursive lower bound with dependency and predecessor sets (the Remark, and Table 3.1 for 2 channels).

Modules. The thesis names k-edge-connected components, but coarsened RWNN modules (ER(0.2), N = 10)
are not even 2-edge-connected inside, so those components are mostly single ops. Here modules are
intervals ``M_1, …, M_q`` of the topological order cut where at most ``c`` ops (``c`` channels: the
tensors that cross) send data to later ops, each at least ``min_size`` ops. Any such chain is
ancestor-closed prefix by prefix, which is all the bound needs; the number of channels only decides
how strong it is.

Notation: ``a(Y)`` / ``b(Y)`` the first start / last end of the ops ``Y`` in a schedule of the whole
graph, ``C`` its makespan, ``LB(Y)`` a proven bound on ``OPT(Y)`` (the sub-instance on ``Y``: its
CP-SAT bound, critical path, path LP and path MIP, whichever is largest), ``H_s`` the *heads* (ops of ``M_{s+1}``
fed from ``M_s``), ``T_s`` the *tails* (ops of ``M_{s−1}`` feeding ``M_s``), ``dep(h)`` the ops of
``M_{s+1}`` reachable from ``h`` (``h`` included), ``pre(t)`` those of ``M_{s−1}`` reaching ``t``.

* ``b(Y) − a(Y) ≥ OPT(Y)``: restricted to ``Y`` and shifted by ``a(Y)`` the schedule is one of ``Y``.
* Forward, ``C − a(Y) ≥ R(s, Y)`` for ``Y ⊆ M_s``: ``R = LB(Y)``; ``≥ R(s+1, dep(h))`` for every head
  ``h`` reachable from ``Y`` (``dep(h)`` starts after an op of ``Y`` ends); and, if every op of ``Y``
  reaches a head, ``≥ LB(Y) + min_h R(s+1, dep(h))``: the op of ``Y`` ending last, at ``b(Y) ≥ a(Y) +
  OPT(Y)``, reaches some ``h``, and all of ``dep(h)`` starts after it. This is the Remark's first
  inequality with ``dep(I)`` taken in all of ``G_{s+1}`` (as the paper writes it), bounded recursively.
* Backward, ``b(Y) ≥ P(s, Y)``, the mirror: ``P = LB(Y)``; ``≥ P(s−1, pre(t))`` for every tail
  reaching ``Y``; and ``≥ LB(Y) + min_t P(s−1, pre(t))`` if every op of ``Y`` is reached from a tail.
* Suffix, ``C − a(G_s) ≥ S(s)`` with ``G_s = M_s ∪ … ∪ M_q``: ``S(s) = max(R(s, M_s), S(s+1))``, and
  ``S(s+1) + min_t LB(pre(t))`` over the ops ``t`` of ``M_s`` feeding ``G_{s+1}`` if every op of
  ``G_{s+1}`` is reached from one — the Remark's second inequality: the first op of ``G_{s+1}`` to start
  follows some ``t``, hence all of ``pre(t)``, which ran after ``a(G_s)``.
* Across a cut, from time 0: ``C ≥ P(s, pre(t)) + S(s+1)`` under the same condition (``P`` bounds the
  absolute end of ``pre(t)``; it must not feed ``S``, which is measured from ``a(G_s)``), and ``C ≥
  P(s, M_s) + min_h R(s+1, dep(h))`` when every op of ``M_s`` reaches a head: the op of ``M_s``
  ending last, at ``b(M_s) ≥ P(s, M_s)``, reaches some ``h`` whose ``dep(h)`` follows.

The bound is the best of ``S(1)`` and the cross-cut values. With two channels it contains every row of
Table 3.1: ``opt(A) + α·opt(B)`` is the forward term, ``β·opt(A) + opt(B)`` the backward one, and the
1-to-1 row's min over channels is the min over heads / tails. Every precondition is checked, never
assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from time import monotonic as now

import numpy as np

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency import bounds, exact, heuristics
from onnxpart.strategy import Budget


def chain_modules(inst: Instance, channels: int, min_size: int = 4) -> list[list[int]] | None:
    """Intervals of the topological order, cut where at most ``channels`` ops send data across and
    the module so far has ``min_size`` ops; None if that gives fewer than two modules."""
    pos = {v: p for p, v in enumerate(inst.topo)}
    crossing = np.zeros(inst.n + 1, dtype=np.int64)  # crossing[p]: ops before p with a successor at ≥ p
    for i in range(inst.n):
        if inst.succs[i]:
            crossing[pos[i] + 1] += 1
            crossing[max(pos[j] for j in inst.succs[i]) + 1] -= 1
    crossing = np.cumsum(crossing)
    modules, start = [], 0
    for p in range(1, inst.n):
        if crossing[p] <= channels and p - start >= min_size and inst.n - p >= min_size:
            modules.append(list(inst.topo[start:p]))
            start = p
    modules.append(list(inst.topo[start:]))
    return modules if len(modules) >= 2 else None


def _lower(inst: Instance, ops: tuple[int, ...], limit: float, seed: int) -> tuple[float, bool]:
    """(``LB`` of the sub-instance on ``ops`` — module docstring —, whether CP-SAT proved it optimal): CP-SAT,
    the path MIP and the path LP a third of ``limit`` each. With no time left (``limit`` ≤ 0), the critical
    path alone."""
    sub, _ = inst.subinstance(ops)
    path = bounds.critical_path_bound(sub).value
    if limit <= 0:
        return path, False
    res = exact.cpsat(sub, limit / 3, heuristics.best_constructive(sub), seed=seed)
    mip = bounds.path_lp_bound(sub, limit / 3, integer=True).value
    simple = max(path, bounds.path_lp_bound(sub, limit / 3).value or 0.0, mip or 0.0)
    return max(res.bound if res.bound is not None else 0.0, simple), res.status == "optimal"


@dataclass
class _Sets:
    """The op sets of the recursions, as sorted tuples (module docstring)."""
    module: list[tuple[int, ...]]
    heads: list[list[int]]  # heads[s]: ops of M_{s+1} with a predecessor in M_s
    tails: list[list[int]]  # tails[s]: ops of M_s with a successor in M_{s+1}
    out: list[list[int]]  # out[s]: ops of M_s with a successor in a later module
    dep: dict[int, tuple[int, ...]]  # head h of M_{s+1} → the ops of M_{s+1} reachable from h
    pre: dict[int, tuple[int, ...]]  # op t of M_s → the ops of M_s reaching t

    @property
    def distinct(self) -> set[tuple[int, ...]]:
        return set(self.module) | set(self.dep.values()) | set(self.pre.values())


def _sets(inst: Instance, modules: list[list[int]], reach: np.ndarray) -> _Sets:
    where = np.empty(inst.n, dtype=np.int64)
    for m, ops in enumerate(modules):
        where[ops] = m
    q = len(modules)
    heads = [sorted({j for i, j, _ in inst.edges if where[i] == s and where[j] == s + 1}) for s in range(q)]
    tails = [sorted({i for i, j, _ in inst.edges if where[i] == s and where[j] == s + 1}) for s in range(q)]
    out = [sorted({i for i, j, _ in inst.edges if where[i] == s and where[j] > s}) for s in range(q)]
    dep = {h: tuple(y for y in modules[where[h]] if reach[h, y]) for hs in heads for h in hs}
    pre = {t: tuple(x for x in modules[where[t]] if reach[x, t]) for ts in tails + out for t in ts}
    return _Sets([tuple(sorted(m)) for m in modules], heads, tails, out, dep, pre)


def _recursions(sets: _Sets, reach: np.ndarray, lb: Callable[[tuple[int, ...]], float]):
    """The forward ``R(s, Y)`` and backward ``P(s, Y)`` recursions of the module docstring."""
    q = len(sets.module)

    @lru_cache(maxsize=None)
    def fwd(s: int, ys: tuple[int, ...]) -> float:
        value = lb(ys)
        heads = [h for h in (sets.heads[s] if s + 1 < q else []) if reach[list(ys), h].any()]
        if heads:
            later = [fwd(s + 1, sets.dep[h]) for h in heads]
            value = max(value, *later)
            if all(reach[y, heads].any() for y in ys):
                value = max(value, lb(ys) + min(later))
        return value

    @lru_cache(maxsize=None)
    def bwd(s: int, ys: tuple[int, ...]) -> float:
        value = lb(ys)
        tails = [t for t in (sets.tails[s - 1] if s > 0 else []) if reach[t, list(ys)].any()]
        if tails:
            earlier = [bwd(s - 1, sets.pre[t]) for t in tails]
            value = max(value, *earlier)
            if all(reach[tails, y].any() for y in ys):
                value = max(value, lb(ys) + min(earlier))
        return value

    return fwd, bwd


def multichannel_bound(inst: Instance, modules: list[list[int]], time_limit: float = 10.0,
                       seed: int = 0) -> tuple[float, str, str]:
    """``(bound, status, note)``: the best of ``S(1)`` and the cross-cut values (module docstring);
    status ``bound`` when every sub-solve was proven optimal, else ``time_limit`` (still proven)."""
    t0 = now()
    reach = inst.ancestors_closure() | np.eye(inst.n, dtype=bool)  # reach[x, y]: a path x → y
    sets = _sets(inst, modules, reach)
    budget = Budget(time_limit)
    per = budget.share(1, max(1, len(sets.distinct)) - 1)
    memo: dict[tuple[int, ...], tuple[float, bool]] = {}

    def lb(ops: tuple[int, ...]) -> float:  # past the time limit, the sets left get their critical paths
        if ops not in memo:
            memo[ops] = _lower(inst, ops, min(per, budget.left()), seed)
        return memo[ops][0]

    fwd, bwd = _recursions(sets, reach, lb)
    q = len(modules)
    suffix = fwd(q - 1, sets.module[q - 1])  # S(q)
    best = 0.0
    for s in range(q - 2, -1, -1):
        m, later = sets.module[s], [y for ys in sets.module[s + 1:] for y in ys]
        rest = suffix  # S(s+1)
        suffix = max(fwd(s, m), rest)
        outs = sets.out[s]
        if outs and reach[np.ix_(outs, later)].any(axis=0).all():
            suffix = max(suffix, rest + min(lb(sets.pre[t]) for t in outs))  # relative to a(G_s)
            best = max(best, rest + min(bwd(s, sets.pre[t]) for t in outs))  # from time 0
        heads = sets.heads[s]
        if heads and all(reach[x, heads].any() for x in m):
            best = max(best, bwd(s, m) + min(fwd(s + 1, sets.dep[h]) for h in heads))
    best = max(best, suffix)
    proven = all(optimal for _, optimal in memo.values())
    note = f"{q} modules, {len(memo)} sub-solves, {now() - t0:.2f} s"
    return best, ("bound" if proven else "time_limit"), note
