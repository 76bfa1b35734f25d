"""Proven layouts and bounds for an ONNX layout instance (:mod:`onnxpart.tile.onnx.model`).

* :func:`closed_form_bound` — each op at its least per-device compute, nothing moved: a bound whatever the
  time limit.
* :func:`exact` — first multi-objective bucket elimination (:mod:`onnxpart.tile.onnx.elimination`: the
  optimum where the graph's induced width is small), else CP-SAT over one-hot layout choices x[t, a] and
  algorithm choices y[op, c], after the dominance reductions of :mod:`onnxpart.tile.onnx.reduce` (which keep
  an optimum); each slot pays the collective a -> b between the stored layout a and the wanted
  b = Σ_{c reads b} y[op, c] (the paper's Hamming term of Section 4, weighted per pair) through
  transportation variables z[a, b] (:func:`_transport`). Costs are floored onto an integer grid, so
  CP-SAT's best objective bound times the grid unit is a proven lower bound on the real step time;
  warm-started (AddHint) from the greedy plan or the elimination's Lagrangian plan, the cheaper. Its
  incumbent is re-costed in seconds.
* :func:`brute_force` — the optimum by enumeration (tiny instances: tests and the benchmark's exhaustive
  column).
"""

from __future__ import annotations

import itertools
import math
import time

from onnxpart.certificate import LowerBound
from onnxpart.strategy import FLOOR, Budget, cores
from onnxpart.tile.onnx import elimination, minibucket
from onnxpart.tile.onnx.catalog import Layout, collective_time
from onnxpart.tile.onnx.model import LayoutInstance
from onnxpart.tile.onnx.reduce import Reduced, reduce_instance

#: The transportation form's strength is in its LP: linearize every constraint (level 2) and lead the
#: portfolio with CP-SAT's ``max_lp`` worker. On the 12-layer GPT at 2x4 this proves in 6 s what the
#: default portfolio (``default_lp``, level 1) leaves at a 40% gap after 60 s.
#: With a binding ``--device-memory`` at 2x4 the same model ends near a 0.04% gap in 60 s, varying with seed and load
#: (seeds 0-2 on 2 shared cores: proved at 56.6 s once, else 0.037% and 0.051%). None of these moved it reliably
#: (gaps at 60 s): ``add_lp_constraints_lazily`` off (seeds 0-3: proved at 24.9 s and 51.6 s, else 0.051% and
#: 0.049%), ``use_objective_lb_search`` (0.013-0.026%, never proved), ``cut_level`` 2 (proved at 59.9 s once, 0.037%
#: with eager rows), more level-zero cut rounds (0.029%), ``pseudo_costs`` / ``reduced_costs`` as the second worker
#: (0.037%), one worker (0.028%, 0.19%), and the memory row aggregated into one integer count per coefficient
#: (0.046%, 0.041%). Its coefficients' gcd (128 bytes there) already divides M.
CPSAT_PARAMETERS = {"linearization_level": 2, "subsolvers": ["max_lp", "core", "default_lp", "no_lp"]}


def closed_form_bound(inst: LayoutInstance) -> LowerBound:
    """:meth:`LayoutInstance.closed_form_bound` as a certificate entry: present whatever the time limit."""
    start = time.monotonic()
    return LowerBound("tile-closed-form", inst.closed_form_bound(), "bound", "formula", time.monotonic() - start,
                      note="Σ over ops of each op's least per-device compute over its algorithms, reshardings "
                           "and final gathers counted as 0")


#: The part of exact's time limit bucket elimination may use before CP-SAT takes over.
ELIMINATION_PART = 0.8


#: What exact's phases before CP-SAT's search take, measured on 2 loaded cores: the dominance reductions per op,
#: and CP-SAT's model per op and per pair variable z (the transformer block at 2x4: 33 ops, 20,013 pairs, 0.83 s;
#: a 2,000-op random DAG: 0.22 s). A phase whose estimate passes exact's time is skipped before it starts: a
#: rule on sizes, so that a seed and a limit give one answer whatever the machine's load.
REDUCE_SECONDS_PER_OP = 1e-4
MODEL_SECONDS = {"op": 1e-4, "pair": 4e-5}


def exact(inst: LayoutInstance, time_limit: float, hint: dict[str, Layout] | None = None, workers: int = 0,
          seed: int = 0) -> tuple[dict[str, Layout] | None, LowerBound]:
    """Bucket elimination (:mod:`onnxpart.tile.onnx.elimination`) on the dominance-reduced instance
    (:mod:`onnxpart.tile.onnx.reduce`), given its part of the time (:data:`ELIMINATION_PART`); where it does not finish,
    CP-SAT (module docstring) in the rest, warm-started from the cheaper of ``hint`` and the elimination's
    Lagrangian plan. -> (best layouts or None, the proven lower bound in seconds). On instances too large for
    ``time_limit`` (LLM-sized graphs on a short limit) the reductions or CP-SAT's model are not started
    (:data:`REDUCE_SECONDS_PER_OP`, :data:`MODEL_SECONDS`; the reductions, the building of CP-SAT's model and
    its warm start also stop at the limit) and the bound is ``skipped`` (value None), saying which. When even
    the least memory is over ``--device-memory`` nothing runs: no plan fits (status ``infeasible``)."""
    budget = Budget(time_limit)
    start = budget.start
    if inst.memory is not None and inst.min_memory() > inst.memory * (1 + 1e-12):
        return None, LowerBound("tile-memory", None, "infeasible", "closed-form", budget.elapsed(),
                                note="every tensor in its smallest layout is over --device-memory: no plan fits")
    hint = hint if hint is not None and inst.fits(hint) else None
    if len(inst.ops) * REDUCE_SECONDS_PER_OP > time_limit / 2:
        return hint, _skipped("the dominance reductions", inst, budget)
    reduced = reduce_instance(inst, deadline=budget.deadline)
    if reduced is None:
        return hint, _skipped("the dominance reductions", inst, budget)
    hint_cost = inst.cost(hint) if hint is not None else math.inf
    found = elimination.solve(inst, reduced, hint_cost, deadline=start + budget.part(ELIMINATION_PART))
    if found.status == "optimal":
        layouts = found.layouts
        value = min(found.seconds, inst.cost(layouts))  # equal up to float rounding: the optimum of both
        return layouts, LowerBound("tile-elimination", value, "optimal", "bucket-elimination",
                                   time.monotonic() - start, note="multi-objective bucket elimination over "
                                   "(step time, bytes per device) with Lagrangian pruning: the optimum")
    if found.plan is not None and found.plan_seconds < hint_cost:
        hint = found.plan
    mini = minibucket.lower_bound(found.network, start + budget.part(ELIMINATION_PART)) \
        if found.status == "refused" else None
    if len(inst.ops) * MODEL_SECONDS["op"] + _pairs(inst, reduced) * MODEL_SECONDS["pair"] > time_limit:
        layouts, bound = hint, _skipped("CP-SAT's model", inst, budget)
    else:
        layouts, bound = _cpsat(inst, reduced, max(FLOOR, budget.left()), hint, workers, seed)
    if found.lagrangian is not None and (bound.value is None or found.lagrangian > bound.value):
        bound = LowerBound("tile-lagrangian", found.lagrangian, bound.status, "lagrangian-dual",
                           time.monotonic() - start, note=f"max over λ of min (step time + λ·bytes) − λ·M, "
                           f"above CP-SAT's {bound.value}; elimination {found.status}")
    if mini is not None and bound.status != "optimal" and (bound.value is None or mini.value > bound.value):
        status = "time_limit" if bound.status == "skipped" else bound.status
        bound = LowerBound("tile-minibucket", mini.value, status, "mini-bucket elimination",
                           time.monotonic() - start, note=f"mini-bucket elimination of the step time ({mini.splits} "
                           f"buckets split, tables of at most {elimination.MAX_TABLE:,} entries), above "
                           f"{bound.solver}'s {bound.value}; memory not modelled")
    return layouts, bound


def _skipped(phase: str, inst: LayoutInstance, budget: Budget) -> LowerBound:
    """The exact bound not computed: no time for ``phase`` in ``budget`` (exact's, or what it had left for
    CP-SAT) on this instance."""
    return LowerBound("tile-cpsat", None, "skipped", "cp-sat", budget.elapsed(),
                      note=f"skipped: no time for {phase} in the {budget.total:.3g} s exact had for it on "
                           f"{len(inst.ops)} ops; a longer --time-limit lets it run")


def _pairs(inst: LayoutInstance, reduced: Reduced) -> int:
    """How many pair variables z CP-SAT's model has (:func:`_transport`: stored × wanted layouts per slot)."""
    count = 0
    for i, op in enumerate(inst.ops):
        for j, t in enumerate(op.inputs + op.outputs):
            wanted = {(op.choices[k].inputs + op.choices[k].outputs)[j] for k in reduced.choices[i]}
            count += len(reduced.domains[t]) * len(wanted)
    return count


def _cpsat(inst: LayoutInstance, reduced: Reduced, time_limit: float, hint: dict[str, Layout] | None,
           workers: int, seed: int) -> tuple[dict[str, Layout] | None, LowerBound]:
    """CP-SAT (module docstring) on the reduced instance: (best layouts or None, its proven lower bound). The
    solver is imported here, when it runs: a solve whose exact method is skipped (an LLM-sized graph on a short
    limit) does not pay for loading it."""
    from onnxpart.solvers import solve_cpsat

    budget = Budget(time_limit)  # the limit includes building the model, which stops at its deadline
    built = _build(inst, reduced, budget.deadline)
    if built is None:
        return hint, _skipped("CP-SAT's model", inst, budget)
    model, x, y, z, unit = built
    if hint is not None and not _hint(model, inst, reduced, reduced.replace(hint), (x, y, z), budget.deadline):
        return hint, _skipped("CP-SAT's warm start", inst, budget)
    remaining = max(1e-3, budget.left())
    # deterministic: the portfolio interleaved in a fixed order, stopped by deterministic time, so a seed and a
    # limit give one bound whatever the load (the wall-clock limit stays as the safety net)
    parameters = {**CPSAT_PARAMETERS, "interleave_search": True, "max_deterministic_time": remaining}
    result, solver = solve_cpsat(model, remaining, workers=cores(workers), seed=seed, parameters=parameters)
    seconds = time.monotonic() - budget.start
    value = None if result.status == "infeasible" else max(float(result.bound), 0.0) * unit
    bound = LowerBound("tile-cpsat", value, result.status, "cp-sat", seconds,
                       note=f"CP-SAT best objective bound of the one-hot layout model after dominance reductions "
                            f"(costs floored to {unit:.3g} s units)")
    if not result.has_solution:
        return (dict(hint) if hint is not None else None), bound
    layouts = {t.name: next(a for a, var in x[t.name].items() if solver.Value(var)) for t in inst.tensors}
    return layouts, bound


def _coefficients(inst: LayoutInstance) -> float:
    """The grid unit: the largest possible step time spread over 2^50 integer steps."""
    top = sum(max(c.seconds for c in op.choices) for op in inst.ops)
    # a resharding costs at most gathering every axis (an all-gather or all-reduce each, on ≤ the full bytes)
    # then slicing: one all-reduce per mesh axis per slot and per final gather
    slots = [t for op in inst.ops for t in op.inputs + op.outputs] + [t.name for t in inst.tensors
                                                                      if t.kind == "output"]
    top += sum(collective_time("all-reduce", inst.tensor(t).bytes, axis) for t in slots for axis in inst.mesh.axes)
    return max(top / 2 ** 50, 1e-18)


def _build(inst: LayoutInstance, reduced: Reduced, deadline: float):
    """-> (model, x[t][a], y[op][c] over the kept choices, z[(op, slot, reads)][(a, b)], unit); None when the
    ``deadline`` (``time.monotonic()`` seconds) passes before the model is built (checked once per op)."""
    from ortools.sat.python import cp_model

    unit = _coefficients(inst)
    model = cp_model.CpModel()
    x = {t.name: {a: model.new_bool_var(f"x_{i}_{a}") for a in reduced.domains[t.name]}
         for i, t in enumerate(inst.tensors)}
    for t in inst.tensors:  # one layout per tensor
        model.add_exactly_one(x[t.name].values())
    y = [{k: model.new_bool_var(f"y_{i}_{k}") for k in kept} for i, kept in enumerate(reduced.choices)]
    terms, z = [], {}
    for i, op in enumerate(inst.ops):
        if time.monotonic() > deadline:
            return None
        model.add_exactly_one(y[i].values())  # one algorithm per op
        terms += [int(op.choices[k].seconds / unit) * var for k, var in y[i].items()]
        slots = [(t, j, True) for j, t in enumerate(op.inputs)] + [(t, j, False) for j, t in enumerate(op.outputs)]
        for t, j, reads in slots:
            wants: dict[Layout, list] = {}
            for k, var in y[i].items():
                c = op.choices[k]
                wants.setdefault(c.inputs[j] if reads else c.outputs[j], []).append(var)
            cost = {(a, b): int(inst.reshard_time(*((a, b) if reads else (b, a)), t) / unit)
                    for a in x[t] for b in wants}
            z[(i, j, reads)] = _transport(model, x[t], wants, f"{i}_{j}_{int(reads)}")
            terms += [c * z[(i, j, reads)][k] for k, c in cost.items() if c > 0]
    for t in inst.tensors:  # the final gathers of the graph outputs
        final = {a: int(inst.final_time(t.name, a) / unit) for a in x[t.name]}
        terms += [c * x[t.name][a] for a, c in final.items() if c > 0]
    if inst.memory is not None:  # --device-memory
        model.add(sum(t.per_device(a, inst.mesh) * var for t in inst.tensors for a, var in x[t.name].items())
                  <= int(inst.memory))
    model.minimize(sum(terms) if terms else 0)
    return model, x, y, z, unit


def _transport(model, x: dict, wants: dict, tag: str) -> dict:
    """The pairs (stored a, wanted b) of one slot, whose resharding costs it pays, in the transportation form of the
    local marginal polytope (Wainwright & Jordan, "Graphical Models, Exponential Families, and Variational
    Inference", 2008, Section 4.1.1): z[a, b] with Σ_b z[a, b] = x[t, a] and Σ_a z[a, b] = Σ_{c reads b}
    y[op, c], paying cost[(a, b)]·z[a, b]. With one-hot x and y, z[a, b] = x[t, a]·[b wanted]; its LP
    relaxation is far tighter than one indicator m ≥ x + y − 1 per pair (on a 2x4 mesh it proves in
    seconds what the indicators leave at bound 0)."""
    z = {(a, b): model.new_bool_var(f"z_{tag}_{a}_{b}") for a in x for b in wants}
    for a in x:
        model.add(sum(z[(a, b)] for b in wants) == x[a])
    for b, chosen in wants.items():
        model.add(sum(z[(a, b)] for a in x) == sum(chosen))
    return z


def _hint(model, inst: LayoutInstance, reduced: Reduced, layouts: dict, variables: tuple, deadline: float) -> bool:
    """AddHint of a full plan: its layouts, each op's best kept algorithm on them, and the pairs (``variables``:
    x, y and z of :func:`_build`). False when ``deadline`` passes first (checked once per op)."""
    x, y, z = variables
    for t in inst.tensors:
        for a, var in x[t.name].items():
            model.add_hint(var, layouts[t.name] == a)
    for i, op in enumerate(inst.ops):
        if time.monotonic() > deadline:
            return False
        chosen = min(reduced.choices[i], key=lambda k: inst.choice_cost(op, k, layouts))
        for k, var in y[i].items():
            model.add_hint(var, k == chosen)
        choice = op.choices[chosen]
        for j, t in enumerate(op.inputs + op.outputs):
            reads = j < len(op.inputs)
            slot = (i, j, True) if reads else (i, j - len(op.inputs), False)
            want = choice.inputs[j] if reads else choice.outputs[j - len(op.inputs)]
            for (a, b), var in z[slot].items():
                model.add_hint(var, a == layouts[t] and b == want)
    return True


def brute_force(inst: LayoutInstance) -> tuple[float, dict[str, Layout]] | None:
    """The optimum by enumeration (tiny instances, tests); None when nothing fits the memory."""
    names = [t.name for t in inst.tensors]
    best = None
    for combo in itertools.product(*(t.domain for t in inst.tensors)):
        x = dict(zip(names, combo))
        if inst.fits(x):
            cost = inst.cost(x)
            if best is None or cost < best[0]:
                best = (cost, x)
    return best
