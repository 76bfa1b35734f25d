"""Simple proven lower bounds on the optimal makespan, and the combination of all bounds.

Every value here is a proof, never an incumbent (ARCHITECTURE.md, "Bounds"):

* :func:`critical_path_bound` — the longest path with each op at its fastest allowed time. *Proof:*
  along a path every op starts after its predecessor ends (transfers only add delay), so the makespan
  is at least the sum of the path's durations, each at least the op's fastest time.
* :func:`work_bound` — total work at best speed over the number of devices,
  ``Σ_i min_u t(i,u) / K``. *Proof:* each device computes at most ``C`` seconds in a schedule of
  makespan ``C`` (it runs one op at a time inside ``[0, C]``), so ``K·C ≥ Σ_u busy_u = Σ_i t(i, π(i))
  ≥ Σ_i min_u t(i,u)``.
* :func:`load_lp_bound` — the same argument without the averaging: the LP relaxation of unrelated
  machine scheduling, ``min C`` s.t. ``Σ_u x_iu = 1``, ``Σ_i t(i,u)·x_iu ≤ C`` for every ``u``, memory
  (3.7) ``Σ_i mem_i·x_iu ≤ capacity_u``, ``x ≥ 0`` (any schedule's mapping is a feasible 0/1 point with
  ``C`` = its makespan). It is at least :func:`work_bound` (sum the load rows).
* :func:`load_dual_bound` — its Lagrangian dual: for any device weights ``λ ≥ 0`` with ``Σ_u λ_u = 1``
  and memory prices ``μ ≥ 0`` (0 on a device without a capacity), ``C ≥ Σ_i min_u (λ_u·t(i,u) +
  μ_u·mem_i) − Σ_u μ_u·capacity_u``. *Proof:* ``C ≥ load_u`` on every device and (3.7) makes
  ``Σ_u μ_u·(Σ_{i on u} mem_i − capacity_u) ≤ 0``, so ``C ≥ Σ_u λ_u·load_u + Σ_u μ_u·(Σ_{i on u} mem_i
  − capacity_u) = Σ_i (λ_{π(i)}·t(i,π(i)) + μ_{π(i)}·mem_i) − Σ_u μ_u·capacity_u``, at least the
  minimum over every op's device. Every ``(λ, μ)`` gives a bound (no convergence is needed for it to
  hold); uniform weights and no prices give :func:`work_bound`, the best ones the load LP (LP duality).
  It needs no LP solver and O(n·K) memory, so it runs at every size.
* :func:`heads_tails` — per (op, device) earliest start ``head(i,u)`` and least time from start to
  the end of the schedule ``tail(i,u)`` when ``i`` runs on ``u``, by two dynamic programs over the DAG
  that keep the device (so a pinned op, or a transfer the device choice forces, counts):
  ``head(j,v) = max_{e=(i,j)} min_u [head(i,u) + t(i,u) + delay_e(u,v)]`` (0 for a source) and
  ``tail(i,u) = t(i,u) + max_{e=(i,j)} min_v [delay_e(u,v) + tail(j,v)]`` (``t(i,u)`` for a sink).
  *Proof* (induction along a topological order): in a schedule with ``i`` on ``π(i)``, (3.3) gives
  ``s_j ≥ s_i + t(i,π(i)) + delay_e(π(i),π(j))`` for every edge, and by induction ``s_i ≥ head(i,π(i))``,
  so ``s_j ≥ max_e [head(i,π(i)) + t(i,π(i)) + delay_e(π(i),π(j))] ≥ head(j,π(j))``; symmetrically
  ``C ≥ s_i + tail(i,π(i))`` backwards from the sinks (3.2).
* :func:`device_path_bound` — ``max_i min_u head(i,u) + tail(i,u)``: every op runs on some device.
  At least :func:`critical_path_bound` (``head`` and ``tail`` dominate the fastest-time path sums).
* :func:`device_lead_trail` — Carlier's head-body-tail bound per device: ``lead_u = min_i head(i,u)``
  and ``trail_u = min_i (tail(i,u) − t(i,u))`` over the ops that can run on ``u``. *Proof:* a device
  that runs anything starts its first op ``f`` at ``s_f ≥ head(f,u) ≥ lead_u``, runs one op at a time
  so its last op ``l`` ends at ``e_l ≥ s_f + busy_u``, and ``C ≥ s_l + tail(l,u) = e_l + tail(l,u) −
  t(l,u) ≥ e_l + trail_u``: ``C ≥ lead_u + busy_u + trail_u``. With a module's entry and exit pinned to
  the A100, a GPU that takes a branch pays both transfers; with the exit pinned to the T4, every A100
  op ends at least one A100→T4 transfer before ``C``.
* :func:`carlier_sets` — the same argument over a subset ``J`` of the ops that can run on ``u``:
  ``C ≥ min_J head(i,u) + busy_J + min_J (tail(i,u) − t(i,u))`` when ``u`` runs an op of ``J``. With
  ``J`` the ops whose head (or tail) reaches a threshold it sees a device idle between an early op and
  the rest (an sd segment's A100 runs one pinned receiver at 0, then waits a transfer for everything
  else; the all-ops row starts it at 0).
* :func:`path_lp_bound` — the load LP with per-op end times ``e`` and the precedence of 3.3:
  ``e_i ≥ Σ_u (head(i,u) + t(i,u))·x_iu``, ``C ≥ e_i + Σ_u (tail(i,u) − t(i,u))·x_iu``, ``e_j ≥ e_i +
  Σ_v t(j,v)·x_jv + Σ_v m_ev·y_ev`` for every edge ``e = (i, j)`` with ``y_ev ≥ x_jv − x_iv``, ``y ≥ 0``
  and ``m_ev = min_{u≠v} delay_e(u, v)``, ``C ≥ e_i``, and the load rows with Carlier's idle time,
  ``C ≥ Σ_i t(i,u)·x_iu + (lead_u + trail_u)·w_u`` with ``w_u ≥ x_iu`` for every ``i`` and
  ``w_u ∈ {0, 1}``, and the rows of :func:`carlier_sets` with their own (fractional) ``w_{u,J} ≥ x_iu``
  over ``J`` — the ``w_u`` are the only integer columns, ``K`` of them (:data:`NODE_LIMIT`): with ``w`` fractional
  the LP moves a sliver of many ops to a device and pays the same sliver of its idle time, so a round
  trip that makes offloading useless barely counted. *Proof:* a schedule's 0/1 mapping with ``e`` = its
  end times and ``w_u`` = [``u`` runs anything] satisfies every row: ``j`` on ``v`` ends at least its
  duration after ``i`` ends, plus, when ``i`` is on another device (``y_ev = 1``), at least the cheapest transfer into ``v``; the head, tail and Carlier rows hold by
  :func:`heads_tails` and :func:`device_lead_trail`. It is at least the load LP and the critical path
  (its rows contain theirs); fractional mappings average the heads and tails, so it can be below
  :func:`device_path_bound`, which the floors also take. Measured on six 30-op (entry, exit) modules of
  the 1-channel RWNN stack (CPU + T4 + A100) against their best known schedules: the path LP rose from
  0.665 to 0.796 of it (the old 64-node path MIP: 0.731), the critical path being 0.29 and the device
  path 0.37. With ``w`` binary, on an sd 2-channel stack's module pinned to the A100 at both ends, it
  rose from 0.268 to 0.307 ms against a best known schedule of 0.321 (CP-SAT at 20 s proves 0.257), at
  0.04 s a module (0.01 s fractional); on the whole graph, no end pinned, nothing changes.
"""

from __future__ import annotations

import math
import time

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency.scale import skip_reason
from onnxpart.solvers import SparseModel, solve_highs

#: Branch-and-bound nodes of :func:`path_lp_bound` (its K binary "device used" columns; the 0/1 mapping
#: too with ``integer``): a limit in nodes, not seconds, so the bound reached does not depend on the
#: machine's load. With 3 devices the search ends in a few nodes; the proven dual bound stands at the limit.
NODE_LIMIT = 512
#: Carlier rows per device beyond the all-ops one (:func:`carlier_sets`).
CARLIER_SETS = 2
#: Exponentiated-gradient steps of :func:`load_dual_bound` (a count, not seconds: the same bound on any
#: machine): within 0.7% of the load LP on 60 random instances without memory; 0.3 s on 20,000 ops.
LOAD_DUAL_STEPS = 100
#: Memory-price step scales of :func:`load_dual_bound`, each run: 1 is within 4% of the load LP on 40 small
#: random instances with memory and proves 0.478 s on the 20,000-op random DAG (LP: 0.724, in 42 s); 4 proves
#: 0.609 there but only within 9% on the small ones; 16 and more oscillate. Both: within 6% on 60 small ones.
PRICE_STEPS = (1.0, 4.0)


def _fastest(inst: Instance) -> list[float]:
    """Each op's least time over the devices it can run on (:meth:`Instance.allowed`), all ops at once."""
    return np.where(inst.allowed_mask(), inst.time, math.inf).min(axis=1).tolist()


def heads_tails(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """``(head, tail)``, (n, K) seconds, ``inf`` where the op cannot run (module docstring)."""
    ok = inst.allowed_mask()
    time_ = np.where(ok, inst.time, math.inf)
    head = np.zeros((inst.n, inst.k))
    tail = time_.copy()
    for j in inst.topo:
        for e in inst.in_edges[j]:
            i = inst.edges[e][0]
            head[j] = np.maximum(head[j], ((head[i] + time_[i])[:, None] + inst.delays[e]).min(axis=0))
    for i in reversed(inst.topo):
        for e in inst.out_edges[i]:
            j = inst.edges[e][1]
            tail[i] = np.maximum(tail[i], time_[i] + (inst.delays[e] + tail[j][None, :]).min(axis=1))
    return np.where(ok, head, math.inf), tail


def device_lead_trail(inst: Instance, head: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lead, trail)``, (K,) seconds: ``lead_u = min_i head(i,u)``, before which ``u`` runs nothing,
    and ``trail_u = min_i (tail(i,u) − t(i,u))``, the least time from the end of any op on ``u`` to the
    makespan, over the ops that can run on ``u`` (0 where none can) — Carlier's head-body-tail bound
    ``C ≥ lead_u + busy_u + trail_u`` for a device that runs anything (module docstring)."""
    finite = np.isfinite(head + tail)
    lead = np.where(finite, head, math.inf).min(axis=0)
    trail = np.where(finite, tail - np.where(finite, inst.time, 0.0), math.inf).min(axis=0)
    some = finite.any(axis=0)
    return np.where(some, lead, 0.0), np.where(some, trail, 0.0)


def carlier_sets(inst: Instance, head: np.ndarray, tail: np.ndarray, u: int,
                 ops: list[int]) -> list[tuple[float, list[int]]]:
    """``(idle_J, set J)`` pairs for Carlier's rows on device ``u``, ``C ≥ Σ_{i∈J} t(i,u)·x_iu + idle_J·w``
    with ``idle_J = min_J head(i,u) + min_J (tail(i,u) − t(i,u))``: all of ``ops``, then up to
    :data:`CARLIER_SETS` of the sets of ops whose head, or whose tail, reaches a threshold (those with the
    largest ``idle_J + Σ_J t(i,u)``: the rows that bind hardest when the ops run on ``u``; ties in order
    of threshold, so the choice is deterministic). *Proof* (any ``J``): if ``u`` runs an op of
    ``J`` its first one starts at or after ``min_J head``, the ops of ``J`` on ``u`` run one at a time, and
    ``C`` is at least ``min_J (tail − t)`` after the last one ends."""
    if not ops:
        return []
    ops = np.asarray(ops)
    t = inst.time[ops, u]
    lead, trail = head[ops, u], tail[ops, u] - t
    everything = (float(lead.min() + trail.min()), [int(i) for i in ops])
    values, idles, prefixes = [], [], []  # per threshold: row value with all of J on u, idle_J, J's prefix
    for key in (lead, trail):
        order = np.argsort(-key, kind="stable")  # each threshold's set is a prefix of this order
        idle = np.minimum.accumulate(lead[order]) + np.minimum.accumulate(trail[order])
        busy = np.cumsum(t[order])
        ends = np.flatnonzero(np.diff(key[order]))[::-1]  # last index of each distinct key, bar the smallest
        values.append(idle[ends] + busy[ends])
        idles.append(idle[ends])
        prefixes += [(order, int(end)) for end in ends]
    # the CARLIER_SETS largest values (ties: in the order listed), and only their sets built: listing
    # every threshold's set would take O(n²) time and memory
    best = np.argsort(-np.concatenate(values), kind="stable")[:CARLIER_SETS]
    idle_all = np.concatenate(idles)
    return [everything] + [(float(idle_all[c]), [int(i) for i in ops[prefixes[c][0][:prefixes[c][1] + 1]]])
                           for c in best]


def device_path_bound(inst: Instance) -> LowerBound:
    """``max_i min_u head(i,u) + tail(i,u)`` (module docstring)."""
    t0 = time.perf_counter()
    head, tail = heads_tails(inst)
    value = float((head + tail).min(axis=1).max())
    return LowerBound("device-path", value, "bound", "formula", time.perf_counter() - t0,
                      "longest path with each op's device choice and the transfers it forces (3.3)")


def critical_path_bound(inst: Instance) -> LowerBound:
    """Longest path, each op at its fastest allowed device (module docstring)."""
    t0 = time.perf_counter()
    fast = _fastest(inst)
    finish = [0.0] * inst.n
    for i in inst.topo:
        finish[i] = fast[i] + max((finish[p] for p in inst.preds[i]), default=0.0)
    return LowerBound("critical-path", max(finish), "bound", "formula", time.perf_counter() - t0,
                      "longest path at each op's fastest device; transfers taken as free")


def work_bound(inst: Instance) -> LowerBound:
    """Total work at each op's fastest device over the number of devices (module docstring)."""
    t0 = time.perf_counter()
    return LowerBound("work", sum(_fastest(inst)) / inst.k, "bound", "formula", time.perf_counter() - t0,
                      "Σ fastest op times / number of devices")


def load_dual_bound(inst: Instance, steps: int = LOAD_DUAL_STEPS) -> LowerBound:
    """The load LP's Lagrangian dual (module docstring): from the uniform device weights ``λ`` and no memory
    prices ``μ`` (the :func:`work_bound`), ``steps`` exponentiated-gradient steps on ``λ`` and projected
    gradient steps on ``μ``, once for each memory step scale of :data:`PRICE_STEPS`; the best value met.
    O(n·K) memory and time a step: the load bound at a size where the LP is skipped."""
    t0 = time.perf_counter()
    best = max(_dual_ascent(inst, scale, steps) for scale in PRICE_STEPS)
    return LowerBound("load-dual", best, "bound", "formula", time.perf_counter() - t0,
                      f"max over {steps * len(PRICE_STEPS)} device weightings λ and memory prices μ of "
                      "Σ_i min_u (λ_u·t(i,u) + μ_u·mem_i) − Σ_u μ_u·capacity_u (Σ λ = 1)")


def _dual_ascent(inst: Instance, scale: float, steps: int) -> float:
    """The best value of :func:`load_dual_bound`'s function met in ``steps`` steps, the memory prices moving
    by ``scale`` × (the work bound over all the bytes) × K, over the square root of the step, a step."""
    time_ = np.where(inst.allowed_mask(), inst.time, math.inf)
    capped = np.isfinite(inst.capacity)
    capacity = np.where(capped, inst.capacity, 0.0)
    unit = scale * inst.k * float(np.min(time_, axis=1).sum() / inst.k / max(float(inst.mem.sum()), 1.0))
    weight, price = np.full(inst.k, 1.0 / inst.k), np.zeros(inst.k)
    rows, best = np.arange(inst.n), -math.inf
    for step in range(steps):
        cost = weight[None, :] * time_ + price[None, :] * inst.mem[:, None]  # inf where the op cannot run
        pick = cost.argmin(axis=1)
        best = max(best, float(cost[rows, pick].sum() - price @ capacity))
        load = np.bincount(pick, weights=time_[rows, pick], minlength=inst.k)
        if load.max() <= 0:
            break
        weight = weight * np.exp(load / load.max() / math.sqrt(step + 1))  # towards the busiest devices
        weight /= weight.sum()
        excess = np.where(capped, np.bincount(pick, weights=inst.mem, minlength=inst.k) - capacity, 0.0)
        if np.abs(excess).max() > 0:  # dearer where the memory is over-full, cheaper (≥ 0) where not
            price = np.maximum(0.0, price + unit * excess / np.abs(excess).max() / math.sqrt(step + 1))
    return best


def load_lp_bound(inst: Instance, time_limit: float = 10.0) -> LowerBound:
    """LP relaxation of the per-device load (module docstring), solved by HiGHS."""
    t0 = time.perf_counter()
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    x = [{u: lp.var(0, 1) for u in inst.allowed(i)} for i in range(inst.n)]
    for i in range(inst.n):
        lp.row({col: 1.0 for col in x[i].values()}, 1.0, 1.0)
    for u in range(inst.k):
        lp.row({**{x[i][u]: inst.time[i, u] for i in range(inst.n) if u in x[i]}, c: -1.0}, upper=0.0)
        if math.isfinite(inst.capacity[u]):
            lp.row({x[i][u]: inst.mem[i] for i in range(inst.n) if u in x[i]}, upper=inst.capacity[u])
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else (math.inf if res.status == "infeasible" else None)
    return LowerBound("load-lp", value, res.status, "highs", time.perf_counter() - t0,
                      "LP relaxation: fractional mapping, every device's load ≤ C, memory (3.7)")


def path_lp_bound(inst: Instance, time_limit: float = 10.0, integer: bool = False,
                  relaxed: bool = False) -> LowerBound:
    """The load LP with the precedence rows of constraint 3.3 and the head, tail and Carlier rows added
    (module docstring), by HiGHS; ``integer``: with a 0/1 mapping (a MIP whose proven dual bound is
    read, also at the time limit); ``relaxed``: the device-used columns fractional too (a pure LP, about
    a quarter of the time, a weaker bound)."""
    t0 = time.perf_counter()
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    head, tail = heads_tails(inst)
    has = np.isfinite(head + tail)  # a device with an infinite head or tail is unreachable: no column
    x = np.full((inst.n, inst.k), -1, dtype=np.int64)  # x[i, u]: column of op i on device u, −1 for none
    x[has] = lp.vars(int(has.sum()), 0, 1, integer=integer)
    end = lp.vars(inst.n)
    t = np.where(has, inst.time, 0.0)
    ones = np.ones(inst.n)
    lp.rows(x, np.ones(x.shape), 1.0, 1.0)  # (3.1)
    lp.rows(np.column_stack([end, x]), np.column_stack([ones, np.where(has, -head - t, 0.0)]), lower=0.0)
    lp.rows(np.column_stack([np.full(inst.n, c), end, x]),
            np.column_stack([ones, -ones, np.where(has, t - tail, 0.0)]), lower=0.0)
    for u in range(inst.k):
        sets = carlier_sets(inst, head, tail, u, np.flatnonzero(has[:, u]).tolist())
        for n, (idle, ops) in enumerate(sets):
            used = lp.var(0, 1, integer=n == 0)  # ≥ x_iu over the set: u runs one of them (0/1 for all ops)
            lp.rows(np.column_stack([np.full(len(ops), used), x[ops, u]]), np.tile([1.0, -1.0], (len(ops), 1)),
                    lower=0.0)
            lp.row({**{int(x[i, u]): t[i, u] for i in ops}, used: idle, c: -1.0}, upper=0.0)
        if math.isfinite(inst.capacity[u]):
            lp.row({int(x[i, u]): inst.mem[i] for i in np.flatnonzero(has[:, u])}, upper=inst.capacity[u])
    src, dst = (np.array([e[k] for e in inst.edges], dtype=np.int64) for k in (0, 1))
    moved, into = _moved_columns(lp, inst, x, has, src, dst)
    lp.rows(np.column_stack([end[dst], end[src], x[dst], moved]),
            np.column_stack([np.ones(len(src)), -np.ones(len(src)), -t[dst], -into]), lower=0.0)
    res = solve_highs(lp.highs(relax=relaxed), time_limit, node_limit=NODE_LIMIT)
    value = res.bound if math.isfinite(res.bound) or res.status == "infeasible" else None
    return LowerBound("path-mip" if integer else "path-lp", value, res.status, "highs", time.perf_counter() - t0,
                      f"{'MIP' if integer else 'LP'} relaxation (device-used indicators 0/1): device loads ≤ C, "
                      "precedence with transfers (3.3)")


def _moved_columns(lp: SparseModel, inst: Instance, x: np.ndarray, has: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every edge ``(i, j)`` (``src``, ``dst``) and device ``v`` of ``j`` with a positive least transfer
    into ``v`` from ``i``'s other devices, a column ``moved ≥ x_jv − x_iv`` (``j`` on ``v``, ``i``
    elsewhere) and that least delay; returns the (E, K) columns (−1: none) and delays (0: none). Where
    every other device's transfer is impossible (infinite), ``moved`` is fixed to 0: ``j`` on ``v`` forces
    ``i`` onto ``v``."""
    moved = np.full((len(src), inst.k), -1, dtype=np.int64)
    into = np.zeros((len(src), inst.k))
    for v in range(inst.k):
        others = has[src] & (np.arange(inst.k) != v)
        least = np.where(others, inst.delays[:, :, v], math.inf).min(axis=1, initial=math.inf)
        want = (x[dst, v] >= 0) & others.any(axis=1) & (least > 0)
        rows = np.flatnonzero(want)
        moved[rows, v] = lp.vars(len(rows), upper=np.where(np.isfinite(least[rows]), math.inf, 0.0))
        into[rows, v] = np.where(np.isfinite(least[rows]), least[rows], 0.0)
        lp.rows(np.column_stack([moved[rows, v], x[dst[rows], v], x[src[rows], v]]),
                np.tile([1.0, -1.0, 1.0], (len(rows), 1)), lower=0.0)
    return moved, into


def simple_bounds(inst: Instance, lp: bool = True, time_limit: float = 10.0) -> list[LowerBound]:
    """The closed-form bounds, and the load and path LPs (each within ``time_limit`` seconds) unless
    ``lp`` is False; an LP the graph is too big for in that time is listed ``skipped``
    (:func:`.scale.skip_reason`)."""
    out = [critical_path_bound(inst), device_path_bound(inst), work_bound(inst), load_dual_bound(inst)]
    if lp:
        why = skip_reason("lp", inst.n, time_limit)
        out += ([LowerBound(name, None, "skipped", "highs", 0.0, why) for name in ("load-lp", "path-lp")] if why
                else [load_lp_bound(inst, time_limit), path_lp_bound(inst, time_limit)])
    return out
