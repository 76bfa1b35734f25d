"""Moccasin: rematerialization as retention intervals in CP-SAT (Bartan et al., "Moccasin: Efficient
Tensor Rematerialization for Neural Networks", ICML 2023, §2.1–2.4).

Every node ``v`` gets ``C_v`` optional copies; copy ``i`` is a compute event ``s_v^i`` (its start) with a
presence literal ``a_v^i`` (Eq. 7: the first copy is always present), and every output tensor ``x`` of the
copy is retained on ``[s_v^i, e_x^i)`` (CP-SAT's end is exclusive: the paper's last retained event is
``e - 1``). Constraints, in the paper's numbering:

* Eq. 2–3: ``s < e``; the copies of a node are ordered and do not overlap (``e^i ≤ s^{i+1}``).
* Eq. 4: ``AddCumulative`` over all retention intervals, demand = tensor size, capacity = the budget.
* Eq. 5, two encodings with the same solutions. ``precedence="reservoir"`` is the paper's Eq. 10: one
  ``AddReservoirConstraintWithActive`` per (tensor, consumer): +1 at each producer copy's start, −1 at its
  end, −1 at each consumer copy's start and +1 one event later; the level may not go below 0, so a copy
  of every input is retained at each compute event of the consumer. ``precedence="literals"`` (default)
  states Eq. 5 directly with a *serving copy* literal ``b`` per (consumer copy, producer copy):
  ``b → a_u^j ∧ s_u^j < s_v^i < e_x^j`` and ``a_v^i → OR_j b``. CP-SAT expands each reservoir into
  pairwise precedence literals; the direct form is smaller and, on the paper's G2 (n = 250, 90%), proves
  the optimum within 60 s where the reservoir form stays above +7% TDI.
* Fixed input order (§2.3, the default): stage ``j`` has ``j`` events; the node at position ``p`` may only
  be computed at event ``p`` of a stage ``j ≥ p`` (time ``j(j−1)/2 + p``, Eq. 11), and its first copy is
  the last event of stage ``p``. Free order (§2.1): starts take values in ``1..ΣC_v`` (Eq. 9) and are
  all different (Eq. 6).
* Two phases (§2.4): phase 1 minimizes ``max(M_var, M)`` (Eq. 12–13; modeled as ``M_var ≥ M``) from the
  trivial no-recompute solution, phase 2 minimizes the recomputed duration (Eq. 1; the first copies are a
  constant) with the budget as the cumulative capacity, warm-started from phase 1.

Graph inputs are zero-duration input nodes placed first (see :mod:`onnxpart.remat.model`); producers of
graph outputs have ``C_v = 1`` and retain their outputs to the horizon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from onnxpart.board import Progress as ProgressRecord
from onnxpart.remat.background import MAX_NODES, BackgroundLpBound
from onnxpart.remat.bounds import event_cover_entry
from onnxpart.remat.heuristics import greedy_sequence
from onnxpart.remat.model import Instance, MethodResult, Scale, scale
from onnxpart.remat.sequence import baseline
from onnxpart.solvers import SolveResult, solve_cpsat

log = logging.getLogger(__name__)

#: CP-SAT's presolve loops spend seconds of wall time on the large time domains of the stage grid
#: (G2, n = 250: 18 s before the search starts); one loop without probing keeps what matters.
_PRESOLVE = {"max_presolve_iterations": 1, "cp_model_probing_level": 0}

#: progress(record): record.phase is "phase1" (upper/lower in bytes) or "phase2" (duration).
Progress = Callable[[ProgressRecord], None]


@dataclass(frozen=True)
class MoccasinOptions:
    max_copies: int = 2  # C_v: how many times an op may be computed (2 = at most one recomputation)
    order: str = "fixed"  # "fixed" (§2.3, the input order's stages) or "free" (§2.1)
    time_limit: float = 60.0  # seconds for both phases together
    workers: int = 2
    seed: int = 0
    deterministic: bool = False  # interleaved search and a deterministic time limit (reproducible runs)
    precedence: str = "literals"  # "reservoir" (Eq. 10) or "literals" (Eq. 5 with a serving-copy literal)
    lp_bound: bool = True  # fixed order: also solve the Checkmate LP relaxation beside CP-SAT (a proven bound)
    #: a solution known to fit the budget, from :func:`smallest_peak` on the same instance and options
    #: (``--budget min``): phase 2's warm start and fallback, so phase 1 is not run again
    start: "Reached | None" = None


def restriction(options: MoccasinOptions) -> str:
    where = "the input topological order's stages (§2.3)" if options.order == "fixed" else "any order (§2.1)"
    return f"C_v ≤ {options.max_copies} computations per op, {where}"


@dataclass
class _Vars:
    starts: list[list]  # per node, per copy: int var or int
    actives: list[list]  # per node, per copy: bool var
    ends: dict[tuple[int, int], object]  # (value, copy) -> int var
    lengths: dict[tuple[int, int], object]  # (value, copy) -> the retention interval's size var
    serving: dict[tuple[int, int, int, int], object]  # (value, consumer, consumer copy, producer copy) -> b
    peak: object | None  # phase 1's M_var


def _grid(instance: Instance, options: MoccasinOptions) -> tuple[list[list[int]], int, list[int]]:
    """Allowed start times per node (copy 0 first), the horizon (exclusive end), and copies per node."""
    n = instance.n_nodes
    position = {v: p + 1 for p, v in enumerate(instance.order)}
    copies = [1] * n
    allowed: list[list[int]] = [[] for _ in range(n)]
    if options.order == "fixed":
        for v in range(n):
            p = position[v]
            allowed[v] = [j * (j - 1) // 2 + p for j in range(p, n + 1)]  # Eq. 11
            copies[v] = min(options.max_copies, len(allowed[v])) if instance.recomputable(v) else 1
        return allowed, n * (n + 1) // 2 + 1, copies
    for v in range(n):
        copies[v] = options.max_copies if instance.recomputable(v) else 1
    slots = sum(copies)  # Eq. 9
    k = len(instance.input_nodes)
    for v in range(n):
        allowed[v] = [position[v]] if v >= instance.n_ops else list(range(k + 1, slots + 1))
    return allowed, slots + 1, copies


def _build(instance: Instance, sc: Scale, options: MoccasinOptions, capacity: int | None,
           floor: int, ceiling: int) -> tuple[cp_model.CpModel, _Vars]:
    """The CP model. ``capacity`` None: phase 1 (``M_var`` in ``[floor, ceiling]`` is the capacity and the
    objective); else phase 2 with that capacity and the duration objective. CP-SAT's search depends on
    the order in which variables and constraints are created: the helpers run in a fixed order."""
    model = cp_model.CpModel()
    allowed, horizon, copies = _grid(instance, options)
    starts, actives = _compute_events(model, options, allowed, copies)
    variables = _Vars(starts, actives, {}, {}, {}, None)
    latest_use = _latest_use(instance, options, allowed, horizon)
    intervals, demands = _retention(model, instance, sc, variables, allowed, horizon, copies, latest_use)
    variables.peak = _memory(model, sc, variables, intervals, demands, copies, capacity, floor, ceiling)
    _inputs_retained(model, instance, options.precedence, variables, copies)
    return model, variables


def _compute_events(model: cp_model.CpModel, options: MoccasinOptions, allowed: list[list[int]],
                    copies: list[int]) -> tuple[list[list], list[list]]:
    """The start ``s_v^i`` and presence literal ``a_v^i`` of every copy of every node, on the grid's
    allowed times (Eq. 9, 11), the first copy present (Eq. 7), the copies in order and, in free order,
    all starts different (Eq. 6)."""
    starts: list[list] = []
    actives: list[list] = []
    for v in range(len(copies)):
        s_v, a_v = [], []
        for i in range(copies[v]):
            a = model.new_bool_var(f"a_{v}_{i}")
            if i == 0:
                model.add(a == 1)  # Eq. 7
            values = allowed[v] if options.order == "free" or i == 0 else allowed[v][1:]
            values = values[:1] if options.order == "fixed" and i == 0 else values
            s = model.new_int_var_from_domain(cp_model.Domain.from_values(values), f"s_{v}_{i}")
            if i > 0:
                model.add_implication(a, a_v[i - 1])
                if options.order == "free":
                    model.add(s >= s_v[i - 1] + 1)  # copies in order (symmetry breaking)
                else:
                    model.add(s >= s_v[i - 1] + 1).only_enforce_if(a)
                    model.add(s == allowed[v][i]).only_enforce_if(~a)  # an absent copy sits still
            s_v.append(s)
            a_v.append(a)
        starts.append(s_v)
        actives.append(a_v)
    if options.order == "free":
        model.add_all_different([s for s_v in starts for s in s_v])  # Eq. 6
    return starts, actives


def _latest_use(instance: Instance, options: MoccasinOptions, allowed: list[list[int]],
                horizon: int) -> list[int]:
    """Per value, an exclusive upper bound of its retention end: one past its consumers' last allowed
    time (fixed order), else the horizon."""
    latest_use: list[int] = []
    for x in range(len(instance.value_sizes)):
        consumers = instance.value_consumers[x]
        latest_use.append(horizon if instance.value_to_end[x] or options.order == "free"
                          else max((allowed[c][-1] + 1 for c in consumers), default=0))
    return latest_use


def _retention(model: cp_model.CpModel, instance: Instance, sc: Scale, variables: _Vars,
               allowed: list[list[int]], horizon: int, copies: list[int], latest_use: list[int]
               ) -> tuple[list, list[int]]:
    """The retention interval ``[s_v^i, e_x^i)`` of every output of every copy (Eq. 2–3; its end and
    length go to ``variables``) and each copy's one-event interval of internal memory, with their
    demands in memory units."""
    intervals, demands = [], []
    ends, lengths = variables.ends, variables.lengths
    for v in range(len(copies)):
        for i in range(copies[v]):
            s, a = variables.starts[v][i], variables.actives[v][i]
            for x in instance.node_outputs[v]:
                lo = min(allowed[v]) + 1
                if instance.value_to_end[x]:
                    e = model.new_constant(horizon)
                elif not instance.value_consumers[x]:
                    e = model.new_int_var(lo, horizon, f"e_{x}_{i}")
                    model.add(e == s + 1)
                else:
                    e = model.new_int_var(lo, max(lo, latest_use[x]), f"e_{x}_{i}")
                    model.add(e == s + 1).only_enforce_if(~a)
                size = model.new_int_var(1, horizon, f"d_{x}_{i}")
                intervals.append(model.new_optional_interval_var(s, size, e, a, f"r_{x}_{i}"))
                demands.append(sc.sizes[x])
                ends[(x, i)] = e
                lengths[(x, i)] = size
                if i > 0:
                    model.add(ends[(x, i - 1)] <= s).only_enforce_if(a)  # Eq. 3
            if sc.internal[v]:
                intervals.append(model.new_optional_fixed_size_interval_var(s, 1, a, f"w_{v}_{i}"))
                demands.append(sc.internal[v])
    return intervals, demands


def _memory(model: cp_model.CpModel, sc: Scale, variables: _Vars, intervals: list, demands: list[int],
            copies: list[int], capacity: int | None, floor: int, ceiling: int) -> object | None:
    """The memory constraint and the objective of the phase; returns phase 1's ``M_var`` (None in
    phase 2)."""
    # Eq. 4 (phase 2) / Eq. 13 (phase 1): memory at every event within the capacity.
    peak = None
    if capacity is None:
        peak = model.new_int_var(floor, max(floor, ceiling), "M_var")
        model.add_cumulative(intervals, demands, peak)
        model.minimize(peak)  # Eq. 12: max(M_var, M) with M_var ≥ M
    else:
        model.add_cumulative(intervals, demands, capacity)
        model.minimize(sum(sc.weights[v] * variables.actives[v][i]
                           for v in range(len(copies)) for i in range(1, copies[v])))  # Eq. 1 less the constant
    return peak


def _inputs_retained(model: cp_model.CpModel, instance: Instance, precedence: str, variables: _Vars,
                     copies: list[int]) -> None:
    """Eq. 5 for every (tensor, consumer), in the ``precedence`` encoding: the paper's reservoir (Eq. 10)
    or a serving-copy literal per (consumer copy, producer copy), which go to ``variables.serving``."""
    starts, actives, ends = variables.starts, variables.actives, variables.ends
    # Eq. 5: a copy of each input is retained at every compute event of its consumer.
    for x in range(len(instance.value_sizes)):
        u = instance.value_producer[x]
        for v in instance.value_consumers[x]:
            if precedence == "reservoir":  # Eq. 10, the paper's encoding
                times, changes, lits = [], [], []
                for j in range(copies[u]):
                    times += [starts[u][j], ends[(x, j)]]
                    changes += [1, -1]
                    lits += [actives[u][j], actives[u][j]]
                for i in range(copies[v]):
                    times += [starts[v][i], starts[v][i] + 1]
                    changes += [-1, 1]
                    lits += [actives[v][i], actives[v][i]]
                model.add_reservoir_constraint_with_active(times, changes, lits, 0, copies[u] + copies[v])
                continue
            for i in range(copies[v]):  # Eq. 5 with an explicit serving copy: b -> s_u^j < s_v^i < e_x^j
                serving = []
                for j in range(copies[u]):
                    b = model.new_bool_var(f"b_{x}_{v}_{i}_{j}")
                    model.add_implication(b, actives[u][j])
                    model.add(starts[u][j] < starts[v][i]).only_enforce_if(b)
                    model.add(ends[(x, j)] > starts[v][i]).only_enforce_if(b)
                    serving.append(b)
                    variables.serving[(x, v, i, j)] = b
                model.add_bool_or(serving).only_enforce_if(actives[v][i])


def _times_of(instance: Instance, options: MoccasinOptions, sequence: list[tuple[int, int]]) -> dict:
    """Start times of the copies in a no-recompute sequence of (node, copy) pairs, placed on the grid."""
    allowed, _, copies = _grid(instance, options)
    times = {}
    if options.order == "fixed":
        for v in range(instance.n_nodes):
            for i in range(copies[v]):
                times[(v, i)] = allowed[v][i]
        return times
    slot = 1
    for v, i in sequence:
        times[(v, i)] = slot
        slot += 1
    for v in range(instance.n_nodes):  # absent copies take the leftover slots, in order
        for i in range(copies[v]):
            if (v, i) not in times:
                times[(v, i)] = slot
                slot += 1
    return times


def _hint(model: cp_model.CpModel, instance: Instance, variables: _Vars, times: dict, active: set,
          horizon: int) -> None:
    """Hint a complete assignment: start times, presence, the tightest retention ends and their lengths,
    and the serving copy of every input of every present copy (the copy live at its start)."""
    end: dict[tuple[int, int], int] = {}
    live: dict[int, tuple[int, int]] = {}
    served: set[tuple[int, int, int, int]] = set()
    for t, v, i in sorted((times[key], *key) for key in active):
        for x in instance.node_inputs[v]:
            end[live[x]] = max(end[live[x]], t + 1)
            served.add((x, v, i, live[x][1]))
        for x in instance.node_outputs[v]:
            live[x] = (x, i)
            end[(x, i)] = t + 1
    for (x, i), e in variables.ends.items():
        s = times[(instance.value_producer[x], i)]
        value = horizon if instance.value_to_end[x] else end.get((x, i), s + 1)
        if not instance.value_to_end[x]:
            model.add_hint(e, value)  # the horizon constant is shared, not hinted
        model.add_hint(variables.lengths[(x, i)], value - s)
    for key, b in variables.serving.items():
        model.add_hint(b, key in served)
    for v, s_v in enumerate(variables.starts):
        for i, s in enumerate(s_v):
            model.add_hint(s, times[(v, i)])
            model.add_hint(variables.actives[v][i], (v, i) in active)


def _greedy_times(instance: Instance, options: MoccasinOptions, events: list) -> tuple[dict, set]:
    """Start times and present copies of a greedy sequence (:mod:`.heuristics`): stage ``j`` (1-based)
    computes position ``p`` at ``j(j−1)/2 + p`` (Eq. 11); free order: consecutive slots (Eq. 9). Absent
    copies sit where the model puts them."""
    allowed, _, copies = _grid(instance, options)
    active = {(e.node, e.copy) for e in events}
    times = {(v, i): allowed[v][i] if options.order == "fixed" else None
             for v in range(instance.n_nodes) for i in range(copies[v])}
    if options.order == "fixed":
        position = {v: p + 1 for p, v in enumerate(instance.order)}
        for e in events:
            times[(e.node, e.copy)] = (e.stage + 1) * e.stage // 2 + position[e.node]
        return times, active
    return _times_of(instance, options, [(e.node, e.copy) for e in events]), active


def _solution(solver: cp_model.CpSolver, variables: _Vars) -> tuple[dict, set]:
    times, active = {}, set()
    for v, s_v in enumerate(variables.starts):
        for i, s in enumerate(s_v):
            times[(v, i)] = solver.value(s)
            if solver.boolean_value(variables.actives[v][i]):
                active.add((v, i))
    return times, active


def _sequence(instance: Instance, times: dict, active: set) -> tuple[int, ...]:
    return tuple(v for _, v in sorted((times[(v, i)], v) for v, i in active) if v < instance.n_ops)


@dataclass
class _Run:
    """One call of :func:`solve_moccasin`: what its warm start and both phases share."""

    instance: Instance
    budget: float
    options: MoccasinOptions
    progress: Progress | None
    sc: Scale
    capacity: int  # the budget in memory units (less the constant bytes)
    horizon: int
    params: dict  # CP-SAT's parameters (:func:`_parameters`)
    wall: float  # seconds for both phases together
    start: float  # time.perf_counter() at the start
    notes: dict
    lp: BackgroundLpBound | None = None  # the Checkmate LP relaxation, a second proven bound for the fixed order

    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        """Seconds left for the next phase (at least half a second)."""
        return max(self.wall - (time.perf_counter() - self.start), 0.5)

    def to_bytes(self, units: float) -> float:
        """Memory units -> bytes (the constant bytes included)."""
        return units * self.sc.memory_unit + self.instance.constant_bytes

    def to_duration(self, q: float) -> float:
        """Phase 2's objective (quanta of recomputed duration) -> the sequence's duration."""
        return self.instance.base_duration + q * self.sc.quantum


@dataclass(frozen=True)
class Reached:
    """What phase 1 reached on its own (:func:`smallest_peak`): the smallest peak found and CP-SAT's proven
    bound on it (bytes), whether that bound meets the peak, and the solution (start times, present copies)."""

    peak: float
    proven: float | None
    optimal: bool
    times: dict
    active: frozenset


def solve_moccasin(instance: Instance, budget: float, options: MoccasinOptions,
                   progress: Progress | None = None) -> MethodResult:
    """Both phases (§2.4). Returns the best sequence found, or none with the phase-1 evidence in
    ``notes`` (``reachable_budget``: the smallest peak found; ``proven_min_budget``: CP-SAT's bound on it).
    Where the greedy warm start does not fit the budget, ``options.start`` (a solution that does) stands in
    for phase 1."""
    run, base_units = _new_run(instance, budget, options, progress)
    times, active, hint_units, fits = _warm_start(run, base_units)
    if fits is None and options.start is not None:
        fits = (options.start.times, set(options.start.active))
    if fits is not None:
        times, active = fits
    elif hint_units > run.capacity:  # phase 1 (Eq. 12–13): reach the budget from the warm start
        result, solver, variables = _phase1(run, times, active, hint_units)
        if result.objective is None or result.objective > run.capacity + 1e-9:
            return _unreached(run, result, hint_units)
        times, active = _solution(solver, variables)
    log.info("moccasin phase 1 done in %.1f s", run.elapsed())
    return _phase2(run, times, active, fits)


def smallest_peak(instance: Instance, floor: float, options: MoccasinOptions) -> Reached:
    """Phase 1 alone (Eq. 12–13), from the greedy warm start down towards ``floor`` bytes: the smallest
    peak it reaches within the time limit, with the solution that reaches it (``--budget min``)."""
    run, base_units = _new_run(instance, floor, options, None)
    times, active, units, _ = _warm_start(run, base_units)
    proven = None
    if units > run.capacity:
        result, solver, variables = _phase1(run, times, active, units)
        if result.has_solution and result.objective < units:
            times, active = _solution(solver, variables)
            units = int(round(result.objective))
        proven = run.notes["phase1"]["bound"]
    peak = run.to_bytes(units)
    return Reached(peak, proven, units <= run.capacity or (proven is not None and proven >= peak - 1e-9),
                   times, frozenset(active))


def _new_run(instance: Instance, budget: float, options: MoccasinOptions,
             progress: Progress | None) -> tuple[_Run, int]:
    """The state one call shares (with the LP bound started where it helps), and the no-recompute peak
    in memory units."""
    sc = scale(instance)
    capacity = sc.budget_units(budget, instance.constant_bytes)
    base = baseline(instance)
    base_units = int(round((base.peak - instance.constant_bytes) / sc.memory_unit))
    _, horizon, _ = _grid(instance, options)
    params, wall = _parameters(options)
    notes: dict = {"memory_unit": sc.memory_unit, "duration_quantum": sc.quantum, "capacity_units": capacity}
    run = _Run(instance, budget, options, progress, sc, capacity, horizon, params, wall, time.perf_counter(),
               notes)
    if options.lp_bound and options.order == "fixed" and base_units > capacity and instance.n_nodes <= MAX_NODES:
        run.lp = BackgroundLpBound(instance, budget, 0.95 * wall, options.seed, delay=min(3.0, 0.1 * wall))
    return run, base_units


def _parameters(options: MoccasinOptions) -> tuple[dict, float]:
    """CP-SAT's parameters for both phases, and the wall-clock seconds they share (three times the
    deterministic time limit in a deterministic run)."""
    wall = options.time_limit
    params: dict = dict(_PRESOLVE)
    if options.workers >= 2:
        # Half of the workers run CP-SAT's full search (it proves the optimum on G1 and on G2 at 90%), the
        # others large-neighbourhood search from the incumbent: CP-SAT's default gives both of two workers
        # to full search, and only LNS improves the greedy warm start on G2 at 80% (+6.42% → +5.71%).
        params["num_full_subsolvers"] = options.workers // 2
    if options.deterministic:
        params.update(interleave_search=True, max_deterministic_time=float(options.time_limit))
        wall = 3 * options.time_limit
    return params, wall


def _warm_start(run: _Run, base_units: int) -> tuple[dict, set, int, tuple[dict, set] | None]:
    """The hint of the first phase that runs: the greedy eviction heuristic (:mod:`.heuristics`) on the
    same stages and C_v when the no-recompute sequence is over the budget. Returns the hint's start times,
    present copies and peak in units (the smaller of the greedy and the no-recompute peaks), and the
    greedy sequence's times and copies if it fits the budget (phase 1 is then skipped), else None."""
    instance, options = run.instance, run.options
    no_recompute = [(v, 0) for v in instance.order]
    times, active = _times_of(instance, options, no_recompute), set(no_recompute)
    hint_units = base_units
    greedy = None
    if base_units > run.capacity:
        found = greedy_sequence(instance, run.budget, options.max_copies, min(30.0, 0.5 * options.time_limit))
        if found is not None:
            events, profile = found
            units = int(round((profile.peak - instance.constant_bytes) / run.sc.memory_unit))
            run.notes["greedy"] = {"peak": profile.peak, "tdi": profile.tdi, "seconds": run.elapsed()}
            if units < hint_units:
                times, active = _greedy_times(instance, options, events)
                hint_units = units
            if units <= run.capacity:
                greedy = (times, active)
                log.info("moccasin: greedy warm start fits (TDI %+.2f%%); phase 1 skipped", 100 * profile.tdi)
    return times, active, hint_units, greedy


def _phase1(run: _Run, times: dict, active: set, hint_units: int
            ) -> tuple[SolveResult, cp_model.CpSolver, _Vars]:
    """Phase 1 (Eq. 12–13): reach the budget from the warm start (``M_var`` in ``[capacity,
    hint_units]``); its status, seconds, peak and bound go to ``run.notes["phase1"]``."""
    model, variables = _build(run.instance, run.sc, run.options, None, run.capacity, hint_units)
    _hint(model, run.instance, variables, times, active, run.horizon)
    model.add_hint(variables.peak, hint_units)
    progress, to_bytes = run.progress, run.to_bytes
    report = (lambda t, obj, bound: progress(ProgressRecord(t, to_bytes(obj), to_bytes(bound), "phase1"))
              if progress else None)
    result, solver = solve_cpsat(model, run.remaining(), workers=run.options.workers, seed=run.options.seed,
                                 hint_callback=report, parameters=run.params)
    run.notes["phase1"] = {"status": result.status, "seconds": result.seconds,
                           "peak": None if result.objective is None else to_bytes(result.objective),
                           "bound": to_bytes(result.bound) if result.bound > -1e300 else None}
    return result, solver, variables


def _unreached(run: _Run, result: SolveResult, hint_units: int) -> MethodResult:
    """Phase 1 did not reach the budget: no sequence; ``infeasible`` if CP-SAT proved the budget too small,
    with the smallest peak found and the proven bound in the notes."""
    capacity = run.capacity
    proven = result.bound > capacity + 1e-9
    reached = hint_units if result.objective is None else min(hint_units, result.objective)
    run.notes["reachable_budget"] = run.to_bytes(reached)
    run.notes["proven_min_budget"] = run.to_bytes(result.bound) if result.bound > capacity else None
    if run.lp is not None:
        run.lp.cancel()
    return MethodResult(method="moccasin", status="infeasible" if proven else "no_solution", sequence=None,
                        bound=None, bound_status="none", seconds=run.elapsed(), time_to_best=None,
                        restriction=restriction(run.options), solver="cp-sat", notes=run.notes)


def _phase2(run: _Run, times: dict, active: set, fits: tuple[dict, set] | None) -> MethodResult:
    """Phase 2 (Eq. 1–10): least recomputed duration within the budget, warm-started from ``times`` and
    ``active`` (phase 1's solution, or ``fits``: a solution known to fit — the greedy sequence or
    ``--budget min``'s — which is the fallback if CP-SAT finds nothing), with CP-SAT's bound, the
    event-cover bound (fixed order) and the LP's."""
    instance, options, notes = run.instance, run.options, run.notes
    best_at = [run.elapsed()]
    offset = best_at[0]

    def report2(t: float, obj: float, bound: float) -> None:
        best_at[0] = offset + t
        if run.progress:
            run.progress(ProgressRecord(offset + t, run.to_duration(obj), run.to_duration(bound), "phase2"))

    model, variables = _build(instance, run.sc, options, run.capacity, 0, 0)
    _hint(model, instance, variables, times, active, run.horizon)
    result, solver = solve_cpsat(model, run.remaining(), workers=options.workers, seed=options.seed,
                                 hint_callback=report2, parameters=run.params)
    if result.has_solution:
        times, active = _solution(solver, variables)
    elif fits is not None:  # CP-SAT found nothing in time: the warm start that fits, with CP-SAT's bound
        times, active = fits
        notes["fallback"] = "warm start"
    bound = run.to_duration(max(result.bound, 0.0)) if result.bound > -1e300 else instance.base_duration
    notes["phase2"] = {"status": result.status, "seconds": result.seconds}
    status = "optimal" if result.status == "optimal" else "time_limit"
    extra = [event_cover_entry(instance, run.budget, options.max_copies)] if options.order == "fixed" else []
    if run.lp is not None and status == "optimal":
        run.lp.cancel()  # CP-SAT proved the optimum: the LP cannot add anything
    elif run.lp is not None:
        extra.append(run.lp.result(run.wall - run.elapsed()))
    return MethodResult(method="moccasin", status=status, sequence=_sequence(instance, times, active), bound=bound,
                        bound_status=result.status if result.status in ("optimal", "time_limit") else "none",
                        seconds=run.elapsed(), time_to_best=best_at[0], restriction=restriction(options),
                        solver="cp-sat", notes=notes, extra_bounds=extra)
