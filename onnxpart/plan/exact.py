"""The ``dp`` method: the dynamic program (:mod:`onnxpart.plan.dp`) over the plan family on tile's unit table
(:mod:`onnxpart.plan.unit_costs`), the chosen shape priced in full (:mod:`onnxpart.plan.evaluate`), and the
proven lower bound over the family.

**Estimates** (what the search ranks shapes by): a stage's compute is the sum of its units' tile step times
(on small families, the stage's own: :func:`onnxpart.plan.unit_costs.exact_runs`; the stage's price where
the search priced it, or tile's optimum where the bound's refinement found it — the units' sums leave out what
stitching their plans costs —, else the less of the units' sum and a plan of the whole stage: tile's first, or
the chained units' :mod:`onnxpart.plan.interfaces`, with that plan's memory where it was measured);
the transfer into the stage before unit i is ``latency + crossing bytes(i) / |m| / bandwidth`` (its devices
each receive their share; the network when the mesh's neighbour must be in another node, else the node's
link); its memory the sum of its units' plans' bytes per device plus its received shares in flight. A shape
whose full price does not fit is barred and the search runs again, as it does after each shape is priced
(:func:`onnxpart.plan._search`).

**The bound** (:func:`family_bound`): the same program on ``Σ lower[u, m]`` for compute (or the chain over the
run's cuts, :mod:`onnxpart.plan.interfaces`, or the run's own bound where tile priced it whole,
:mod:`onnxpart.plan.refine`, whichever is largest), the least time each
stage must spend receiving what its first unit reads (:func:`_least_transfer`), and
``Σ floor[u, m]`` ≤ the device's memory as the only memory rule, minimized over the replica counts the family
allows. Every plan of the family costs at least that (:mod:`onnxpart.plan.unit_costs` says why each term is
below the plan's), so it is proven; no plan of the family fits memory when it finds none.
"""

from __future__ import annotations

import math
import time

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.plan import dp
from onnxpart.plan.cluster import SubMesh
from onnxpart.plan.model import Problem, Shape


def _prefix(values: np.ndarray) -> np.ndarray:
    """(units + 1, units + 1, meshes) sums of ``values`` (units, meshes) over every run [i, j); inf for j ≤ i."""
    total = np.vstack([np.zeros((1, values.shape[1])), np.cumsum(values, axis=0)])
    runs = total[None, :, :] - total[:, None, :]
    upper = np.triu(np.ones((len(total), len(total)), dtype=bool), k=1)
    return np.where(upper[:, :, None], runs, math.inf)


def _transfer(problem: Problem, mesh: SubMesh) -> np.ndarray:
    """The estimated transfer at each unit cut (0 .. units) into or out of ``mesh`` (module docstring)."""
    cluster, units = problem.cluster, problem.units
    crosses = cluster.nodes > 1 and (mesh.size >= cluster.devices_per_node)
    link = cluster.inter if crosses else cluster.intra
    cuts = np.array([units.cut_bytes(c) for c in range(units.count + 1)])
    out = link.latency + cuts / mesh.size / link.bandwidth
    out[0] = out[-1] = 0.0
    return out


def estimates(problem: Problem, table, micro_batches: int, barred: set) -> tuple[np.ndarray, np.ndarray]:
    """(lat, per) of every run on every mesh (:mod:`onnxpart.plan.dp`), inf where over memory or barred."""
    compute, memory = _prefix(table.upper), _prefix(table.memory)
    if table.runs is not None:
        for (i, j, m), (seconds, held, received) in table.runs.items():
            compute[i, j, m] = seconds
            memory[i, j, m] = held + (min(2, micro_batches) - 1) * received
    for (i, j, m), price in table.stages.items():
        # a price, or tile's first plans of a stage it did not solve: the less (with its memory where known)
        if price.layouts is not None and (price.optimal or price.priced or price.cost <= compute[i, j, m]):
            compute[i, j, m] = price.cost
            if price.memory is not None:  # with the received shares in flight where the runs' memory has them
                received = table.runs.get((i, j, m), (0, 0, 0.0))[2] if table.runs is not None else 0.0
                memory[i, j, m] = price.memory + (min(2, micro_batches) - 1) * received

    tx = np.stack([_transfer(problem, m) for m in problem.meshes], axis=1)  # (units + 1, meshes)
    cuts = np.array([problem.units.cut_bytes(c) for c in range(problem.units.count + 1)])
    cuts[0] = 0.0
    sizes = np.array([m.size for m in problem.meshes], dtype=float)
    held = memory if table.runs is not None else \
        memory + (min(2, micro_batches) - 1) * (cuts[:, None, None] / sizes[None, None, :])
    lat = compute + tx[:, None, :]
    per = lat + tx[None, :, :]
    over = held > problem.cluster.memory * (1 + 1e-12)
    for i, j, m in barred:
        over[i, j, m] = True
    return np.where(over, math.inf, lat), np.where(over, math.inf, per)


def _least_transfer(problem: Problem) -> np.ndarray:
    """(units + 1, meshes): the least time a stage starting at unit i on mesh m spends receiving — its devices
    together take in at least the bytes its first unit reads from earlier units, each at most at the faster
    link's bandwidth, after at least the shorter latency (0 for the first stage, or when nothing is read)."""
    cluster, units = problem.cluster, problem.units
    fastest = max(cluster.intra.bandwidth, cluster.inter.bandwidth)
    shortest = min(cluster.intra.latency, cluster.inter.latency)
    need = np.append(units.needed, 0.0)
    need[0] = 0.0
    sizes = np.array([m.size for m in problem.meshes], dtype=float)
    return np.where(need[:, None] > 0, shortest + need[:, None] / (sizes[None, :] * fastest), 0.0)


def family_bound(problem: Problem, table) -> tuple[LowerBound, tuple[tuple[int, int, int], ...]]:
    """The proven lower bound over the plan family (module docstring), value None when no plan fits; and the
    runs (first unit, end unit, mesh) of the shape that attains it."""
    start = time.monotonic()
    compute = _prefix(table.lower)
    if table.chain is not None:
        compute = np.maximum(compute, table.chain)
    for (i, j, m), price in table.stages.items():
        compute[i, j, m] = max(compute[i, j, m], price.lower)
    compute = compute + _least_transfer(problem)[:, None, :]
    fits = _prefix(table.floor) <= problem.cluster.memory * (1 + 1e-12)
    lat = np.where(fits, compute, math.inf)
    sizes = np.array([m.size for m in problem.meshes])
    best, runs = math.inf, ()
    for replicas, micro in problem.replica_options():
        found = dp.solve(lat, lat, sizes, problem.cluster.devices // replicas, micro, bound=True)
        if found is not None and found.value < best:
            best, runs = found.value, found.stages
    status = "bound" if math.isfinite(best) else "infeasible"
    return LowerBound("plan-dp", best if math.isfinite(best) else None, status, "dp", time.monotonic() - start,
                      note=f"the dynamic program over the family on tile's proven unit bounds "
                           f"({problem.units.count} units × {len(problem.meshes)} sub-meshes; "
                           f"{'each run also by the chain over its cuts; ' if table.chain is not None else ''}"
                           f"{len(table.stages)} runs bounded whole by tile), each stage's incoming transfer at "
                           "its least (the bytes its first unit reads over its devices at the faster link), "
                           "memory by each unit's least weight bytes per device"), runs


def search(problem: Problem, table, deadline: float, barred: set = frozenset()) -> list[tuple[float, Shape]]:
    """Per replica count, the shape the estimates rank first, ``barred`` runs left out: (estimate, shape), best
    first."""
    out = []
    for replicas, micro in problem.replica_options():
        shape = best_shape(problem, table, replicas, micro, barred, deadline)
        if shape is not None:
            out.append(shape)
    return sorted(out, key=lambda pair: pair[0])


def best_shape(problem: Problem, table, replicas: int, micro: int, barred: set,
               deadline: float) -> tuple[float, Shape] | None:
    """The shape of least estimate on ``replicas`` replicas of ``micro`` micro-batches, ``barred`` runs left out."""
    lat, per = estimates(problem, table, micro, barred)
    sizes = np.array([m.size for m in problem.meshes])
    found = dp.solve(lat, per, sizes, problem.cluster.devices // replicas, micro, deadline=deadline,
                     clock=time.monotonic)
    if found is None:
        return None
    units = problem.units
    stages = tuple((tuple(units.ops(i, j)), problem.meshes[m]) for i, j, m in found.stages)
    return found.value, Shape(stages, replicas, micro, tuple((i, j) for i, j, _ in found.stages))
