"""Exact formulations (latency objective): the thesis MILP on HiGHS and a CP-SAT model of the same
problem. Both take a time limit and an optional warm start (the best heuristic's schedule), and return
an incumbent (re-simulated, see below) and the solver's PROVEN lower bound — never an incumbent.

* :func:`milp` — Section 3.2, constraints (3.1)–(3.8) for one input (``L = 1``: the batch variables
  ``b_{i,u,1}`` equal ``x_{i,u}`` and (3.4)–(3.6) vanish; one start ``s_i`` per op since an op runs
  on one device). The disjunctions (3.8) are written only for pairs that no path orders (transitive
  closure pruning, end of Section 3.2); big-M is the warm start's makespan ``H``, made valid by
  ``C ≤ H`` (the optimum is at most ``H``, so the bound of the restricted model is a bound).
* :func:`cpsat` — optional intervals per (op, device), NoOverlap per device, precedence with the
  transfer delay of the chosen device pair, memory (3.7). Times are integers: every duration and
  delay is rounded DOWN to ticks of ``1/scale`` seconds, which relaxes the problem (``⌊a+b⌋ ≥ ⌊a⌋+⌊b⌋``
  keeps every real schedule feasible after flooring its starts), so ``bound/scale`` is proven.
* Both carry redundant rows that every schedule satisfies (:func:`_heads_tails`,
  :func:`_milp_heads_tails`): device-aware heads and tails of every op and Carlier's lead + busy +
  trail per device (:mod:`.bounds`, with proofs) — they strengthen the relaxations, never cut a schedule.
* Symmetry breaking (Section 5.2): within a class of interchangeable devices (see
  :meth:`Instance.symmetry_classes`) busy time is non-increasing in device index; the hint is
  permuted to satisfy it. Any permutation of a class maps schedules onto schedules, so this keeps an
  optimum.

The solver's start times are turned into a priority order and re-simulated in floating point by
:func:`onnxpart.schedule.latency.simulator.simulate` (which starts no op later), so every returned schedule
has exactly the model's cost semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from time import monotonic as now
from typing import NamedTuple

import highspy
import numpy as np
from ortools.sat.python import cp_model

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.solution import ExactResult, shortest
from onnxpart.schedule.common.ticks import Ticks
from onnxpart.schedule.latency import bounds
from onnxpart.schedule.latency.simulator import Schedule, order_by_start, simulate
from onnxpart.solvers import SparseModel, solve_cpsat, solve_highs


def trivial_horizon(inst: Instance) -> float:
    """An upper bound on the optimal makespan if any mapping is feasible: every op at its slowest
    allowed time, one after the other, each edge at its slowest finite delay."""
    h = sum(max(inst.time[i, u] for u in inst.allowed(i)) for i in range(inst.n))
    for e in range(len(inst.edges)):
        finite = inst.delays[e][np.isfinite(inst.delays[e])]
        h += float(finite.max()) if finite.size else 0.0
    return h


def canonical_hint(inst: Instance, sched: Schedule) -> Schedule:
    """``sched`` with devices permuted within each symmetry class so busy time is non-increasing."""
    mapping = sched.mapping.copy()
    busy = sched.busy(inst.k)
    for cls in inst.symmetry_classes():
        ranked = sorted(cls, key=lambda u: (-busy[u], u))
        for new, old in zip(cls, ranked):
            mapping[sched.mapping == old] = new
    return simulate(inst, mapping, order_by_start(inst, sched.start))


# ----------------------------------------------------------------------------------------- CP-SAT
def cpsat(inst: Instance, time_limit: float, hint: Schedule | None = None, *, seed: int = 0,
          workers: int = 1, symmetry: bool = True, on_bound: Callable[[float], None] | None = None,
          deterministic_time: float | None = None, interleave: bool = False, probing: bool = True) -> ExactResult:
    """Solve the latency problem with CP-SAT; see the module docstring. ``on_bound(seconds)`` hears each
    rise of the proven bound while it runs; ``deterministic_time`` also stops the search after that much
    of CP-SAT's deterministic time (with one worker, the same limit gives the same answer on any
    machine load, unless the wall-clock ``time_limit`` stops it first). ``interleave``: CP-SAT's
    ``interleave_search``, its portfolio of subsolvers (LNS among them) taking turns in one thread,
    still deterministic — on 30-op SPLIT modules with one worker and 0.5 deterministic seconds the
    best schedule's sum fell 7% and the bound/schedule ratio rose from 0.86 to 0.94. ``probing=False``
    skips CP-SAT's probing (``cp_model_probing_level`` 0), which spends about a second on a 50-op model
    before the search starts: for a schedule in little time (on four 41–51-op segments of the benchmark's
    sd 2-channel stack at 1.5 s each, interleaved, the schedules' sum fell 12%, the bounds' 3%)."""
    t0 = now()
    if hint is not None and symmetry:
        hint = canonical_hint(inst, hint)
    ticks = Ticks(hint.makespan if hint is not None else trivial_horizon(inst))
    m, x, s = _cpsat_model(inst, ticks, symmetry)
    if hint is not None:
        for i in range(inst.n):
            for u, var in x[i].items():
                m.add_hint(var, int(hint.mapping[i]) == u)
            m.add_hint(s[i], ticks(hint.start[i]))
    params = {"max_deterministic_time": float(deterministic_time)} if deterministic_time is not None else {}
    params |= {"interleave_search": True} if interleave else {}
    params |= {} if probing else {"cp_model_probing_level": 0}
    res, solver = solve_cpsat(m, max(time_limit - (now() - t0), 0.01), workers=workers, seed=seed,
                              parameters=params, on_bound=(lambda b: on_bound(b / ticks.scale)) if on_bound else None)
    found = None
    if res.has_solution:
        mapping = [next(u for u in x[i] if solver.value(x[i][u])) for i in range(inst.n)]
        found = simulate(inst, mapping, order_by_start(inst, [solver.value(v) for v in s]))
    bound = math.inf if res.status == "infeasible" else res.bound / ticks.scale
    return ExactResult("cpsat", res.status, shortest(found, hint), bound, now() - t0, "cp-sat",
                       f"times floored to 1/{ticks.scale:g} s")


def _cpsat_model(inst: Instance, tick: Ticks, symmetry: bool) -> tuple[cp_model.CpModel, list[dict], list]:
    """The CP-SAT model (module docstring): ``(model, x[i][u] booleans, start variables)``."""
    m = cp_model.CpModel()
    x = [{u: m.new_bool_var(f"x{i}_{u}") for u in inst.allowed(i)} for i in range(inst.n)]
    s = [m.new_int_var(0, tick.top, f"s{i}") for i in range(inst.n)]
    e = [m.new_int_var(0, tick.top, f"e{i}") for i in range(inst.n)]
    makespan = m.new_int_var(0, tick.top, "C")
    # (3.1) each op on exactly one device
    for i in range(inst.n):
        m.add_exactly_one(x[i].values())
    # (3.2) end = start + duration on the chosen device; C ≥ every end
    for i in range(inst.n):
        m.add(e[i] == s[i] + sum(tick(inst.time[i, u]) * x[i][u] for u in x[i]))
        m.add(makespan >= e[i])
    # (3.8) no overlap per device: one optional interval per (op, device)
    for u in range(inst.k):
        m.add_no_overlap([m.new_optional_fixed_size_interval_var(s[i], tick(inst.time[i, u]), x[i][u], f"iv{i}_{u}")
                          for i in range(inst.n) if u in x[i]])
    _cpsat_precedence(m, inst, x, s, e, tick)
    # (3.7) static memory per device
    for u in range(inst.k):
        if math.isfinite(inst.capacity[u]):
            m.add(sum(int(inst.mem[i]) * x[i][u] for i in range(inst.n) if u in x[i]) <= int(inst.capacity[u]))
    busy = [sum(tick(inst.time[i, u]) * x[i][u] for i in range(inst.n) if u in x[i]) for u in range(inst.k)]
    for u in range(inst.k):  # redundant: a device is busy at most C (strengthens the relaxation)
        m.add(makespan >= busy[u])
    _heads_tails(m, inst, x, s, makespan, busy, tick)
    # Section 5.2: busy time non-increasing within each class of identical devices
    if symmetry:
        for cls in inst.symmetry_classes():
            for a, b in zip(cls, cls[1:]):
                m.add(busy[a] >= busy[b])
    m.minimize(makespan)
    return m, x, s


def _cpsat_precedence(m: cp_model.CpModel, inst: Instance, x, s, e, tick: Ticks) -> None:
    """(3.3) precedence with the transfer delay of the chosen pair: ``s_j ≥ e_i + Σ_u delay(u,v)·x_iu`` if
    ``x_jv``; a pair of devices with no route never holds both ends of an edge."""
    for k, (i, j, _) in enumerate(inst.edges):
        m.add(s[j] >= e[i])
        for v in x[j]:
            for u in x[i]:
                if not math.isfinite(inst.delays[k, u, v]):
                    m.add_bool_or([~x[i][u], ~x[j][v]])
            terms = [tick(inst.delays[k, u, v]) * x[i][u] for u in x[i]
                     if u != v and math.isfinite(inst.delays[k, u, v]) and tick(inst.delays[k, u, v]) > 0]
            if terms:
                m.add(s[j] >= e[i] + sum(terms)).only_enforce_if(x[j][v])


def _heads_tails(m: cp_model.CpModel, inst: Instance, x, s, makespan, busy, tick) -> None:
    """Redundant rows from :func:`.bounds.heads_tails` and :func:`.bounds.device_lead_trail`: ``s_i ≥
    Σ_u head(i,u)·x_iu`` and ``C ≥ s_i + Σ_u tail(i,u)·x_iu`` (exactly one ``x_iu`` is 1, and both hold
    for the device ``i`` runs on), ``x_iu = 0`` where ``u`` is unreachable (infinite head or tail), and
    Carlier's ``C ≥ busy_u + (lead_u + trail_u)·used_u`` with ``used_u`` implied by every ``x_iu``.
    Proofs in :mod:`.bounds`; floored to ticks each still holds for the floored schedule (``⌊a⌋ ≥ ⌊b⌋``
    when ``a ≥ b``, ``⌊a+b⌋ ≥ ⌊a⌋+⌊b⌋``, so lead and trail are floored separately). The precedence rows
    (3.3) enforce a transfer only once both ends' devices are fixed, and the LP relaxation spreads an op
    over devices; these see the transfers that a device choice forces along whole paths to a pinned op
    or a sink. Measured on 30-op modules of a 1-channel RWNN stack, one worker, 0.5 deterministic
    seconds: CP-SAT's bound from 0.57 to 0.80 of the best schedule with the head and tail rows, 0.86
    with Carlier's. (Tried and not kept: the same delay per edge enforced by ``x_jv ∧ ¬x_iv`` — no gain;
    ``optimize_with_lb_tree_search`` or ``optimize_with_core`` — worse, 0.73;
    ``use_objective_shaving_search`` — same; ``linearization_level`` 2 — +0.02 at 0.5 s, nothing at the
    small budgets SPLIT's modules get; the caller's floor as the makespan's lower bound — same.)"""
    head, tail = bounds.heads_tails(inst)
    for i in range(inst.n):
        reach = {u: var for u, var in x[i].items() if math.isfinite(head[i, u] + tail[i, u])}
        for u in x[i].keys() - reach.keys():
            m.add(x[i][u] == 0)
        m.add(s[i] >= sum(tick(head[i, u]) * var for u, var in reach.items()))
        m.add(makespan >= s[i] + sum(tick(tail[i, u]) * var for u, var in reach.items()))
    for u, (lead, trail) in enumerate(zip(*bounds.device_lead_trail(inst, head, tail))):
        on_u = [x[i][u] for i in range(inst.n) if u in x[i]]
        if on_u and tick(lead) + tick(trail) > 0:  # Carlier: C ≥ lead + busy + trail if u runs anything
            used = m.new_bool_var(f"used{u}")
            for lit in on_u:
                m.add_implication(lit, used)
            m.add(makespan >= busy[u] + (tick(lead) + tick(trail)) * used)


# ----------------------------------------------------------------------------------------- MILP
def milp(inst: Instance, time_limit: float, hint: Schedule | None = None, *, seed: int = 0,
         symmetry: bool = True, on_bound: Callable[[float], None] | None = None) -> ExactResult:
    """Solve the thesis MILP (3.1)–(3.8) for latency on HiGHS; see the module docstring. Times are
    divided by the horizon ``H`` inside the model (so the big-M is 1) and multiplied back.
    ``on_bound(seconds)`` hears HiGHS' proven dual bound while it runs."""
    t0 = now()
    if hint is not None and symmetry:
        hint = canonical_hint(inst, hint)
    horizon = hint.makespan if hint is not None else trivial_horizon(inst)
    unit = horizon if horizon > 0 else 1.0
    mip, cols = _milp_model(inst, unit, symmetry)
    h = mip.highs()
    if hint is not None:
        _warm_start(h, mip.num_cols, cols, hint, unit)
    res = solve_highs(h, max(time_limit - (now() - t0), 0.01), seed=seed,
                      on_bound=(lambda b: on_bound(b * unit)) if on_bound else None)
    found = None
    if res.has_solution:
        val = res.values
        mapping = [max(range(inst.k), key=lambda u: val[cols.x[i][u]]) for i in range(inst.n)]
        found = simulate(inst, mapping, order_by_start(inst, [val[cols.s[i]] for i in range(inst.n)]))
    bound = res.bound * unit if math.isfinite(res.bound) else (math.inf if res.status == "infeasible" else None)
    return ExactResult("milp", res.status, shortest(found, hint), bound, now() - t0, "highs",
                       f"{len(cols.order)} disjunction pairs after transitive-closure pruning")


class _MilpColumns(NamedTuple):
    """The MILP's columns: ``x[i][u]`` (op on device), ``s[i]`` (start), ``c_max``, the order variable of
    each disjunction pair and Carlier's device-used column by device."""

    x: list[list[int]]
    s: list[int]
    c_max: int
    order: dict[tuple[int, int], int]
    used: dict[int, int]


def _milp_model(inst: Instance, unit: float, symmetry: bool) -> tuple[SparseModel, _MilpColumns]:
    """The thesis MILP (module docstring), times over ``unit``."""
    t = np.where(np.isfinite(inst.time), inst.time / unit, 0.0)
    mip = SparseModel()
    allowed = [set(inst.allowed(i)) for i in range(inst.n)]
    x = [[mip.var(0, 1 if u in allowed[i] else 0, integer=True) for u in range(inst.k)] for i in range(inst.n)]
    s = [mip.var(0, 1) for _ in range(inst.n)]
    c_max = mip.var(0, 1, cost=1.0)  # C ≤ H: the optimum is at most the warm start
    p = [{x[i][u]: t[i, u] for u in allowed[i]} for i in range(inst.n)]  # processing time of op i

    def end_terms(i: int) -> dict[int, float]:
        return {s[i]: 1.0, **p[i]}

    # (3.1) each task on exactly one machine
    for i in range(inst.n):
        mip.row({x[i][u]: 1.0 for u in range(inst.k)}, 1.0, 1.0)
    # (3.2) every task finishes by C
    for i in range(inst.n):
        mip.row({**end_terms(i), c_max: -1.0}, upper=0.0)
    # (3.3) dependency and communication: s_i + p_i + c_uv·(x_iu + x_jv − 1) ≤ s_j
    for k, (i, j, _) in enumerate(inst.edges):
        mip.row([*end_terms(i).items(), (s[j], -1.0)], upper=0.0)
        for u in allowed[i]:
            for v in allowed[j]:
                c = inst.delays[k, u, v] / unit
                if not math.isfinite(c):
                    mip.row({x[i][u]: 1.0, x[j][v]: 1.0}, upper=1.0)
                elif c > 0:
                    mip.row([*end_terms(i).items(), (x[i][u], c), (x[j][v], c), (s[j], -1.0)], upper=c)
    # (3.7) memory of every task mapped to u
    for u in range(inst.k):
        if math.isfinite(inst.capacity[u]):
            mip.row({x[i][u]: inst.mem[i] for i in range(inst.n) if u in allowed[i]}, upper=inst.capacity[u])
    order = _milp_disjunctions(mip, inst, allowed, x, s, end_terms)
    used = _milp_heads_tails(mip, inst, x, s, c_max, t, unit)
    # Section 5.2: busy time non-increasing within each class of identical devices
    if symmetry:
        for cls in inst.symmetry_classes():
            for a, b in zip(cls, cls[1:]):
                mip.row([*((x[i][a], t[i, a]) for i in range(inst.n) if a in allowed[i]),
                         *((x[i][b], -t[i, b]) for i in range(inst.n) if b in allowed[i])], lower=0.0)
    return mip, _MilpColumns(x, s, c_max, order, used)


def _milp_disjunctions(mip: SparseModel, inst: Instance, allowed: list[set[int]], x, s,
                       end_terms: Callable[[int], dict[int, float]]) -> dict[tuple[int, int], int]:
    """(3.8) no overlap on a device, only for pairs no path orders (transitive-closure pruning), big-M = 1;
    returns each pair's order column (1: ``i`` before ``j``)."""
    reach = inst.ancestors_closure()
    order = {}
    for i in range(inst.n):
        for j in range(i + 1, inst.n):
            if reach[i, j] or reach[j, i] or not (allowed[i] & allowed[j]):
                continue
            d = order[(i, j)] = mip.var(0, 1, integer=True)
            for u in allowed[i] & allowed[j]:
                both = [(x[i][u], 1.0), (x[j][u], 1.0)]
                mip.row([*end_terms(i).items(), (s[j], -1.0), (d, 1.0), *both], upper=3.0)
                mip.row([*end_terms(j).items(), (s[i], -1.0), (d, -1.0), *both], upper=2.0)
    return order


def _milp_heads_tails(mip: SparseModel, inst: Instance, x, s, c_max, t: np.ndarray, unit: float) -> dict[int, int]:
    """The redundant rows of :func:`_heads_tails` in the MILP (times over ``unit``): ``s_i ≥ Σ_u
    head(i,u)·x_iu``, ``C ≥ s_i + Σ_u tail(i,u)·x_iu``, ``x_iu = 0`` where ``u`` is unreachable, and
    Carlier's ``C ≥ Σ_i t(i,u)·x_iu + (lead_u + trail_u)·w_u`` with ``w_u ≥ x_iu``
    (:func:`.bounds.device_lead_trail`; every row holds at every schedule, proofs in :mod:`.bounds`).
    Returns the ``w_u`` columns by device."""
    head, tail = bounds.heads_tails(inst)
    for i in range(inst.n):
        reach = [u for u in inst.allowed(i) if math.isfinite(head[i, u] + tail[i, u])]
        for u in set(inst.allowed(i)) - set(reach):
            mip.row({x[i][u]: 1.0}, upper=0.0)
        mip.row({s[i]: 1.0, **{x[i][u]: -head[i, u] / unit for u in reach}}, lower=0.0)
        mip.row({c_max: 1.0, s[i]: -1.0, **{x[i][u]: -tail[i, u] / unit for u in reach}}, lower=0.0)
    used = {}
    for u, idle in enumerate(sum(bounds.device_lead_trail(inst, head, tail))):
        on_u = [x[i][u] for i in range(inst.n) if u in inst.allowed(i)]
        if on_u and idle > 0:
            used[u] = mip.var(0, 1)
            for col in on_u:
                mip.row({used[u]: 1.0, col: -1.0}, lower=0.0)
            mip.row({c_max: 1.0, used[u]: -idle / unit, **{x[i][u]: -t[i, u] for i in range(inst.n)
                                                            if u in inst.allowed(i)}}, lower=0.0)
    return used


def _warm_start(h: highspy.Highs, ncols: int, cols: _MilpColumns, hint: Schedule, unit: float) -> None:
    values = np.zeros(ncols)
    for i, row in enumerate(cols.x):
        values[row[int(hint.mapping[i])]] = 1.0
        values[cols.s[i]] = hint.start[i] / unit
    values[cols.c_max] = min(1.0, hint.makespan / unit)
    for u, col in cols.used.items():
        values[col] = float(u in hint.mapping)
    for (i, j), col in cols.order.items():
        values[col] = 1.0 if (hint.start[i], i) <= (hint.start[j], j) else 0.0
    sol = highspy.HighsSolution()
    sol.col_value = values.tolist()
    sol.value_valid = True
    h.setSolution(sol)
