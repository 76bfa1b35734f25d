"""The exact model of the throughput objective: the thesis MILP's batch model on CP-SAT.

``b_{i,u,l}`` booleans (at most one size per op and device, 3.5), ``Σ_u Σ_l l·b_{i,u,l} = L`` (3.4),
slice ranges ``lo_{i,u} = Σ_{w<u} n_{i,w}`` (slices contiguous in device order), overlap counts ``c =
max(0, min(hi) − max(lo))`` gating the per-input precedence with transfers (3.3), optional intervals
with NoOverlap per device (3.8), memory (3.7). Times are floored to ticks (:mod:`onnxpart.schedule.common.ticks`: a
relaxation, so the bound on the batch makespan ``C`` is proven); the solver's splits and slice order are
re-simulated (:func:`.simulator.simulate`), so every returned schedule has the model's exact semantics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from time import monotonic as now
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.solution import ExactResult, shortest
from onnxpart.schedule.common.ticks import Ticks
from onnxpart.schedule.throughput.model import Split, memory_violations, op_families, size_patterns
from onnxpart.schedule.throughput.simulator import BatchSchedule, order_by_start, simulate
from onnxpart.solvers import solve_cpsat


def _line(inst: Instance, e: int, u: int, v: int, batch: int) -> tuple[float, float] | None:
    """``(a, r)`` with ``a + r·c ≤ delay(c)`` for ``1 ≤ c ≤ batch`` (exact for a direct link: the delay
    is ``latency + c·bytes/bandwidth``; a route is a min of such lines, concave, above its chord)."""
    d1 = inst.delay_count(e, u, v, 1)
    if not math.isfinite(d1):
        return None
    if batch == 1:
        return d1, 0.0
    dl = inst.delay_count(e, u, v, batch)
    r = (dl - d1) / (batch - 1)
    return d1 - r, r


def cpsat(inst: Instance, batch: int, time_limit: float, hint: BatchSchedule | None = None, *, seed: int = 0,
          workers: int = 1, deterministic_time: float | None = None,
          pinned: dict[int, Split] | None = None) -> ExactResult:
    """The thesis MILP's batch model on CP-SAT (module docstring). Durations and delays are floored to
    ticks (a relaxation: the bound is proven); the solution is re-simulated. The sizes are all of
    :func:`.model.op_sizes`, not the heuristics' candidate splits, so the bound holds on any system.
    ``pinned`` (op → split) fixes those ops' splits; a hint that disagrees with a pin is not used."""
    t0 = now()
    deadline = t0 + time_limit
    op_families(inst, batch)  # UserError where an op has no split
    patterns, which = size_patterns(inst, batch)
    sizes = [{u: list(bs) for u, bs in enumerate(patterns[w])} for w in which.tolist()]
    for i, sp in (pinned or {}).items():
        sizes[i] = {u: [x] if x > 0 else [] for u, x in enumerate(sp)}
    if hint is not None and any(tuple(hint.splits[i]) != tuple(sp) for i, sp in (pinned or {}).items()):
        hint = None
    tick = Ticks(hint.makespan if hint is not None else _horizon(inst, batch))
    v = _model(inst, batch, sizes, tick, deadline)
    if v is None or not _slice_precedence(v, inst, batch, tick, deadline):
        return ExactResult("cpsat", "time_limit", hint, None, now() - t0, "cp-sat",
                           f"the model ({inst.k} devices) was not built within the time limit")
    v.m.minimize(v.cmax)
    if hint is not None:
        _add_hint(v, inst, hint, tick, deadline)
    res, solver = solve_cpsat(v.m, max(time_limit - (now() - t0), 0.01), workers=workers, seed=seed,
                              parameters={"max_deterministic_time": deterministic_time} if deterministic_time else None)
    found = _resimulated(inst, solver, v.n, v.st) if res.has_solution else None
    bound = math.inf if res.status == "infeasible" else res.bound / tick.scale
    return ExactResult("cpsat", res.status, shortest(found, hint), bound, now() - t0, "cp-sat",
                       f"times floored to 1/{tick.scale:g} s")


def _horizon(inst: Instance, batch: int) -> float:
    """A makespan no optimum passes without a hint: twice every op's slowest slice at any size up to
    ``batch`` (a measured curve may fall with the size), summed, plus a second."""
    allowed, slowest = inst.allowed_mask(), np.full(inst.n, -math.inf)
    for u, sizes in enumerate(inst.batch_sizes):
        for b in sorted({batch, *sizes}):
            if b <= batch:
                slowest = np.maximum(slowest, np.where(allowed[:, u], inst.batch_times(u, b), -math.inf))
    return sum(slowest.tolist()) * 2 + 1.0  # summed in op order


def _add_hint(v: "_Variables", inst: Instance, hint: BatchSchedule, tick: Ticks, deadline: float) -> None:
    """The hint's splits and starts as CP-SAT hints, op by op until ``deadline`` (a partial hint is still
    one: what is left of the time goes to the solve)."""
    for i in range(inst.n):
        if now() > deadline:
            return
        for u in range(inst.k):
            for size, var in v.b[i][u].items():
                v.m.add_hint(var, hint.splits[i][u] == size)
            if (i, u) in hint.start:
                v.m.add_hint(v.st[i][u], tick(hint.start[(i, u)]))


@dataclass
class _Variables:
    """The model and its variables per op ``i`` and device ``u``: ``b[i][u][l]`` (size ``l`` chosen),
    ``n`` (slice size), ``lo`` (first input), ``st``/``en`` (slice start and end), and ``cmax``."""

    m: cp_model.CpModel
    b: list
    n: list
    lo: list
    st: list
    en: list
    cmax: Any


def _model(inst: Instance, batch: int, sizes: list[dict[int, list[int]]], tick: Ticks,
           deadline: float = math.inf) -> _Variables | None:
    """The variables and every constraint family but the precedence (:func:`_slice_precedence`); None when
    the clock passes ``deadline`` first (checked op by op: 20,000 ops took 9 s to build)."""
    m = cp_model.CpModel()
    families = []
    for make in (lambda i: {u: {l: m.new_bool_var(f"b{i}_{u}_{l}") for l in sizes[i][u]} for u in range(inst.k)},
                 lambda i: [m.new_int_var(0, batch, f"n{i}_{u}") for u in range(inst.k)],
                 lambda i: [m.new_bool_var(f"p{i}_{u}") for u in range(inst.k)],
                 lambda i: [m.new_int_var(0, batch, f"lo{i}_{u}") for u in range(inst.k)],
                 lambda i: [m.new_int_var(0, tick.top, f"s{i}_{u}") for u in range(inst.k)],
                 lambda i: [m.new_int_var(0, tick.top, f"e{i}_{u}") for u in range(inst.k)]):
        family = []  # one family of variables for every op, in the order the solver has always seen them
        for i in range(inst.n):
            if now() > deadline:
                return None
            family.append(make(i))
        families.append(family)
    b, n, p, lo, st, en = families
    v = _Variables(m, b, n, lo, st, en, m.new_int_var(0, tick.top, "C"))
    return v if _op_constraints(v, p, inst, batch, tick, deadline) else None


def _op_constraints(v: _Variables, p: list, inst: Instance, batch: int, tick: Ticks, deadline: float) -> bool:
    """(3.4), (3.5), the slices' ranges and durations, (3.8) and (3.7) on the variables of :func:`_model`
    (``p[i][u]``: op ``i`` has a slice on ``u``); False when the clock passes ``deadline`` first."""
    m, b, n, lo, st, en = v.m, v.b, v.n, v.lo, v.st, v.en
    ivs: list[list] = [[] for _ in range(inst.k)]
    for i in range(inst.n):
        if now() > deadline:
            return False
        for u in range(inst.k):
            bs = list(b[i][u].values())
            m.add(sum(bs) <= 1)  # (3.5) one batch size per op and device
            m.add(p[i][u] == sum(bs))
            m.add(n[i][u] == sum(l * x for l, x in b[i][u].items()))
            m.add(lo[i][u] == sum(n[i][w] for w in range(u)))  # slices contiguous in device order
            dur = m.new_int_var(0, tick.top, f"d{i}_{u}")
            m.add(dur == sum(tick(inst.time_batch(i, u, l)) * x for l, x in b[i][u].items()))
            m.add(en[i][u] == st[i][u] + dur)
            m.add(v.cmax >= en[i][u]).only_enforce_if(p[i][u])
            ivs[u].append(m.new_optional_interval_var(st[i][u], dur, en[i][u], p[i][u], f"iv{i}_{u}"))
        m.add(sum(n[i]) == batch)  # (3.4)
    for u in range(inst.k):
        m.add_no_overlap(ivs[u])  # (3.8)
        if math.isfinite(inst.capacity[u]):  # (3.7)
            m.add(sum(math.floor(inst.mem[i] - inst.act_mem[i]) * p[i][u] + math.floor(inst.act_mem[i]) * n[i][u]
                      for i in range(inst.n)) <= math.floor(inst.capacity[u]))
    return True


def _slice_precedence(model: _Variables, inst: Instance, batch: int, tick: Ticks, deadline: float) -> bool:
    """(3.3) per edge and device pair: when the slices [lo, lo + n) of producer and consumer share ``c ≥ 1``
    inputs, the consumer starts after the producer ends plus the transfer of those c inputs (none on one
    device); a pair with no link never shares inputs. False when the clock passes ``deadline`` first
    (``K²`` pairs per edge: 24 devices make 576)."""
    m, b, n, lo, st, en = model.m, model.b, model.n, model.lo, model.st, model.en
    for e, (i, j, _) in enumerate(inst.edges):
        if now() > deadline:
            return False
        for u in range(inst.k):
            if not b[i][u]:
                continue
            for v in range(inst.k):
                if not b[j][v]:
                    continue
                hi_min = m.new_int_var(0, batch, "")
                lo_max = m.new_int_var(0, batch, "")
                m.add_min_equality(hi_min, [lo[i][u] + n[i][u], lo[j][v] + n[j][v]])
                m.add_max_equality(lo_max, [lo[i][u], lo[j][v]])
                c = m.new_int_var(0, batch, f"c{e}_{u}_{v}")
                m.add_max_equality(c, [hi_min - lo_max, 0])
                share = m.new_bool_var("")
                m.add(c >= 1).only_enforce_if(share)
                m.add(c == 0).only_enforce_if(~share)
                line = _line(inst, e, u, v, batch) if u != v else (0.0, 0.0)
                if line is None:
                    m.add(share == 0)
                    continue
                a, r = line
                m.add(st[j][v] >= en[i][u] + tick(a) + tick(r) * c).only_enforce_if(share)
                m.add(st[j][v] >= en[i][u]).only_enforce_if(share)
    return True


def _resimulated(inst: Instance, solver, n, st) -> BatchSchedule | None:
    """The solver's splits and slice order, re-simulated; None when they break memory or links (byte counts
    are floored in the model, a relaxation: only valid answers are kept)."""
    splits = [tuple(solver.value(n[i][u]) for u in range(inst.k)) for i in range(inst.n)]
    starts = {(i, u): solver.value(st[i][u]) for i in range(inst.n) for u in range(inst.k) if splits[i][u] > 0}
    found = simulate(inst, splits, order_by_start(inst, splits, starts))
    if memory_violations(inst, splits) or not math.isfinite(found.makespan):
        return None
    return found
