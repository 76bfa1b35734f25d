"""The broadcast relaxation: a proven lower bound, and a schedule, for graphs whose one-op cuts are broken
by tensors every layer reads — attention masks, rotary cos/sin tables — though a few cheap ops
near the inputs make them.

In a decoder export the mask is computed from a second graph input (``attention_mask``) and read by the
attention of every layer, so no op separates one layer from the next: SPLIT's modules (:mod:`.split`)
hold most of the graph (Llama: 131 of 158 ops before the first cut) or there are none (the KV-cache
decoder step), and their bounds stay weak. Without those few ops the residual stream is a chain of
one-op cuts again.

Relaxation. For any set ``D`` of ops, the instance ``G − D`` — ``D``'s ops deleted, the tensors they
made available on every device at time 0, like graph inputs — has ``OPT(G − D) ≤ OPT(G)``. *Proof:* drop
``D``'s ops from an optimal schedule of ``G``. Every other op keeps its device and start: its
predecessors outside ``D`` end when they did, with the same transfer delays (Section 2.3); its inputs
from ``D`` are now there at time 0, on every device; each device runs a subset of the same intervals, so
no two overlap; each device's memory sum (3.7) only loses terms. So it is a schedule of ``G − D``, and
its makespan, the largest end over fewer ops, is no larger. Any proven lower bound of ``G − D`` — here
SPLIT's DP over its modules' proven bounds — is therefore one of ``G`` (``broadcast-dp``). It gives up
``D``'s own work and transfers (Llama: 30 µs of 0.35 ms), which is why ``D`` is kept small.

Where no one-op cut splits ``G`` itself, the skip edges ``E`` of ``G − D`` (the residual around each
attention block, where dropping it cuts a module smaller) go too, another relaxation (:mod:`.skip_edges`):
``broadcast-dp`` is SPLIT's DP on ``G − D − E``. There the relaxation is the bound's only source, and
its layers must close (KV-cache decoder step: 1.571 → 1.807 ms). Where ``G`` has one-op modules, ``G −
D``'s layers close as they are and ``E`` only adds pairs: Llama-KV's relaxation proved the same 0.2946
ms in 5.1 s without ``E`` and 9.6 s with it (14 s, two workers, load 0.6), too late in a loaded run.

The choice of ``D`` is a heuristic (the proof holds for any ``D``): where the graph has several sources,
the ops that are not descendants of the *main* one — the source whose descendants carry the most work,
each op at its fastest device (the lowest index breaks ties). ``D`` is closed under predecessors (an
ancestor of a non-descendant is one), so its ops can run first. The relaxation is used only where it
frees smaller modules than the graph has (:func:`relaxation`); SPLIT on ``G − D − E`` then runs first,
within :func:`share` of SPLIT's time (:func:`onnxpart.schedule.latency.solve`).

Schedule. SPLIT's joined schedule of ``G − D − E`` is lifted onto ``G`` (:func:`lift`): ``D``'s ops all on
one device (the best of the K), first or just before their readers, the other ops in their relaxed start
order on their relaxed devices, re-simulated with every transfer ``D``'s tensors and ``E`` now need (Llama: 0.3116
ms, under CPoP's 0.3139; with ``D`` first, 0.3154).
"""

from __future__ import annotations

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, has_modules, segments
from onnxpart.schedule.common.solution import shortest
from onnxpart.schedule.latency import skip_edges, split
from onnxpart.schedule.latency.simulator import Schedule, simulate

#: The share of SPLIT's time within which SPLIT on the relaxation runs, before SPLIT on the whole graph
#: (which proves what the relaxation cannot: the deleted ops' work). Its modules are small and repeated
#: (one solve per layer shape, :mod:`.split`): it proves the relaxed optimum of the Llama, Llama-KV and
#: T5 exports in 6 s, of BERT in 2 s; the KV-cache decoder's bound is 1.530 ms at 0.1, 1.555 at 0.25.
#: Where SPLIT over one-op cuts follows, it keeps the budgets of the whole time (BERT's proves its
#: schedule with 50 s, not 45: taking a share from them cost BERT's LB/UB 1.000 → 0.914).
SHARE = 0.25

#: The share where ``G`` itself has no one-op module: SPLIT on ``G`` is then multi-channel SPLIT (Section
#: 3.3.2, a heuristic whose recursive bound is weak) or one whole-graph CP-SAT solve, so the relaxation's
#: modules are where a proof comes from. KV-cache decoder step at 60 s: ``broadcast-dp`` 1.675 ms at 0.25
#: (multi-channel's 1.302), 1.807 with 40 s (the schedule 1.854 either way).
SHARE_WITHOUT_MODULES = 0.75


def broadcast_ops(inst: Instance) -> list[int]:
    """``D``: the ops that are not descendants of the main source (module docstring), in topological order;
    [] for a graph with one source."""
    sources = [i for i in range(inst.n) if not inst.preds[i]]
    if len(sources) < 2:
        return []
    reach = inst.ancestors_closure()
    fastest = inst.time.min(axis=1)
    main = max(sources, key=lambda s: (float(fastest[reach[s]].sum()), -s))
    return [i for i in inst.topo if i != main and not reach[main, i]]


def largest_module(inst: Instance) -> int:
    """The ops of SPLIT's largest module (:mod:`onnxpart.schedule.common.modules`); all of them without
    one."""
    cuts = cut_ops(inst)
    if not has_modules(inst, cuts):
        return inst.n
    return max(len(ops) for ops, _, _ in segments(inst, cuts))


def share(inst: Instance) -> float:
    """The share of SPLIT's time SPLIT on the relaxation gets: :data:`SHARE`, or
    :data:`SHARE_WITHOUT_MODULES` where no one-op cut splits ``G``."""
    return SHARE_WITHOUT_MODULES if largest_module(inst) == inst.n else SHARE


def relaxation(inst: Instance) -> tuple[Instance, list[int], list[int]] | None:
    """``(G − D − E, its ops' indices in G, D)`` — ``E`` the skip edges of ``G − D`` (:mod:`.skip_edges`:
    another relaxation, so the bound stands) where no one-op cut splits ``G``, else none —, or None where
    ``D`` is empty or ``G − D − E`` has no modules or none smaller than ``G``'s largest."""
    deleted = broadcast_ops(inst)
    if not deleted or len(deleted) == inst.n:
        return None
    gone = set(deleted)
    relaxed, index = inst.subinstance([i for i in inst.topo if i not in gone])
    largest = largest_module(inst)
    if largest == inst.n:  # no one-op module in G: the relaxation is where the bound comes from
        relaxed = skip_edges.relax(relaxed)
    if largest_module(relaxed) >= min(largest, relaxed.n):
        return None
    return relaxed, index, deleted


def lift(inst: Instance, relaxed: Schedule, index: list[int], deleted: list[int]) -> Schedule | None:
    """The relaxed schedule on the whole instance (module docstring, "Schedule"): the shortest over the
    device that runs ``D``, ``D`` first or each op of it just before the first op it feeds, appended or
    inserted into idle time; None where no device can run all of ``D`` or the mapping breaks memory (3.7)
    or the links."""
    kept = [index[local] for local in split.order_by_start_local(relaxed)]
    reach, placed, just_in_time = inst.ancestors_closure(), set(), []
    for op in kept:  # D is closed under predecessors: each op's own inputs from D are placed before it
        due = [d for d in deleted if d not in placed and reach[d, op]]
        placed.update(due)
        just_in_time += due + [op]
    just_in_time += [d for d in deleted if d not in placed]
    found = None
    for u in range(inst.k):
        mapping = np.full(inst.n, u, dtype=np.int64)
        mapping[index] = relaxed.mapping
        if not inst.mapping_violations(mapping):
            found = shortest(found, *(simulate(inst, mapping, order, insertion=insertion)
                                      for order in (deleted + kept, just_in_time) for insertion in (False, True)))
    return found


def broadcast_split(inst: Instance, relaxed: tuple[Instance, list[int], list[int]], time_limit: float,
                    seed: int = 0, workers: int = 1) -> tuple[Schedule | None, LowerBound]:
    """MILP-SPLIT on ``G − D`` (:func:`relaxation`) within ``time_limit`` seconds: -> (its schedule lifted
    onto ``G``, the ``broadcast-dp`` bound, proven for ``G``)."""
    sub, index, deleted = relaxed
    res = split.milp_split(sub, time_limit, seed=seed, workers=workers)
    note = (f"SPLIT over {len(res.modules)} modules with {len(deleted)} broadcast ops deleted "
            f"(their tensors at time 0 everywhere); {res.reason}".rstrip("; "))
    bound = LowerBound("broadcast-dp", res.bound, res.status, "cp-sat+highs", res.seconds, note)
    return (lift(inst, res.schedule, index, deleted) if res.schedule is not None else None), bound
