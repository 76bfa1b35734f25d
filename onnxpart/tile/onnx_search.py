"""Searches over an ONNX layout instance (:mod:`onnxpart.tile.onnx_model`): ``local``, ``greedy`` and
``exact`` (bucket elimination, else CP-SAT), after Sections 5–6 of "Matrix Tiling as Constrained Hypergraph
Labeling".

* :func:`local` — the paper's Section 6 baseline: ops in topological order, each takes its locally
  cheapest algorithm given the layouts fixed so far; its not-yet-laid-out tensors take that
  algorithm's layouts.
* :func:`greedy` — improvement from the local plan and from all-replicated: Algorithm 3's bucket step
  with buckets of one edge (β = 1: lay out all tensors of one op by one of its algorithms) and of one
  vertex (one tensor, every layout in its domain), repeated while the step time drops. Every move keeps
  ``--device-memory``.
* :func:`exact` — first multi-objective bucket elimination (:mod:`onnxpart.tile.elimination`: the
  optimum where the graph's induced width is small), else CP-SAT over one-hot layout choices x[t, a] and
  algorithm choices y[op, c], after the dominance reductions of :mod:`onnxpart.tile.reduce` (which keep an optimum); each slot pays the
  collective a -> b between the stored layout a and the wanted b = Σ_{c reads b} y[op, c] (the paper's
  Hamming term of Section 4, weighted per pair) through transportation variables z[a, b]
  (:func:`_slot_terms`). Costs are floored onto an
  integer grid, so CP-SAT's best objective bound times the grid unit is a proven lower bound on the real
  step time; warm-started (AddHint) from the greedy plan or the elimination's Lagrangian plan, the cheaper.
  Its incumbent is re-costed in seconds.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from onnxpart.board import Board
from onnxpart.certificate import LowerBound, best_bound
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.solvers import solve_cpsat
from onnxpart.tile import elimination
from onnxpart.tile.catalog import Layout, collective_time
from onnxpart.tile.onnx_model import LayoutInstance, Plan
from onnxpart.tile.reduce import Reduced, reduce_instance

METHODS = ("local", "greedy", "exact")
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


@dataclass(frozen=True)
class LayoutOptions:
    methods: tuple[str, ...] = METHODS
    time_limit: float = 10.0  # total seconds, every method together
    workers: int = 2
    seed: int = 0


@dataclass
class LayoutResult:
    method: str
    layouts: dict[str, Layout] | None
    cost: float | None
    seconds: float
    status: str  # heuristic | optimal | time_limit | no_solution
    note: str = ""


@dataclass
class LayoutSolution:
    instance: LayoutInstance
    plan: Plan
    cost: float
    method: str
    results: list[LayoutResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)
    replicated: bool = False  # no sharding beats one device: the plan runs the whole model on every device

    @property
    def best_lower_bound(self) -> float | None:
        return best_bound(self.lower_bounds)

    @property
    def one_device(self) -> float:
        """The step time on one device (:attr:`LayoutInstance.one_device`)."""
        return self.instance.one_device


def solve_layouts(inst: LayoutInstance, options: LayoutOptions = LayoutOptions(),
                  board: Board | None = None) -> LayoutSolution:
    """Run the requested methods; the answer is the cheapest plan (:func:`_best`), or the replicated plan when
    no method's plan beats one device. ``board`` (:mod:`onnxpart.board`) hears every method's plan (``offer``)
    and every proven bound (``add``): the closed form at once, then exact's — what the progress bar shows."""
    board = board if board is not None else Board()
    unknown = [m for m in options.methods if m not in METHODS]
    if unknown:
        raise UserError(f"unknown tile method {', '.join(unknown)} for an ONNX model: use {', '.join(METHODS)}")
    start = time.perf_counter()
    bounds = [closed_form_bound(inst)]
    board.add(bounds[0])
    results, hint = [], None
    for method in dict.fromkeys(options.methods):
        t0 = time.perf_counter()
        if method == "exact":
            remaining = max(options.time_limit - (t0 - start), 0.1)
            start_plan = hint or greedy(inst, deadline=t0 + remaining, trials=TRIALS_PER_SECOND * remaining / 4)
            layouts, bound = exact(inst, max(remaining - (time.perf_counter() - t0), 0.1), start_plan,
                                   options.workers, options.seed)
            bounds.append(bound)
            board.add(bound)
            status = bound.status if layouts is not None else "no_solution"
        else:
            share = options.time_limit / (2 if "exact" in options.methods else 1)
            layouts = local(inst) if method == "local" else greedy(inst, deadline=start + options.time_limit,
                                                                    trials=TRIALS_PER_SECOND * share)
            status = "heuristic"
            hint = layouts if method == "greedy" else hint
        cost = inst.cost(layouts) if layouts is not None and inst.fits(layouts) else None
        if cost is not None:
            board.offer(cost, method)
        results.append(LayoutResult(method, layouts if cost is not None else None, cost,
                                    time.perf_counter() - t0, status if cost is not None else "no_solution"))
    solved = [r for r in results if r.cost is not None]
    if not solved:
        raise InfeasibleError("no method found layouts within --device-memory")
    best = _best(solved)
    one = inst.replicated_plan()
    if one is not None and inst.cost(one) <= best.cost * (1 + TIE):
        method = best.method if inst.cost(one) >= best.cost * (1 - TIE) else "replicated"
        return LayoutSolution(inst, inst.plan(one), inst.cost(one), method, results, bounds, replicated=True)
    return LayoutSolution(inst, inst.plan(best.layouts), best.cost, best.method, results, bounds)


#: Relative difference below which two step times are one (float sums in another order).
TIE = 1e-12


def _best(solved: list[LayoutResult]) -> LayoutResult:
    """The cheapest result; among equal ones the method that proved its plan optimal, else the one listed
    first (a plan exact proved is labelled ``exact`` even when greedy found it first)."""
    least = min(r.cost for r in solved)
    tied = [r for r in solved if r.cost <= least * (1 + TIE)]
    return next((r for r in tied if r.status == "optimal"), tied[0])


def closed_form_bound(inst: LayoutInstance) -> LowerBound:
    """:meth:`LayoutInstance.closed_form_bound` as a certificate entry: present whatever the time limit."""
    start = time.perf_counter()
    return LowerBound("tile-closed-form", inst.closed_form_bound(), "bound", "formula", time.perf_counter() - start,
                      note="Σ over ops of each op's least per-device compute over its algorithms, reshardings "
                           "and final gathers counted as 0")


# -------------------------------------------------------------------------------------- heuristics
def local(inst: LayoutInstance) -> dict[str, Layout]:
    """Section 6's local solver (module docstring), then :func:`fit_memory`."""
    x: dict[str, Layout] = {}
    for op in inst.ops:
        best = min(range(len(op.choices)), key=lambda c: _local_cost(inst, op, c, x))
        choice = op.choices[best]
        for t, want in itertools.chain(zip(op.inputs, choice.inputs), zip(op.outputs, choice.outputs)):
            if t not in x:
                x[t] = _nearest(inst, t, want)
    for t in inst.tensors:
        x.setdefault(t.name, t.domain[0])
    return fit_memory(inst, x)


def _local_cost(inst: LayoutInstance, op, c: int, x: dict) -> float:
    choice = op.choices[c]
    total = choice.seconds
    for t, want in zip(op.inputs, choice.inputs):
        total += inst.reshard_time(x.get(t, _nearest(inst, t, want)), want, t)
    for t, made in zip(op.outputs, choice.outputs):
        total += inst.reshard_time(made, x.get(t, _nearest(inst, t, made)), t)
    return total


def _nearest(inst: LayoutInstance, t: str, want: Layout) -> Layout:
    """``want`` when it is in t's domain, else the domain's layout closest to it (cheapest to convert)."""
    var = inst.tensor(t)
    if want in var.domain:
        return want
    return min(var.domain, key=lambda a: inst.reshard_time(a, want, t) + inst.reshard_time(want, a, t))


def greedy(inst: LayoutInstance, max_rounds: int = 50, deadline: float | None = None,
           trials: float = math.inf) -> dict[str, Layout]:
    """Improve the local plan and the all-replicated one by op and tensor moves; the best of them.
    With ``--device-memory`` also Lagrangian runs (Fisher, "The Lagrangian Relaxation Method for Solving
    Integer Programming Problems", Management Science 1981): moves priced at seconds + λ·bytes per
    device, free of the bound, for λ in ``LAGRANGE`` times (step time / memory); each result is then
    made to fit (:func:`fit_memory`) and improved under the bound. A round runs only while its moves fit
    in ``trials`` (all runs together): a deterministic budget, so one time limit gives one plan whatever the
    machine's load; ``deadline`` (``time.perf_counter()`` seconds) is the safety net, checked between rounds."""
    budget = _Budget(trials, deadline)
    starts = [local(inst), fit_memory(inst, {t.name: t.domain[0] for t in inst.tensors})]  # R first when allowed
    plans = [_improve(inst, x, max_rounds, budget) for x in starts]
    if inst.memory is not None:
        scale = inst.cost(plans[0]) / max(inst.memory, 1.0)
        for factor in LAGRANGE:
            if budget.spent():
                break
            priced = _improve(inst, dict(plans[0]), max_rounds, budget, factor * scale)
            plans.append(_improve(inst, fit_memory(inst, priced), max_rounds, budget))
    return min([x for x in plans if inst.fits(x)] or plans, key=inst.cost)


#: λ per (step time / --device-memory) of greedy's Lagrangian runs.
LAGRANGE = (0.3, 1.0, 3.0)
#: Greedy's move trials per second of its time share (about a fifth of what 2 loaded cores try on a
#: 600-tensor 2x4 instance, so the wall-clock deadline rarely ends it first).
TRIALS_PER_SECOND = 2000.0


@dataclass
class _Budget:
    trials: float
    deadline: float | None

    def spent(self, more: int = 0) -> bool:
        """Whether ``more`` trials no longer fit (they are taken when they do), or the deadline passed."""
        if more > self.trials or (self.deadline is not None and time.perf_counter() > self.deadline):
            return True
        self.trials -= more
        return False


def _improve(inst: LayoutInstance, x: dict[str, Layout], max_rounds: int, budget: _Budget,
             price: float | None = None) -> dict[str, Layout]:
    """Rounds of op and tensor moves on ``x`` (in place) while one lowers the step time and keeps the
    memory bound — or, with a ``price`` per byte, while one lowers step time + price·memory per device."""
    touching = _touching(inst)
    memory = [inst.memory_per_device(x)]  # kept up to date by _try
    moves = [{t: want for t, want in zip(op.inputs + op.outputs, c.inputs + c.outputs)}
             for op in inst.ops for c in op.choices]
    moves += [{t.name: a} for t in inst.tensors for a in t.domain]
    for _ in range(max_rounds):
        if budget.spent(len(moves)):
            break
        improved = False
        for move in moves:
            move = {t: a for t, a in move.items() if a in inst.tensor(t).domain and x[t] != a}
            if move and _try(inst, x, move, touching, memory, price):
                improved = True
        if not improved:
            break
    return x


def _try(inst: LayoutInstance, x: dict, move: dict, touching: dict, memory: list, price: float | None) -> bool:
    """Apply ``move`` to ``x`` when it pays (:func:`_improve`); ``memory[0]`` is x's memory per device."""
    ops = {i for t in move for i in touching[t]}
    before = _local_time(inst, x, ops, move)
    grown = sum(inst.tensor(t).per_device(a, inst.mesh) - inst.tensor(t).per_device(x[t], inst.mesh)
                for t, a in move.items())
    old = {t: x[t] for t in move}
    x.update(move)
    after = _local_time(inst, x, ops, move) + (price or 0.0) * grown
    fits = price is not None or inst.memory is None or memory[0] + grown <= inst.memory * (1 + 1e-12)
    if after < before - 1e-15 * max(1.0, abs(before)) and fits:
        memory[0] += grown
        return True
    x.update(old)
    return False


def _local_time(inst: LayoutInstance, x: dict, ops, tensors) -> float:
    """The part of T(x) that ``ops`` and the final gathers of ``tensors`` pay."""
    return sum(inst.best_choice(inst.ops[i], x)[1] for i in ops) + sum(inst.final_time(t, x[t]) for t in tensors)


def _touching(inst: LayoutInstance) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {t.name: [] for t in inst.tensors}
    for i, op in enumerate(inst.ops):
        for t in dict.fromkeys(op.inputs + op.outputs):
            out[t].append(i)
    return out


def fit_memory(inst: LayoutInstance, x: dict[str, Layout]) -> dict[str, Layout]:
    """Shrink tensors to their smallest layout, most bytes saved per second added first, until the plan
    fits ``--device-memory`` (unchanged when there is no bound or it fits already)."""
    touching = _touching(inst)
    mesh = inst.mesh
    while not inst.fits(x):
        best, score = None, -math.inf
        for t in inst.tensors:
            small = min(t.domain, key=lambda a: t.per_device(a, mesh))
            saved = t.per_device(x[t.name], mesh) - t.per_device(small, mesh)
            if saved <= 0:
                continue
            ops = touching[t.name]
            old = x[t.name]
            before = _local_time(inst, x, ops, [t.name])
            x[t.name] = small
            added = _local_time(inst, x, ops, [t.name]) - before
            x[t.name] = old
            if saved / (max(added, 0.0) + 1e-12) > score:
                best, score = (t.name, small), saved / (max(added, 0.0) + 1e-12)
        if best is None:
            break
        x[best[0]] = best[1]
    return x


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


# ------------------------------------------------------------------------------------------- exact
#: Share of exact's time limit that bucket elimination may use before CP-SAT takes over.
ELIMINATION_SHARE = 0.8


def exact(inst: LayoutInstance, time_limit: float, hint: dict[str, Layout] | None = None, workers: int = 2,
          seed: int = 0) -> tuple[dict[str, Layout] | None, LowerBound]:
    """Bucket elimination (:mod:`onnxpart.tile.elimination`) on the dominance-reduced instance
    (:mod:`onnxpart.tile.reduce`), given up to ``ELIMINATION_SHARE`` of the time; where it does not finish,
    CP-SAT (module docstring), warm-started from the cheaper of ``hint`` and the elimination's Lagrangian
    plan. -> (best layouts or None, the proven lower bound in seconds)."""
    start = time.perf_counter()
    reduced = reduce_instance(inst)
    hint = hint if hint is not None and inst.fits(hint) else None
    hint_cost = inst.cost(hint) if hint is not None else math.inf
    found = elimination.solve(inst, reduced, hint_cost, deadline=start + ELIMINATION_SHARE * time_limit)
    if found.status == "optimal":
        layouts = found.layouts
        value = min(found.seconds, inst.cost(layouts))  # equal up to float rounding: the optimum of both
        return layouts, LowerBound("tile-elimination", value, "optimal", "bucket-elimination",
                                   time.perf_counter() - start, note="multi-objective bucket elimination over "
                                   "(step time, bytes per device) with Lagrangian pruning: the optimum")
    if found.plan is not None and found.plan_seconds < hint_cost:
        hint = found.plan
    layouts, bound = _cpsat(inst, reduced, max(time_limit - (time.perf_counter() - start), 0.1), hint, workers, seed)
    if found.lagrangian is not None and (bound.value is None or found.lagrangian > bound.value):
        bound = LowerBound("tile-lagrangian", found.lagrangian, bound.status, "lagrangian-dual",
                           time.perf_counter() - start, note=f"max over λ of min (step time + λ·bytes) − λ·M, "
                           f"above CP-SAT's {bound.value}; elimination {found.status}")
    return layouts, bound


def _cpsat(inst: LayoutInstance, reduced: Reduced, time_limit: float, hint: dict[str, Layout] | None,
           workers: int, seed: int) -> tuple[dict[str, Layout] | None, LowerBound]:
    """CP-SAT (module docstring) on the reduced instance: (best layouts or None, its proven lower bound)."""
    start = time.perf_counter()
    model, x, y, z, unit = _build(inst, reduced)
    if hint is not None:
        _hint(model, inst, reduced, reduced.replace(hint), x, y, z)
    remaining = max(time_limit - (time.perf_counter() - start), 1e-3)
    # deterministic: the portfolio interleaved in a fixed order, stopped by deterministic time, so a seed and a
    # limit give one bound whatever the load (the wall-clock limit stays as the safety net)
    parameters = {**CPSAT_PARAMETERS, "interleave_search": True, "max_deterministic_time": remaining}
    result, solver = solve_cpsat(model, remaining, workers=workers, seed=seed, parameters=parameters)
    seconds = time.perf_counter() - start
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


def _build(inst: LayoutInstance, reduced: Reduced):
    """-> (model, x[t][a], y[op][c] over the kept choices, z[(op, slot, reads)][(a, b)], unit)."""
    unit = _coefficients(inst)
    model = cp_model.CpModel()
    x = {t.name: {a: model.new_bool_var(f"x_{i}_{a}") for a in reduced.domains[t.name]}
         for i, t in enumerate(inst.tensors)}
    for t in inst.tensors:  # one layout per tensor
        model.add_exactly_one(x[t.name].values())
    y = [{k: model.new_bool_var(f"y_{i}_{k}") for k in kept} for i, kept in enumerate(reduced.choices)]
    terms, z = [], {}
    for i, op in enumerate(inst.ops):
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


def _hint(model, inst: LayoutInstance, reduced: Reduced, layouts: dict, x: dict, y: list, z: dict) -> None:
    """AddHint of a full plan: its layouts, each op's best kept algorithm on them, and the pairs."""
    for t in inst.tensors:
        for a, var in x[t.name].items():
            model.add_hint(var, layouts[t.name] == a)
    for i, op in enumerate(inst.ops):
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
