"""The load dual's mapping (issue 30): each op on the device of least ``λ_u·t(i,u) + μ_u·mem_i`` at the
point where :func:`onnxpart.schedule.latency.load_cuts.maximized` proved the load LP's value, then list
scheduled by HEFT's upward rank with insertion.

Why: where memory (3.7) binds, the list schedulers place ops where they finish first until the fast
devices are full and everything after on the slow one, whatever those ops cost there. On the 20,000-op
random DAG on CPU + T4 + A100 (127 GB of op bytes, 96 GB on the GPUs) that left 2.2 s of work on the CPU
(HEFT's makespan 2.237 s) where the load LP proves 0.724 s. The dual's prices ``μ`` are what a byte on a
full device is worth in time, so the ops the dual sends to the CPU are the ones of most bytes per second
lost there: this mapping's makespan was 0.729 s. Lagrangian solutions may overfill a device at ties, so
the ops are placed in decreasing regret (the cost of their second-best device minus their best), each
on its best device with memory left, as in assignment heuristics for the generalized assignment problem
(Martello and Toth 1981); among devices of equal cost (identical GPUs: the dual cannot tell them apart)
the least loaded so far, else one host and 8 A100s put every op on the first A100.
"""

from __future__ import annotations

import numpy as np

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.latency.load_cuts import maximized


def dual_mapping(inst: Instance) -> np.ndarray | None:
    """Each op's device (module docstring); None when some op fits no device's remaining memory."""
    dual, _, point, _ = maximized(inst)  # the cutting planes the load-cuts bound ran, once
    cost = dual.costs(point)
    ranked = np.argsort(cost, axis=1, kind="stable")
    by_cost = np.take_along_axis(cost, ranked, axis=1)
    second = by_cost[:, 1] if inst.k > 1 else by_cost[:, 0]
    regret = np.where(np.isfinite(second), second - by_cost[:, 0], np.inf)  # one device: place it first
    mapping = np.full(inst.n, -1, dtype=np.int64)
    used, load = np.zeros(inst.k), np.zeros(inst.k)
    for i in np.argsort(-regret, kind="stable"):
        room = [u for u in ranked[i] if np.isfinite(cost[i, u])
                and used[u] + inst.mem[i] <= inst.capacity[u] * (1 + 1e-12)]
        if not room:
            return None
        least = cost[i, room[0]]
        u = min((v for v in room if cost[i, v] <= least + 1e-9 * abs(least)), key=lambda v: (load[v], v))
        mapping[i] = u
        used[u] += inst.mem[i]
        load[u] += inst.time[i, u]
    return mapping
