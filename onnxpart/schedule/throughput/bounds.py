"""Proven lower bounds on the batch makespan ``C`` of the throughput objective (certified throughput
``L / bound``): the per-input critical path and the load LP over splits (or over slices, where the splits
are too many to list), whose rounded optimum is also a start for the searches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from time import monotonic as now

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency.scale import skip_reason
from onnxpart.schedule.throughput import heuristics
from onnxpart.schedule.throughput.model import Split, add_load, fits, op_families, op_sizes
from onnxpart.schedule.throughput.simulator import BatchSchedule, simulate, slice_order
from onnxpart.solvers import SparseModel, solve_highs


def _min_slices(inst: Instance) -> list[float]:
    """Each op's fastest slice: the least time over the devices it can run on and their supported sizes."""
    allowed, fastest = inst.allowed_mask(), np.full(inst.n, math.inf)
    for u, sizes in enumerate(inst.batch_sizes):
        for b in sizes:
            fastest = np.minimum(fastest, np.where(allowed[:, u], inst.batch_times(u, b), math.inf))
    return fastest.tolist()


def critical_path_bound(inst: Instance, batch: int) -> LowerBound:
    """Every input crosses every path: along a path each op's slice holding a given input takes at
    least the op's fastest (device, supported size) time, and the slices of one input are ordered."""
    t0 = now()
    fastest = _min_slices(inst)
    finish = [0.0] * inst.n
    for i in inst.topo:
        finish[i] = fastest[i] + max((finish[p] for p in inst.preds[i]), default=0.0)
    return LowerBound("critical-path", max(finish), "bound", "formula", now() - t0,
                      "per-input longest path at each op's fastest slice; transfers free")


@dataclass
class LoadLP:
    """The load LP's proven bound and its fractional splits rounded to a schedule (None where the LP
    found no optimum or no rounding fits memory)."""

    bound: LowerBound
    rounded: BatchSchedule | None


def load_lp(inst: Instance, batch: int, time_limit: float = 10.0) -> LoadLP:
    """LP over fractional splits: ``Σ_s z_is = 1``, ``Σ_i Σ_s z_is·t(i,u,s_u) ≤ C`` per device (each
    device computes at most ``C`` seconds), and path rows ``e_i ≥ e_p + Σ_s z_is·m_i(s)``, ``C ≥ e_i``
    with ``m_i(s)`` the shortest slice of split ``s``, and memory (3.7) per device as a sum over the
    chosen splits. *Proof:* a schedule's splits are a 0/1 ``z`` (meeting 3.7);
    for any one input ``x``, ``e_i`` = the end of the slice of ``i`` holding ``x`` satisfies the path
    rows (that slice starts after the slice of each predecessor holding ``x`` ends, and lasts at least
    ``m_i``). At least the work bound "total work at the best split over the number of devices".
    Where the split families are canonical (:func:`.model.split_family`), the load and memory rows are summed
    over each class of interchangeable devices (``≤ |class|·C``, ``≤ |class|·capacity``): sorting a
    split's sizes within a class keeps those sums and ``m_i``, so every schedule still gives a feasible
    ``z``. Where some family is cut at :data:`.model.MAX_SPLITS`, :func:`_slice_lp` replaces it.
    Its optimum, rounded (:func:`_rounded`), is also a start for the searches: it chooses which ops
    hold the activations that do not fit the fast devices by the compute they cost, where list
    scheduling fills the fast devices first and leaves the graph's end to the slowest. On a graph too big
    for it in ``time_limit`` (:func:`..latency.scale.skip_reason`; 9 s past a 1.25 s limit on 20,000 ops)
    it is listed ``skipped``."""
    t0 = now()
    why = skip_reason("lp", inst.n, time_limit)
    if why:
        return LoadLP(LowerBound("load-lp", None, "skipped", "highs", 0.0, why), None)
    families = op_families(inst, batch)
    if not all(f.complete for f in families):
        return _slice_lp(inst, batch, time_limit, t0)
    cands = [f.splits for f in families]
    groups = inst.symmetry_classes() if any(f.canonical for f in families) else [[u] for u in range(inst.k)]
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    z = [[lp.var(0, 1) for _ in cands[i]] for i in range(inst.n)]
    for i in range(inst.n):
        lp.row({col: 1.0 for col in z[i]}, 1.0, 1.0)
    for group in groups:  # (3.7) and the loads per device, or per class of interchangeable devices
        load: dict[int, float] = {c: -float(len(group))}
        memory: dict[int, float] = {}
        for i in range(inst.n):
            for col, s in zip(z[i], cands[i]):
                for u in group:
                    if s[u] > 0:
                        load[col] = load.get(col, 0.0) + inst.time_batch(i, u, s[u])
                        memory[col] = memory.get(col, 0.0) + inst.mem[i] + inst.act_mem[i] * (s[u] - 1)
        lp.row(load, upper=0.0)
        cap = sum(inst.capacity[u] for u in group)
        if math.isfinite(cap):
            lp.row(memory, upper=cap)
    # per-input paths: e_i ≥ e_p + Σ_s z_is·(shortest slice of s), C ≥ e_i
    e = [lp.var(0, math.inf) for _ in range(inst.n)]
    for i in range(inst.n):
        dur = {col: min(inst.time_batch(i, u, x) for u, x in enumerate(sp) if x > 0) for col, sp in zip(z[i], cands[i])}
        for p in inst.preds[i] or [None]:
            lp.row({**{col: -d for col, d in dur.items()}, e[i]: 1.0, **({e[p]: -1.0} if p is not None else {})},
                   lower=0.0)
        lp.row({e[i]: 1.0, c: -1.0}, upper=0.0)
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else None
    rows = "per class of interchangeable devices" if len(groups) < inst.k else "per device"
    bound = LowerBound("load-lp", value, res.status, "highs", now() - t0,
                       f"LP relaxation over splits: loads ≤ C and memory (3.7) {rows}, per-input paths ≤ C")
    weights = [np.asarray(res.values)[cols] for cols in z] if value is not None else None
    return LoadLP(bound, _rounded(inst, batch, cands, weights) if weights is not None else None)


def _slice_lp(inst: Instance, batch: int, time_limit: float, t0: float) -> LoadLP:
    """The load LP for systems whose splits are too many to list: a variable ``y_iub`` per op, device and
    size (:func:`op_sizes`) instead of one per split, with ``Σ_b y_iub ≤ 1`` (3.5), ``Σ_u Σ_b b·y_iub =
    L`` (3.4), the device loads ``≤ C`` and memory (3.7). *Proof:* a schedule's slices are a 0/1 ``y``
    meeting every row. It has no path rows (the shortest slice of a split is not linear in ``y``; the
    critical-path bound covers paths) and no rounding."""
    lp = SparseModel()
    c = lp.var(0, math.inf, cost=1.0)
    load: list[dict[int, float]] = [{c: -1.0} for _ in range(inst.k)]
    memory: list[dict[int, float]] = [{} for _ in range(inst.k)]
    for i in range(inst.n):
        inputs: dict[int, float] = {}
        for u, sizes in enumerate(op_sizes(inst, i, batch)):
            ys = {lp.var(0, 1): b for b in sizes}
            if ys:
                lp.row({y: 1.0 for y in ys}, upper=1.0)
            for y, b in ys.items():
                inputs[y] = float(b)
                load[u][y] = inst.time_batch(i, u, b)
                memory[u][y] = inst.mem[i] + inst.act_mem[i] * (b - 1)
        lp.row(inputs, float(batch), float(batch))
    for u in range(inst.k):
        lp.row(load[u], upper=0.0)
        if math.isfinite(inst.capacity[u]) and memory[u]:
            lp.row(memory[u], upper=inst.capacity[u])
    res = solve_highs(lp.highs(), time_limit)
    value = res.bound if res.status == "optimal" else None
    return LoadLP(LowerBound("load-lp", value, res.status, "highs", now() - t0,
                             "LP relaxation over slices (too many splits to list): device loads ≤ C, "
                             "memory (3.7)"), None)


def _rounded(inst: Instance, batch: int, cands: list[list[Split]], weights: list[np.ndarray]) -> BatchSchedule | None:
    """Each op's split of largest LP weight that still fits memory, the ops taken most decided first
    (so the ops the LP leaves fractional give way), then list-scheduled in bHEFT's rank order with
    insertion; None if some op fits nowhere."""
    load = np.zeros(inst.k)
    splits: list = [None] * inst.n
    for i in sorted(range(inst.n), key=lambda i: (-weights[i].max(), i)):
        ok = [n for n in np.argsort(-weights[i], kind="stable") if fits(inst, load, i, cands[i][n])]
        if not ok:
            return None
        splits[i] = cands[i][ok[0]]
        add_load(inst, load, i, splits[i])
    return simulate(inst, splits, slice_order(inst, splits, heuristics.heft_order(inst, batch)), insertion=True)
