"""A closed-form lower bound on the recomputed duration under the input order's stages (Moccasin §2.3):
the *event cover* bound, computed in milliseconds.

At the first computation of the op ``v`` at position ``p`` (the last event of stage ``p``, Eq. 11),
memory (Eq. 4) includes ``v``'s inputs, outputs and internal bytes, the graph outputs already computed,
and every tensor ``x`` computed before that event and read by an op at a later position: the first
computation of that reader reads a copy of ``x`` that was either computed before the event — and is then
retained across it — or computed after it, by a recomputation of ``x``'s producer ``u`` (which costs at
least ``w_u``). Tensors of producers that may not be recomputed (graph inputs, producers of graph
outputs, or ``C_v = 1``) are always retained. So if these tensors exceed the budget by ``E`` bytes, some
set of producers whose crossing outputs sum to at least ``E`` bytes is recomputed after the event: the
least total duration of such a set (a covering knapsack) bounds the recomputed duration; its LP value
(fractional, cheapest duration per byte first) is used. One recomputation may serve many events, so the
bound is the maximum over events, not the sum.
"""

from __future__ import annotations

from onnxpart.certificate import LowerBound
from onnxpart.remat.model import Instance

METHOD = "event-cover"
NOTE = ("holds under: the input topological order's stages (first computations in the input order), any "
        "number of recomputations; the largest covering-knapsack LP bound over first-computation events")


def event_cover_bound(instance: Instance, budget: float, max_copies: int) -> tuple[float | None, str]:
    """``(duration bound, status)``: status ``bound``, or ``infeasible`` (value None) when the tensors
    that must be resident at some event exceed the budget on their own."""
    position = {v: p for p, v in enumerate(instance.order)}
    sizes = instance.value_sizes
    last_read = [max((position[c] for c in instance.value_consumers[x]), default=-1) for x in range(len(sizes))]
    best = 0.0
    for p, v in enumerate(instance.order):
        if v >= instance.n_ops:
            continue
        own = set(instance.node_inputs[v]) | set(instance.node_outputs[v])
        fixed = float(sum(sizes[x] for x in own) + instance.internal[v] + instance.constant_bytes)
        droppable: dict[int, float] = {}  # producer -> bytes of its outputs retained across the event
        for x in range(len(sizes)):
            u = instance.value_producer[x]
            if x in own or position[u] >= p:
                continue
            if instance.value_to_end[x]:
                fixed += sizes[x]
            elif last_read[x] > p:
                if max_copies >= 2 and instance.recomputable(u):
                    droppable[u] = droppable.get(u, 0.0) + sizes[x]
                else:
                    fixed += sizes[x]
        excess = fixed + sum(droppable.values()) - budget
        if fixed > budget:
            return None, "infeasible"
        cost = 0.0
        for u in sorted(droppable, key=lambda u: instance.durations[u] / droppable[u]):
            if excess <= 0:
                break
            share = min(1.0, excess / droppable[u])
            cost += share * instance.durations[u]
            excess -= droppable[u]
        best = max(best, cost)
    return instance.base_duration + best, "bound"


def event_cover_entry(instance: Instance, budget: float, max_copies: int) -> LowerBound:
    """:func:`event_cover_bound` as a certificate entry."""
    value, status = event_cover_bound(instance, budget, max_copies)
    return LowerBound(METHOD, value, status, "formula", 0.0, NOTE)
