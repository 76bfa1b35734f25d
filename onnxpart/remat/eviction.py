"""The eviction policy of the greedy heuristic (:mod:`.heuristics`): one pass over the stages of the input
order (:func:`stage_events`). Stage ``j`` recomputes the freed inputs of the ``j``-th op (recursively,
in input-order position) and then computes the op; every computed tensor stays resident until its last
reader has run; when an event would exceed the budget, the resident tensor with the largest
``size × distance to next use / recompute cost`` that the current stage does not need is freed — it will
be recomputed right before its next use, within ``C_v`` computations per op.

The walks up chains of freed tensors use stacks (a 20,000-op DAG is deeper than Python's recursion
limit), and a tensor whose recomputation needs more than :data:`MAX_CHAIN` freed tensors first is not a
candidate: one pass stays linear-ish in the graph.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from dataclasses import dataclass

from onnxpart.remat.model import Instance

log = logging.getLogger(__name__)

#: A tensor is freed only if recomputing it needs at most this many freed tensors recomputed first.
MAX_CHAIN = 8


@dataclass(frozen=True)
class Event:
    """One compute event: ``node`` computed for the ``copy``-th time in ``stage`` (0-based positions of
    the input order; a first computation is the last event of its own stage)."""

    node: int
    copy: int
    stage: int


class _Stuck(Exception):
    """A freed tensor's producer has no copy left (``C_v``) when the tensor is needed again."""


def stage_events(instance: Instance, budget: float, max_copies: int, distance_exp: float = 1.0,
                 cost_exp: float = 1.0, span_exp: float = 0.0, deadline: float = math.inf) -> list[Event] | None:
    """The greedy stage-structured sequence (input nodes included, at their own stages), or None if the
    policy gets stuck or ``deadline`` (``time.perf_counter()``) comes first. The tally of resident bytes
    never exceeds ``budget`` at any event."""
    policy = _Eviction(instance, budget, max_copies, (distance_exp, cost_exp, span_exp))
    try:
        for stage, v in enumerate(instance.order):
            if time.perf_counter() >= deadline:
                raise _Stuck(f"the time limit came at stage {stage} of {len(instance.order)}")
            policy.stage(stage, v)
    except _Stuck as exc:
        log.debug("greedy (%g, %g, %g) stuck: %s", distance_exp, cost_exp, span_exp, exc)
        return None
    return policy.events


class _Eviction:
    """The state of :func:`stage_events`' eviction policy: the resident tensors and their tally, the
    freed ones that may be recomputed, the copies used per node, and the events so far."""

    def __init__(self, instance: Instance, budget: float, max_copies: int,
                 exps: tuple[float, float, float]):
        self.instance = instance
        self.budget = budget
        self.distance_exp, self.cost_exp, self.span_exp = exps
        self.position = {v: p for p, v in enumerate(instance.order)}
        self.sizes = instance.value_sizes
        self.readers = [sorted(self.position[c] for c in instance.value_consumers[x])
                        for x in range(len(self.sizes))]
        self.limit = [max_copies if instance.recomputable(v) else 1 for v in range(instance.n_nodes)]
        self.used = [0] * instance.n_nodes
        self.resident: set[int] = set()
        self.freed: set[int] = set()  # values freed by the policy (not resident) that may be recomputed
        self.tally = 0
        self.events: list[Event] = []

    def stage(self, stage: int, v: int) -> None:
        """Stage ``stage``: recompute the freed inputs of ``v`` (recursively, in input-order position),
        then compute ``v``. Raises :class:`_Stuck` if a needed producer has no copy left."""
        todo: set[int] = set()
        self.plan(v, todo)
        chain = sorted(todo, key=self.position.__getitem__) + [v]
        for k in range(len(chain)):
            self.compute(chain, k, stage)

    def compute(self, chain: list[int], k: int, stage: int) -> None:
        """The event of ``chain[k]``: make room for its outputs (keeping every input the rest of the chain
        reads), compute it, then free what neither the chain nor a later stage still needs."""
        instance, sizes, resident, w = self.instance, self.sizes, self.resident, chain[k]
        pinned = {x for z in chain[k:] for x in instance.node_inputs[z]}
        outputs = instance.node_outputs[w]
        stale = sum(sizes[x] for x in outputs if x in resident)  # an older copy ends before this event
        need = sum(sizes[x] for x in outputs) - stale + instance.internal[w] + instance.constant_bytes
        pinned |= set(outputs)
        self.fit(need, stage, pinned)
        self.events.append(Event(w, self.used[w], stage))
        self.used[w] += 1
        for x in outputs:
            self.freed.discard(x)
            if x not in resident:
                resident.add(x)
                self.tally += sizes[x]
        later = {x for z in chain[k + 1:] for x in instance.node_inputs[z]}
        for x in set(instance.node_inputs[w]) | set(outputs):
            if x in resident and x not in later and not instance.value_to_end[x] \
                    and not self.needed(x, stage):
                self.free(x)

    def next_use(self, x: int, stage: int) -> int | None:
        """The first stage after ``stage`` whose op reads ``x``, or None."""
        readers = self.readers[x]
        k = bisect.bisect_right(readers, stage)
        return readers[k] if k < len(readers) else None

    def needed(self, x: int, stage: int) -> bool:
        """``x`` is read after ``stage``: by a first computation, or by the recomputation of a freed
        tensor that is itself still needed (followed with a stack: chains of freed tensors can be as long
        as the graph is deep)."""
        stack, seen = [x], {x}
        while stack:
            y = stack.pop()
            if self.next_use(y, stage) is not None:
                return True
            for c in self.instance.value_consumers[y]:
                for z in self.instance.node_outputs[c]:
                    if z in self.freed and z not in seen:
                        seen.add(z)
                        stack.append(z)
        return False

    def missing(self, v: int, memo: dict[int, frozenset[int] | None]) -> frozenset[int] | None:
        """The non-resident tensors a recomputation of ``v`` needs recomputed first (recursively), or
        None if ``v`` or one of them has no copy left, or if there are more than :data:`MAX_CHAIN` of
        them (a walk up a long chain of freed tensors per candidate made one greedy pass take minutes on
        a 5,000-op graph, for a recomputation its cost would rank last anyway)."""
        if v in memo:
            return memo[v]
        inputs, producer, resident = self.instance.node_inputs, self.instance.value_producer, self.resident
        acc: set[int] = set()
        stack, seen = [v], {v}
        while stack:
            u = stack.pop()
            if self.used[u] >= self.limit[u]:
                memo[v] = None
                return None
            for x in inputs[u]:
                if x in resident or x in acc:
                    continue
                acc.add(x)
                if len(acc) > MAX_CHAIN:
                    memo[v] = None
                    return None
                if producer[x] not in seen:
                    seen.add(producer[x])
                    stack.append(producer[x])
        memo[v] = frozenset(acc)
        return memo[v]

    def free(self, x: int) -> None:
        """Drop ``x`` from the resident tensors and the tally."""
        self.resident.discard(x)
        self.tally -= self.sizes[x]

    def fit(self, need: int, stage: int, pinned: set[int]) -> None:
        """Free resident tensors until ``tally + need`` fits the budget."""
        while self.tally + need > self.budget:
            best, best_missing = self.victim(stage, pinned)
            if best is None:  # every resident tensor is needed now or has no copy left: go over
                return
            self.free(best)
            self.freed.update(best_missing | {best})  # their inputs stay resident while they are needed

    def victim(self, stage: int, pinned: set[int]) -> tuple[int | None, frozenset[int]]:
        """The resident tensor to free (the largest eviction score among those not ``pinned``, not kept
        to the end and recomputable), with the tensors its recomputation needs first; None if none.

        A recomputation costs at least its producer's duration, so each candidate's score is at most the
        score at that cost: candidates are tried by that optimistic score, and the recursive
        :meth:`missing` runs only until no optimistic score can beat the best exact one (one or two
        candidates, where every resident tensor used to cost a walk up the freed tensors)."""
        instance, sizes, durations, producer = self.instance, self.sizes, self.instance.durations, \
            self.instance.value_producer
        candidates = []
        for x in self.resident:
            u = producer[x]
            if x in pinned or instance.value_to_end[x] or self.used[u] >= self.limit[u]:
                continue
            nxt = self.next_use(x, stage)
            if nxt is None:
                continue
            saved = float(nxt - stage) / (self.readers[x][-1] - stage)  # share of the remaining retention freed
            gain = sizes[x] * float(nxt - stage) ** self.distance_exp * saved ** self.span_exp
            candidates.append((-gain / max(durations[u], 1e-9) ** self.cost_exp, len(candidates), x, gain))
        best, best_score, best_missing, best_rank = None, -1.0, frozenset(), len(candidates)
        memo: dict[int, frozenset[int] | None] = {}
        for optimistic, rank, x, gain in sorted(candidates):  # ties: the first resident tensor, as ever
            if -optimistic < best_score:
                break
            u = producer[x]
            chain = self.missing(u, memo)
            if chain is None:
                continue
            cost = durations[u] + sum(durations[producer[y]] for y in chain)
            score = gain / max(cost, 1e-9) ** self.cost_exp
            if score > best_score or (score == best_score and rank < best_rank):
                best, best_score, best_missing, best_rank = x, score, chain, rank
        return best, best_missing

    def plan(self, v: int, todo: set[int]) -> None:
        """Add ``v``'s producers of freed inputs to ``todo`` (recursively, with a stack)."""
        stack = [v]
        while stack:
            for x in self.instance.node_inputs[stack.pop()]:
                u = self.instance.value_producer[x]
                if x in self.resident or u in todo:
                    continue
                if self.used[u] >= self.limit[u]:
                    raise _Stuck(f"{self.instance.node_names[u]!r} has no copy left")
                todo.add(u)
                stack.append(u)
