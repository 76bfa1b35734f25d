"""Idle-span planning: the greedy heuristic's first answer on large graphs (:mod:`.heuristics`).

A tensor read far apart (a residual or skip edge) is resident through the *idle span* between two of its
reads. Freeing it over that span and recomputing its producer in the stage of the later read trades
its bytes for the bytes of the producer's inputs, which must then stay resident up to that stage. The
eviction policy (:mod:`.eviction`) decides only when the budget is exceeded, when those inputs have
usually been freed long ago, so the recomputation would need a long chain of recomputations first and is
not a candidate (on a 20,000-op DAG every variant then goes over the budget at ``--budget 95%``). This
planner decides on the whole sequence at once, on the input order's memory profile: it applies the span
whose freeing removes the most bytes over the budget per unit of recompute duration (net of the inputs
kept longer), until the estimated profile fits, and re-simulates the result (:mod:`.sequence`, the
ground truth) — repeating on the simulated profile while it does not fit.

Each producer is recomputed at most once (``C_v ≥ 2``); a tensor freed over a span is never an input a
planned recomputation keeps, and the reverse, so the estimate adds up span by span. Linear-ish: every
candidate costs its span in array slices, and a lazy priority queue re-scores only the best.
"""

from __future__ import annotations

import heapq

import numpy as np

from onnxpart.remat.eviction import Event
from onnxpart.remat.model import Instance
from onnxpart.remat.sequence import simulate

#: At most this many rounds of planning on the simulated profile (the estimate misses the recompute
#: events' own memory; one or two more rounds cover it).
ROUNDS = 4


def plan_spans(instance: Instance, budget: float, max_copies: int) -> list[Event] | None:
    """A stage-structured sequence (input nodes included, as :func:`.eviction.stage_events` gives it) that
    recomputes producers before the later read of their idle spans: the first whose simulated peak fits
    ``budget``, else the last planned (over the budget: no span was left to free, or :data:`ROUNDS` rounds
    passed); None when ``max_copies`` < 2. It has no deadline: it is the first answer, which a short
    ``--time-limit`` on a loaded machine must still get (issue 30), and its work does not depend on the
    clock (at most :data:`ROUNDS` rounds)."""
    if max_copies < 2:
        return None
    plan = _Plan(instance, budget)
    for _ in range(ROUNDS):
        filled = plan.fill()
        events = plan.events()
        profile = simulate(instance, [e.node for e in events if e.node < instance.n_ops])
        if profile.peak <= budget or not filled:
            return events
        plan.remeasure(events, profile.memory)
    return events


class _Plan:
    """The chosen spans and the estimated memory at every stage's events."""

    def __init__(self, instance: Instance, budget: float):
        self.instance, self.budget = instance, budget
        self.position = {v: p for p, v in enumerate(instance.order)}
        self.k = len(instance.input_nodes)
        self.memory = np.zeros(len(instance.order))
        self.memory[self.k:] = simulate(instance, instance.op_order()).memory
        self.reads = [sorted(self.position[c] for c in instance.value_consumers[x])
                      for x in range(len(instance.value_sizes))]
        end = len(instance.order)
        self.kept = [end if instance.value_to_end[x] else r[-1] if r else self.position[instance.value_producer[x]]
                     for x, r in enumerate(self.reads)]  # the last stage each value is resident at
        self.recompute: dict[int, int] = {}  # producer -> the stage it is recomputed in
        self.freed: set[int] = set()  # values freed over a span
        self.held: set[int] = set()  # values a recomputation keeps resident longer

    def candidates(self) -> list[tuple[float, int, int, int]]:
        """(-score, value, span start, span end) for every idle span over a stage above the budget."""
        over = np.concatenate(([0], np.cumsum(self.memory > self.budget)))
        found = []
        for x, reads in enumerate(self.reads):
            u = self.instance.value_producer[x]
            if not reads or not self.allowed(x, u):
                continue
            points = [self.position[u]] + reads
            for a, b in zip(points, points[1:]):
                if b - a > 1 and over[b] > over[a + 1]:
                    found.append((-self.score(x, u, a, b), x, a, b))
        heapq.heapify(found)
        return found

    def allowed(self, x: int, u: int) -> bool:
        inputs = self.instance.node_inputs[u]
        return (self.instance.recomputable(u) and u not in self.recompute and x not in self.held
                and x not in self.freed and not any(y in self.freed for y in inputs))

    def score(self, x: int, u: int, a: int, b: int) -> float:
        """Bytes over the budget that freeing ``x`` over stages ``a+1 .. b-1`` removes, net of those the
        producer's inputs add by staying resident to stage ``b``, per unit of recompute duration."""
        excess = np.maximum(self.memory[a + 1:b] - self.budget, 0.0)
        gain = float(np.minimum(excess, self.instance.value_sizes[x]).sum())
        for y in set(self.instance.node_inputs[u]):
            if self.kept[y] < b - 1:
                span = self.memory[self.kept[y] + 1:b]
                gain -= float(np.maximum(span + self.instance.value_sizes[y] - self.budget, 0.0).sum()
                              - np.maximum(span - self.budget, 0.0).sum())
        return gain / max(self.instance.durations[u], 1e-12)

    def fill(self) -> bool:
        """Apply the best span (lazily re-scored) until no stage is estimated over the budget; False when
        no span with a positive score is left."""
        heap = self.candidates()
        while (self.memory > self.budget).any():
            if not heap:
                return False
            _, x, a, b = heapq.heappop(heap)
            u = self.instance.value_producer[x]
            if not self.allowed(x, u):
                continue
            score = self.score(x, u, a, b)
            if heap and -score > heap[0][0]:  # stale: someone else's span now removes more
                heapq.heappush(heap, (-score, x, a, b))
                continue
            if score <= 0:
                return False
            self.apply(x, u, a, b)
        return True

    def apply(self, x: int, u: int, a: int, b: int) -> None:
        sizes = self.instance.value_sizes
        self.memory[a + 1:b] -= sizes[x]
        for y in set(self.instance.node_inputs[u]):
            if self.kept[y] < b:
                self.memory[self.kept[y] + 1:b] += sizes[y]
                self.kept[y] = b
        self.recompute[u] = b
        self.freed.add(x)
        self.held.update(self.instance.node_inputs[u])

    def events(self) -> list[Event]:
        """Every stage: its planned recomputations (in input-order position), then its own node."""
        by_stage: dict[int, list[int]] = {}
        for u, stage in self.recompute.items():
            by_stage.setdefault(stage, []).append(u)
        events = []
        for stage, v in enumerate(self.instance.order):
            events += [Event(u, 1, stage) for u in sorted(by_stage.get(stage, ()), key=self.position.__getitem__)]
            events.append(Event(v, 0, stage))
        return events

    def remeasure(self, events: list[Event], memory: tuple[float, ...]) -> None:
        """Take the simulated memory of ``events`` as the estimate: each stage gets the largest of its events."""
        self.memory[self.k:] = 0.0
        ops = [e for e in events if e.node < self.instance.n_ops]
        for e, m in zip(ops, memory):
            self.memory[e.stage] = max(self.memory[e.stage], m)
