"""Moccasin's CP-SAT formulation: rematerialization as retention intervals (Bartan et al., "Moccasin: Efficient
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
* The objectives of the two phases (§2.4, run by :mod:`onnxpart.remat.moccasin`): ``max(M_var, M)``
  (Eq. 12–13; modeled as ``M_var ≥ M``) and the recomputed duration (Eq. 1; the first copies are a
  constant) with the budget as the cumulative capacity.

Graph inputs are zero-duration input nodes placed first (see :mod:`onnxpart.remat.model`); producers of
graph outputs have ``C_v = 1`` and retain their outputs to the horizon.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from onnxpart.remat.model import Instance, Scale


@dataclass(frozen=True)
class Reached:
    """What phase 1 reached on its own (:func:`onnxpart.remat.moccasin.smallest_peak`): the smallest peak
    found and CP-SAT's proven bound on it (bytes), whether that bound meets the peak, and the solution (start
    times, present copies)."""

    peak: float
    proven: float | None
    optimal: bool
    times: dict
    active: frozenset


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
    start: Reached | None = None


def restriction(options: MoccasinOptions) -> str:
    where = "the input topological order's stages (§2.3)" if options.order == "fixed" else "any order (§2.1)"
    return f"C_v ≤ {options.max_copies} computations per op, {where}"


@dataclass
class Vars:
    starts: list[list]  # per node, per copy: int var or int
    actives: list[list]  # per node, per copy: bool var
    ends: dict[tuple[int, int], object]  # (value, copy) -> int var
    lengths: dict[tuple[int, int], object]  # (value, copy) -> the retention interval's size var
    serving: dict[tuple[int, int, int, int], object]  # (value, consumer, consumer copy, producer copy) -> b
    peak: object | None  # phase 1's M_var


def grid(instance: Instance, options: MoccasinOptions) -> tuple[list[list[int]], int, list[int]]:
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


def build(instance: Instance, sc: Scale, options: MoccasinOptions, capacity: int | None,
           floor: int, ceiling: int) -> tuple[cp_model.CpModel, Vars]:
    """The CP model. ``capacity`` None: phase 1 (``M_var`` in ``[floor, ceiling]`` is the capacity and the
    objective); else phase 2 with that capacity and the duration objective. CP-SAT's search depends on
    the order in which variables and constraints are created: the helpers run in a fixed order."""
    model = cp_model.CpModel()
    allowed, horizon, copies = grid(instance, options)
    starts, actives = _compute_events(model, options, allowed, copies)
    variables = Vars(starts, actives, {}, {}, {}, None)
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


def _retention(model: cp_model.CpModel, instance: Instance, sc: Scale, variables: Vars,
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


def _memory(model: cp_model.CpModel, sc: Scale, variables: Vars, intervals: list, demands: list[int],
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


def _inputs_retained(model: cp_model.CpModel, instance: Instance, precedence: str, variables: Vars,
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


def times_of(instance: Instance, options: MoccasinOptions, sequence: list[tuple[int, int]]) -> dict:
    """Start times of the copies in a no-recompute sequence of (node, copy) pairs, placed on the grid."""
    allowed, _, copies = grid(instance, options)
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


def hint(model: cp_model.CpModel, instance: Instance, variables: Vars, times: dict, active: set,
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


def greedy_times(instance: Instance, options: MoccasinOptions, events: list) -> tuple[dict, set]:
    """Start times and present copies of a greedy sequence (:mod:`.heuristics`): stage ``j`` (1-based)
    computes position ``p`` at ``j(j−1)/2 + p`` (Eq. 11); free order: consecutive slots (Eq. 9). Absent
    copies sit where the model puts them."""
    allowed, _, copies = grid(instance, options)
    active = {(e.node, e.copy) for e in events}
    times = {(v, i): allowed[v][i] if options.order == "fixed" else None
             for v in range(instance.n_nodes) for i in range(copies[v])}
    if options.order == "fixed":
        position = {v: p + 1 for p, v in enumerate(instance.order)}
        for e in events:
            times[(e.node, e.copy)] = (e.stage + 1) * e.stage // 2 + position[e.node]
        return times, active
    return times_of(instance, options, [(e.node, e.copy) for e in events]), active


def read_solution(solver: cp_model.CpSolver, variables: Vars) -> tuple[dict, set]:
    times, active = {}, set()
    for v, s_v in enumerate(variables.starts):
        for i, s in enumerate(s_v):
            times[(v, i)] = solver.value(s)
            if solver.boolean_value(variables.actives[v][i]):
                active.add((v, i))
    return times, active


def sequence_of(instance: Instance, times: dict, active: set) -> tuple[int, ...]:
    return tuple(v for _, v in sorted((times[(v, i)], v) for v, i in active) if v < instance.n_ops)
