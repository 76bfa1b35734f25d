"""The units' bounds joined at their cuts: what a run of units costs at least, collectives at the cuts included.

The family bound prices a run of units at the sum of its units' proven bounds (:mod:`onnxpart.plan.unit_costs`),
and each unit lays out the tensors at its edges as it likes there: what converting the residual stream between
two units' favourite layouts costs is in neither. Here each unit's bound is a function of those layouts.

**Cut tensors.** The tensors at cut c (between units c - 1 and c) are those touched by these two units and by no
other — a transformer's residual stream —, the largest first while their joint layouts stay within
:data:`MAX_STATE`. A tensor that more units touch (the mask and rotary tables every layer reads), or one left
out, is each unit's own copy: a relaxation, as in :mod:`onnxpart.tile.onnx.relax`.

**Unit functions.** ``F_u(s, s')`` is at most the least step time of unit u's instance on mesh m with its cut
tensors at cut u in layouts s and those at cut u + 1 in s': every other variable is minimized out by mini-bucket
elimination (:func:`onnxpart.tile.onnx.minibucket.kept_function`) on the instance reduced with the cut tensors
kept whole (:func:`onnxpart.tile.onnx.reduce.reduce_instance`, whose reductions keep an optimum whatever
layouts those take). Equal units (:func:`onnxpart.plan.stages.signature`, with their cut tensors in the same
places) share one function.

**The chain.** A stage of units i .. j - 1 on m pays tile's step time on its instance: per-op terms over domains
that are subsets of the whole model's. Restricted to unit u, its plan is a plan of u's instance, costing at
least ``F_u`` at the stage's layouts of u's cut tensors, and consecutive units read one layout per shared
tensor. So the stage costs at least ``min Σ_u F_u(s_u, s_{u+1})`` over the layouts at its inner cuts, those at
its first and last cuts free — a min-plus product along the chain (:func:`run_bounds`).

**Memory** (a Lagrangian relaxation). A stage that fits holds every weight it touches, so the weights each of
its units owns (touches first: disjoint) take at most M bytes per device: ``Σ_u B_u ≤ M``. For λ ≥ 0 its step
time is then at least ``Σ_u (T_u + λ·B_u) − λ·M``, so the chain of ``F_u^λ`` (the same functions with λ times
the owned weights' bytes per device added) minus λ·M bounds every stage that fits. The whole model's value is
concave in λ (a minimum of functions linear in λ): the best of :data:`MULTIPLIERS` is refined, once the mesh's
chained plans are made, by a golden-section search between its neighbours there (:data:`GOLDEN_STEPS`), and
every run keeps its best over all λ tried. Only λ = 0 when the weights, all replicated, fit M: then no λ > 0
does better. Without it, a model whose weights must be sharded to fit (Llama-70B on one node) is bounded by
plans that replicate them.

**Plans.** The chain's argmin over the whole model (:func:`run_argmin`) pins each unit's cut tensors; each unit's
plan so pinned (:func:`chained_layouts`: mini-bucket decoding of its network, the exact optimum where no bucket
is split) agrees with its neighbours at every cut the chain holds — a start for the stages' layouts
(:mod:`onnxpart.plan.evaluate`) that the units' own plans, each choosing its edges alone, are not. Where the
weights bind and the plan at λ = 0 does not fit a device, a bisection over the λ tried finds the least whose
plan fits, then one over k: the first k units at that λ and the rest at the λ before it, the least k that fits
(to 1/:data:`MIX_STEPS` of the units). The units' plans are each least for their weighted step time, so this
is the knapsack's greedy over equal units: the memory left goes where sharding costs most.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxpart.plan.model import Problem
from onnxpart.plan.stages import merged_layouts, restrict, signature, tensor_order, weight_bytes
from onnxpart.plan.unit_costs import touching_units

#: The most joint layouts of the tensors kept at one cut (a unit's table is at most its square: 8 MB).
MAX_STATE = 1024
#: The memory rule's multipliers λ, in units of the whole model's chain bound at λ = 0 per byte of a device's
#: memory (module docstring): where the weights' memory binds, the best of them is near the Lagrangian dual's.
MULTIPLIERS = (0.0,) + tuple(4.0 ** k for k in range(-3, 4))
#: Golden-section steps on λ between the best multiplier's neighbours (each a chain at one more λ).
GOLDEN_STEPS = 8
#: The mix of two multipliers' plans is bisected on the number of units down to 1 / MIX_STEPS of them.
MIX_STEPS = 16


@dataclass
class Interfaces:
    """What the chain gives the plan: ``bound`` (units + 1, units + 1, meshes), the chain bound of every run
    [i, j) on every sub-mesh, inf where j ≤ i, 0 on one device and on a mesh not reached in time; ``layouts``:
    mesh index -> chained plans (each, per unit, its layouts agreeing at the cuts: :func:`chained_plans`), for
    the meshes reached in time; ``stages``: mesh index -> the best of them as the whole model's stage there
    (:meth:`WholeModel.price`)."""

    bound: np.ndarray
    layouts: dict[int, list[list[dict]]]
    stages: dict = field(default_factory=dict)


@dataclass
class Chain:
    """A mesh's chain: per unit (its instance, its :class:`UnitNetwork`), the units' tables at each λ tried
    (λ -> per unit ``F_u^λ``), whether the weights' memory binds (all replicated, over ``memory``), and every
    run's best bound over those λ (``best``)."""

    units: list[tuple]
    tables: dict[float, list[np.ndarray]]
    binds: bool
    memory: float
    deadline: float
    best: np.ndarray | None = None
    values: dict[float, float] = field(default_factory=dict)  # λ -> the whole model's bound at λ

    def at(self, lam: float) -> float | None:
        """The whole model's chain at ``lam`` minus ``lam``·M (every run's into ``best``); None past the deadline."""
        if lam not in self.values:
            tables = _tables(self.units, lam, self.deadline)
            if tables is None:
                return None
            self.tables[lam] = tables
            bound = run_bounds(tables) - lam * self.memory
            self.best = bound if self.best is None else np.maximum(self.best, bound)
            self.values[lam] = float(bound[0, -1])
        return self.values[lam]


def interface_bounds(problem: Problem, deadline: float, first: Sequence[int] = ()) -> Interfaces | None:
    """The chain bound (module docstring) over :data:`MULTIPLIERS`, the chained plans, then the golden-section
    steps of each mesh — those in ``first`` first, then the largest first (where tile alone does worst) —
    within ``deadline`` (``time.monotonic()`` seconds); None when no mesh's bound was reached."""
    count = problem.units.count
    out = Interfaces(np.zeros((count + 1, count + 1, len(problem.meshes))), {})
    owners = weight_owners(problem)
    reached = False
    rest = sorted(range(len(problem.meshes)), key=lambda m: -problem.meshes[m].size)
    for m in dict.fromkeys([*first, *rest]):
        if problem.meshes[m].size == 1:
            continue  # one layout per tensor: nothing at a cut to convert, the units' sum is the chain
        chain = _mesh_chain(problem, problem.meshes[m], owners, deadline)
        if chain is None:
            break
        out.bound[:, :, m], reached = chain.best, True
        whole = WholeModel(problem, m)
        plans = chained_plans(chain, whole, deadline)
        if plans is not None:
            out.layouts[m], out.stages[m] = plans, whole.price(plans)
            _golden(chain)
            out.bound[:, :, m] = chain.best
        if time.monotonic() > deadline:
            break
    return out if reached else None


def _mesh_chain(problem: Problem, mesh, owners: dict[str, int], deadline: float) -> Chain | None:
    """The :class:`Chain` of ``mesh`` at λ = 0 and, where the weights bind, at :data:`MULTIPLIERS` (times the
    bound at λ = 0 per byte of a device's memory, as far as ``deadline`` allows); None past it before λ = 0's."""
    units = unit_networks(problem, mesh, owners, deadline)
    if units is None:
        return None
    memory = problem.cluster.memory
    inst = problem.instance(mesh)
    chain = Chain(units, {}, sum(inst.tensor(t).bytes for t in owners) > memory, memory, deadline)
    scale = chain.at(0.0)
    if scale is None:
        return None
    for multiplier in MULTIPLIERS[1:] if chain.binds else ():
        if chain.at(multiplier * scale / memory) is None:
            break
    return chain


def _golden(chain: Chain) -> None:
    """Golden-section steps on λ between the neighbours of the best λ tried (the whole model's value is concave
    in λ), as far as the chain's deadline allows."""
    if not chain.binds or len(chain.tables) < len(MULTIPLIERS):
        return
    grid = sorted(chain.tables)
    values = [chain.values[lam] for lam in grid]
    k = int(np.argmax(values))
    low, high = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
    ratio = (math.sqrt(5) - 1) / 2
    inner = [high - ratio * (high - low), low + ratio * (high - low)]
    found = [chain.at(lam) for lam in inner]
    for _ in range(GOLDEN_STEPS - 2):
        if None in found:
            return
        if found[0] >= found[1]:  # the maximum is in [low, inner[1]]
            high, inner[1], found[1] = inner[1], inner[0], found[0]
            inner[0] = high - ratio * (high - low)
            found[0] = chain.at(inner[0])
        else:  # in [inner[0], high]
            low, inner[0], found[0] = inner[0], inner[1], found[1]
            inner[1] = low + ratio * (high - low)
            found[1] = chain.at(inner[1])


def cut_tensors(problem: Problem, mesh) -> list[tuple[str, ...]]:
    """Per cut 0 .. units: its kept tensors (module docstring), largest first; none at the first and last."""
    inst = problem.instance(mesh)
    at: list[list[str]] = [[] for _ in range(problem.units.count + 1)]
    for t, reached in touching_units(problem).items():
        if len(reached) == 2 and max(reached) - min(reached) == 1:
            at[max(reached)].append(t)
    cuts = []
    for names in at:
        kept, joint = [], 1
        for t in sorted(names, key=lambda n: (-inst.tensor(n).bytes, n)):
            if joint * len(inst.tensor(t).domain) <= MAX_STATE:
                kept.append(t)
                joint *= len(inst.tensor(t).domain)
        cuts.append(tuple(kept))
    return cuts


def weight_owners(problem: Problem) -> dict[str, int]:
    """Each weight -> the first unit that touches it (where the memory rule charges it)."""
    inst = problem.instance(problem.meshes[0])
    return {t: min(reached) for t, reached in touching_units(problem).items() if inst.tensor(t).kind == "weight"}


@dataclass(frozen=True)
class UnitNetwork:
    """A unit's instance ``sub`` on a mesh as :func:`~onnxpart.tile.onnx.minibucket.kept_function` reads it: the
    network (reduced with its cut tensors kept whole and the weights' bytes weighed), its cut tensors at cut u
    (``before``) and cut u + 1 (``after``) and their variables (``keep``), the rows of its table (cut u's joint
    layouts) and its owned weights' variables."""

    sub: object
    before: tuple[str, ...]
    after: tuple[str, ...]
    network: object
    keep: tuple[int, ...]
    rows: int
    owned: tuple[int, ...]


def unit_networks(problem: Problem, mesh, owners: dict[str, int], deadline: float) -> list[tuple] | None:
    """Per unit, (its instance on ``mesh``, its :class:`UnitNetwork` — one object for equal units, built on the
    first); None past ``deadline``."""
    inst, units = problem.instance(mesh), problem.units
    cuts = cut_tensors(problem, mesh)
    shared: dict[tuple, UnitNetwork] = {}
    out = []
    for u in range(units.count):
        sub = restrict(inst, list(units.ops(u, u + 1)), memory=problem.cluster.memory)
        order = tensor_order(sub)
        owned = tuple(t for t in order if owners.get(t) == u)
        key = (signature(sub), *(tuple(order.index(t) for t in names) for names in (cuts[u], cuts[u + 1], owned)))
        if key not in shared:
            built = _network(sub, cuts[u], cuts[u + 1], owned, deadline)
            if built is None:
                return None
            shared[key] = built
        out.append((sub, shared[key]))
    return out


def _network(sub, before: tuple[str, ...], after: tuple[str, ...], owned: tuple[str, ...],
             deadline: float) -> UnitNetwork | None:
    from onnxpart.tile.onnx.elimination import Network
    from onnxpart.tile.onnx.reduce import reduce_instance

    if time.monotonic() > deadline:
        return None
    reduced = reduce_instance(sub, deadline=deadline, keep=frozenset(before + after))
    if reduced is None:
        return None
    return UnitNetwork(sub, before, after, Network(sub, reduced), tuple(sub.index[t] for t in before + after),
                       math.prod(len(sub.tensor(t).domain) for t in before), tuple(sub.index[t] for t in owned))


def _tables(units: list[tuple], lam: float, deadline: float) -> list[np.ndarray] | None:
    """Per unit, ``F_u`` at multiplier ``lam`` as a (cut u, cut u + 1) table; None past ``deadline``."""
    from onnxpart.tile.onnx.minibucket import kept_function

    made: dict[int, np.ndarray] = {}
    for _, unit in units:
        if id(unit) not in made:
            found = kept_function(unit.network, unit.keep, deadline, per_byte=dict.fromkeys(unit.owned, lam))
            if found is None:
                return None
            made[id(unit)] = found[0].reshape(unit.rows, -1)
    return [made[id(unit)] for _, unit in units]


def chained_plans(chain: Chain, whole: "WholeModel", deadline: float) -> list[list[dict]] | None:
    """The chained plans of ``whole``'s mesh (module docstring, **Plans**): the one at λ = 0, and where it does
    not fit and the weights bind, the least-k mix that fits (or the plan of the largest λ when none does); None
    past ``deadline`` before the first."""
    count, solved, fits = len(chain.units), {}, whole.fits

    def plan(lams: list[float]) -> list[dict] | None:
        tables = [chain.tables[lam][u] for u, lam in enumerate(lams)]
        return chained_layouts(chain.units, tables, lams, deadline, solved)

    first = plan([0.0] * count)
    if first is None or not chain.binds or fits(first):
        return None if first is None else [first]
    lams = sorted(chain.tables)
    found = plan([lams[-1]] * count)  # the most sharded: where it does not fit, no plan here does
    if found is None or not fits(found):
        return [first] + ([found] if found else [])
    low, high = 0, len(lams) - 1  # bisection: lams[low]'s plan does not fit, lams[high]'s does
    while high - low > 1:
        mid = (low + high) // 2
        middle = plan([lams[mid]] * count)
        if middle is None:
            return [first, found]
        low, high, found = (low, mid, middle) if fits(middle) else (mid, high, found)
    least, most = 0, count  # the first `most` units at lams[high], the rest at lams[low], fit; `least` do not
    while most - least > max(1, count // MIX_STEPS):
        k = (least + most) // 2
        mixed = plan([lams[high]] * k + [lams[low]] * (count - k))
        if mixed is None:
            break
        least, most, found = (least, k, mixed) if fits(mixed) else (k, most, found)
    return [first, found]


class WholeModel:
    """The whole model as one stage on mesh ``m``: chained unit plans merged into it, and what each holds per
    device there (measured once per plan)."""

    def __init__(self, problem: Problem, m: int):
        from onnxpart.plan.evaluate import stage_instance, stage_io

        self.problem, self.shape = problem, problem.run(0, problem.units.count, m)
        self.stage_of = stage_io(problem, self.shape)[0]
        self.sub = stage_instance(problem, self.shape, 0, self.stage_of)
        self.limit = problem.cluster.memory * (1 + 1e-12)
        self.measured: list[tuple[list[dict], dict, float]] = []  # (plan, merged layouts, bytes per device)

    def held(self, layouts: dict) -> float:
        """Bytes per device of the stage with ``layouts`` (:meth:`~onnxpart.plan.stages.Stage.memory`)."""
        from onnxpart.plan.evaluate import build_stage

        return build_stage(self.problem, self.shape, 0, self.stage_of, [], layouts=layouts).memory()["total"]

    def fits(self, pieces: list[dict]) -> bool:
        """Whether the plan ``pieces`` (per unit) fits a device: not when its weights alone are over."""
        layouts = merged_layouts(self.sub, pieces)
        if weight_bytes(self.sub, layouts) > self.limit:
            return False
        self.measured.append((pieces, layouts, self.held(layouts)))
        return self.measured[-1][2] <= self.limit

    def price(self, plans: list[list[dict]]):
        """The cheapest of ``plans`` that fits (else the cheapest) as the stage's
        :class:`~onnxpart.plan.refine.StagePrice`, with its memory (no bound: 0)."""
        from onnxpart.plan.refine import StagePrice

        ranked = []
        for pieces in plans:
            layouts, held = next(((x, h) for p, x, h in self.measured if p is pieces), (None, None))
            if layouts is None:
                layouts = merged_layouts(self.sub, pieces)
                held = self.held(layouts)
            ranked.append((held > self.limit, self.sub.cost(layouts), held, layouts))
        _, cost, held, layouts = min(ranked, key=lambda r: r[:3])
        return StagePrice(0.0, layouts, cost, memory=held)


def chained_layouts(units: list[tuple], tables: list[np.ndarray], lams: list[float], deadline: float,
                    solved: dict | None = None) -> list[dict] | None:
    """Per unit, its plan with the tensors at its cuts pinned to the layouts of the least chain of ``tables``
    over the whole model (:func:`run_argmin`), least in step time plus ``lams[u]`` times its owned weights'
    bytes per device (:func:`_pinned_plan`): unit plans that agree at every cut the chain holds; None past
    ``deadline``. Equal units pinned alike at one λ share one plan (``solved``, kept across calls)."""
    states = run_argmin(tables, 0, len(tables))
    solved = {} if solved is None else solved
    out = []
    for u, (sub, unit) in enumerate(units):
        key = (id(unit), states[u], states[u + 1], lams[u])
        if key not in solved:
            plan = _pinned_plan(unit, states[u], states[u + 1], lams[u], deadline)
            if plan is None:
                return None
            solved[key] = [plan[t] for t in tensor_order(unit.sub)]
        out.append(dict(zip(tensor_order(sub), solved[key])))
    return out


def _pinned_plan(unit: UnitNetwork, into: int, out: int, lam: float, deadline: float) -> dict | None:
    """The plan of ``unit.sub`` with cut u's tensors at joint layout ``into`` and cut u + 1's at ``out``, by
    mini-bucket decoding of its network (:func:`~onnxpart.tile.onnx.minibucket.decoded`): least in step time +
    ``lam`` × owned weight bytes per device where no bucket is split; None past ``deadline``."""
    from onnxpart.tile.onnx.minibucket import decoded

    sub, network, pins = unit.sub, unit.network, {}
    for names, state in ((unit.before, into), (unit.after, out)):
        if names:
            index = np.unravel_index(state, [network.sizes[sub.index[t]] for t in names])
            pins.update({sub.index[t]: int(k) for t, k in zip(names, index)})
    found = decoded(network, pins, deadline, per_byte=dict.fromkeys(unit.owned, lam))
    return None if found is None else network.layouts(found[0])


def run_bounds(functions: list[np.ndarray]) -> np.ndarray:
    """(units + 1, units + 1): min over the inner cuts' layouts of Σ_{u ∈ [i, j)} F_u, the first and last cuts'
    free (min-plus products along the chain); inf where j ≤ i."""
    count = len(functions)
    out = np.full((count + 1, count + 1), math.inf)
    for i in range(count):
        least = np.zeros(functions[i].shape[0])
        for u in range(i, count):
            least = (least[:, None] + functions[u]).min(axis=0)
            out[i, u + 1] = least.min()
    return out


def run_argmin(functions: list[np.ndarray], first: int, last: int) -> list[int]:
    """The joint layout index at each cut ``first`` .. ``last`` of a least chain over units [first, last)."""
    least = np.zeros(functions[first].shape[0])
    back = []
    for u in range(first, last):
        total = least[:, None] + functions[u]
        back.append(total.argmin(axis=0))
        least = total.min(axis=0)
    states = [int(least.argmin())]
    for chosen in reversed(back):
        states.append(int(chosen[states[-1]]))
    return states[::-1]
