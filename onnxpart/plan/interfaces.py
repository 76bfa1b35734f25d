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
the owned weights' bytes per device added) minus λ·M bounds every stage that fits; the best over
:data:`MULTIPLIERS` is kept (only λ = 0 when the weights, all replicated, fit M: then no λ > 0 does better).
Without it, a model whose weights must be sharded to fit (Llama-70B on one node) is bounded by plans that
replicate them.

**Plans.** The chain's argmin over the whole model (:func:`run_argmin`, at the λ best there) pins each unit's
cut tensors; tile's plan of each unit so pinned (:func:`chained_layouts`) agrees with its neighbours at every
cut the chain holds — a start for the stages' layouts (:mod:`onnxpart.plan.evaluate`) that the units' own plans,
each choosing its edges alone, are not.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from onnxpart.plan.model import Problem
from onnxpart.plan.stages import restrict, signature, tensor_order
from onnxpart.plan.unit_costs import touching_units

#: The most joint layouts of the tensors kept at one cut (a unit's table is at most its square: 8 MB).
MAX_STATE = 1024
#: The memory rule's multipliers λ, in units of the whole model's chain bound at λ = 0 per byte of a device's
#: memory (module docstring): where the weights' memory binds, the best of them is near the Lagrangian dual's.
MULTIPLIERS = (0.0,) + tuple(4.0 ** k for k in range(-3, 4))


@dataclass
class Interfaces:
    """What the chain gives the plan: ``bound`` (units + 1, units + 1, meshes), the chain bound of every run
    [i, j) on every sub-mesh, inf where j ≤ i, 0 on one device and on a mesh not reached in time; ``layouts``:
    mesh index -> per unit, its plan with the tensors at its cuts in the layouts of the whole model's least
    chain (:func:`chained_layouts`), for the meshes reached in time."""

    bound: np.ndarray
    layouts: dict[int, list[dict]]


def interface_bounds(problem: Problem, deadline: float, seed: int = 0) -> Interfaces | None:
    """The chain bounds (module docstring) of every mesh, then the chained unit plans, within ``deadline``
    (``time.monotonic()`` seconds); None when no mesh's bound was reached."""
    count = problem.units.count
    out = Interfaces(np.zeros((count + 1, count + 1, len(problem.meshes))), {})
    owners = weight_owners(problem)
    chains = {}
    for m in sorted(range(len(problem.meshes)), key=lambda m: -problem.meshes[m].size):  # where tile needs it most
        if problem.meshes[m].size == 1:
            continue  # one layout per tensor: nothing at a cut to convert, the units' sum is the chain
        found = _mesh_bound(problem, problem.meshes[m], owners, deadline)
        if found is None:
            break
        out.bound[:, :, m], chains[m] = found
    for m, (units, tables) in chains.items():
        layouts = chained_layouts(units, tables, deadline, seed)
        if layouts is None:
            break
        out.layouts[m] = layouts
    return out if chains else None


def _mesh_bound(problem: Problem, mesh, owners: dict[str, int], deadline: float) -> tuple | None:
    """(the best over :data:`MULTIPLIERS` of each λ's chain minus λ·M on ``mesh``, (the units' networks, the
    tables at the λ best for the whole model)); None past ``deadline``."""
    units = unit_networks(problem, mesh, owners, deadline)
    if units is None:
        return None
    best, chosen, scale = None, None, 0.0
    memory = problem.cluster.memory
    inst = problem.instance(mesh)
    binds = sum(inst.tensor(t).bytes for t in owners) > memory  # else Σ B_u ≤ M always: λ > 0 adds nothing
    for multiplier in MULTIPLIERS if binds else (0.0,):
        lam = multiplier * scale / memory
        tables = _tables(units, lam, deadline)
        if tables is None:
            break
        bound = run_bounds(tables) - lam * memory
        if best is None or bound[0, -1] > best[0, -1]:
            chosen = tables
        best = bound if best is None else np.maximum(best, bound)
        scale = scale or float(best[0, -1])
    return None if best is None else (best, (units, chosen))


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


def chained_layouts(units: list[tuple], tables: list[np.ndarray], deadline: float, seed: int = 0) -> list[dict] | None:
    """Per unit, tile's plan of its instance with the tensors at its cuts pinned to the layouts of the least
    chain over the whole model (:func:`run_argmin` on ``tables``): unit plans that agree at every cut the chain
    holds; None past ``deadline``. Equal units pinned alike share one solve."""
    states = run_argmin(tables, 0, len(tables))
    solved: dict[tuple, list] = {}
    out = []
    for u, (sub, unit) in enumerate(units):
        key = (id(unit), states[u], states[u + 1])
        if key not in solved:
            if time.monotonic() > deadline:
                return None
            plan = _pinned_plan(unit, states[u], states[u + 1], deadline, seed)
            solved[key] = [plan[t] for t in tensor_order(unit.sub)]
        out.append(dict(zip(tensor_order(sub), solved[key])))
    return out


def _pinned_plan(unit: UnitNetwork, into: int, out: int, deadline: float, seed: int) -> dict:
    """Tile's plan (local, then exact) of ``unit.sub`` with cut u's tensors at joint layout ``into`` and cut
    u + 1's at ``out``, in at most a second or what is left before ``deadline``."""
    from onnxpart import tile
    from onnxpart.tile.onnx import LayoutOptions

    sub, pins = unit.sub, {}
    for names, state in ((unit.before, into), (unit.after, out)):
        if names:
            index = np.unravel_index(state, [len(sub.tensor(t).domain) for t in names])
            pins.update({t: sub.tensor(t).domain[k] for t, k in zip(names, index)})
    tensors = tuple(dataclasses.replace(t, domain=(pins[t.name],)) if t.name in pins else t for t in sub.tensors)
    pinned = dataclasses.replace(sub, tensors=tensors, memory=None, memo={})
    seconds = max(0.05, min(1.0, deadline - time.monotonic()))
    return dict(tile.solve(pinned, LayoutOptions(("local", "exact"), seconds, 1, seed), seconds=seconds).plan.layouts)


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
