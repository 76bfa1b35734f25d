"""A fast greedy rematerialization heuristic on the stages of the input order (Moccasin §2.3): a sequence
that fits the budget in milliseconds, used as the ``greedy`` baseline method, as the complete solution
hint that lets phase 2 of :mod:`.moccasin` start without phase 1, and as the fallback answer when CP-SAT
finds nothing better in its time limit.

The search is an eviction policy (:mod:`.eviction`) in the style of Dynamic Tensor Rematerialization
(Kirisame et al., ICLR 2021) and Belady's rule, run over the stages of the fixed input order: stage ``j``
recomputes the freed inputs of the ``j``-th op (recursively, their freed inputs too; in input-order
position, so the result is stage-structured: Eq. 11's grid) and then computes the op. Every computed
tensor stays resident until its last reader has run; when an event would exceed the budget (the
retention-interval memory of Eq. 4), the resident tensor with the largest ``size × distance to next use /
recompute cost`` that the current stage does not need is freed — it will be recomputed right before its
next use. An op is computed at most ``C_v`` times (``--max-recompute``), so a freed tensor must have a
producer with a copy left, and that producer's inputs must be resident or recomputable too.

A tally of resident bytes is an upper bound on the retention-interval memory of the sequence (a freed
tensor's copy really ends at its last read, earlier than the tally assumes), so the sequence fits the
budget; :func:`greedy_sequence` re-simulates it anyway and finally drops every recomputation that is not
needed (latest first). Several scoring exponents and budget aims are tried and the shortest sequence
kept; if none fits, every distinct over-budget sequence is repaired (:func:`repair`) and the shortest
few results improved (:func:`improve`). Before the variants, the idle-span plan of :mod:`.spans` gives a
first answer on large graphs, where every variant goes over the budget; it is a candidate beside them.
"""

from __future__ import annotations

import itertools
import math
import random
import time

from onnxpart.remat.eviction import Event, stage_events
from onnxpart.remat.model import Instance, MethodResult
from onnxpart.remat.sequence import InvalidSequence, SequenceProfile, simulate
from onnxpart.remat.spans import plan_spans

#: Exponents ``(a, b, c)`` of the eviction score ``size × distance^a / cost^b × (share of the remaining
#: retention freed)^c``, and the factors of the budget the policy aims at (the simulated memory is below
#: its tally, so an aim above the budget can still fit); every combination is run and the best kept.
_SCORES = tuple(itertools.product((0.5, 1.0, 2.0), (0.5, 1.0, 2.0), (0.0, 1.0)))
_SLACKS = (0.95, 1.0, 1.03, 1.06, 1.09, 1.12)
#: At most this many distinct over-budget sequences are repaired when no variant fits the budget.
_REPAIRS = 32
#: ... and this many of the shortest repaired sequences are improved (:func:`improve`).
_IMPROVES = 4
#: Iterated local search (:func:`improve`): recomputations dropped per round, rounds without a new best
#: before it stops, the chance to accept a longer sequence, and how many of the best repair candidates
#: a randomized repair chooses among.
_DROPS = (1, 1, 2, 3)
_PATIENCE = 400
_WORSE = 0.05
_RANDOM_TOP = 3
#: A repair move (an existing recomputation to an earlier stage) adds no duration; it is ranked as if it
#: cost this fraction of the producer's duration.
_MOVE_COST = 1e-3
#: The first answer's repair of the idle-span plan simulates at most this many events in all (its work
#: bound, whatever the clock: about half a second; 666 sequences of 300 ops, 10 of 20,000).
_FIRST_REPAIR = 200_000
#: The first answer's eviction pass: its score exponents (size × distance / cost) and its most seconds
#: (0.4 s at 20,000 ops; the clock's allowance is the README's 5 s beyond 1.1 × the limit).
_FIRST_SCORE = (1.0, 1.0, 0.0)
_FIRST_EVICTION = 2.0
#: :func:`smallest_reached` stops when its bisection's interval is this part of the budget reached.
_MIN_STEP = 0.005
#: A sequence's events and their simulated profile.
Found = tuple[list[Event], SequenceProfile]


def prune(instance: Instance, events: list[Event], budget: float, deadline: float = math.inf) -> list[Event]:
    """Drop recomputations (latest first) whose removal keeps the sequence valid and within the budget,
    until ``deadline`` (one simulation per recomputation); copy indices are renumbered."""
    kept = list(events)
    for k in range(len(kept) - 1, -1, -1):
        if kept[k].copy == 0:
            continue
        if time.perf_counter() >= deadline:
            break
        trial = kept[:k] + kept[k + 1:]
        try:
            if simulate(instance, _ops(instance, trial)).peak <= budget:
                kept = trial
        except InvalidSequence:
            continue
    return _renumber(kept)


def repair(instance: Instance, events: list[Event], budget: float, max_copies: int,
           deadline: float, rng: random.Random | None = None, simulations: float = math.inf) -> list[Event]:
    """Local search on the simulator for a sequence over the budget: at the highest event, every tensor
    retained across it is a candidate to free, i.e. to recompute its producer in the stage of its next
    read (or, when the producer has no copy left, to move its first recomputation after the peak to that
    stage); the candidate that removes the most overflow (bytes over the budget, summed over events) per
    unit of recompute duration is applied, until the sequence fits, nothing helps, or ``deadline``. With
    ``rng`` the choice is randomized among the best ``_RANDOM_TOP`` candidates, biased to the best (the
    repair step of :func:`improve`). ``simulations``: the most sequences it simulates (a bound on its work
    that does not depend on the clock: the first answer's, :func:`_first`)."""
    position = {v: p for p, v in enumerate(instance.order)}
    limit = [max_copies if instance.recomputable(v) else 1 for v in range(instance.n_nodes)]
    k = len(instance.input_nodes)
    simulated = [0]

    def overflow(evs: list[Event]) -> tuple[float, SequenceProfile]:
        simulated[0] += 1
        profile = simulate(instance, _ops(instance, evs))
        return sum(max(0.0, m - budget) for m in profile.memory), profile

    events = sorted(events, key=lambda e: (e.stage, position[e.node]))
    current, profile = overflow(events)
    while current > 0 and time.perf_counter() < deadline and simulated[0] < simulations:
        candidates = _candidates(instance, events, profile.peak_event + k, limit)
        scored = []
        for (u, stage), moved in candidates.items():
            if simulated[0] >= simulations:
                break
            kept = events if moved is None else [e for e in events if e is not moved]
            trial = sorted(kept + [Event(u, 0, stage)], key=lambda e: (e.stage, position[e.node]))
            value, trial_profile = overflow(trial)
            if value < current:  # a move costs no duration: rank it as nearly free
                cost = instance.durations[u] * (1.0 if moved is None else _MOVE_COST)
                scored.append(((current - value) / max(cost, 1e-9), trial, value, trial_profile))
        if not scored:
            break
        scored.sort(key=lambda item: -item[0])  # stable: ties keep the candidates' order
        pick = 0 if rng is None else min(int(rng.random() ** 2 * _RANDOM_TOP), len(scored) - 1)
        _, events, current, profile = scored[pick]
    return _renumber(events)


def _candidates(instance: Instance, events: list[Event], peak: int,
                limit: list[int]) -> dict[tuple[int, int], Event | None]:
    """:func:`repair`'s moves at the event ``peak`` (an index into ``events``): (producer, stage) -> the
    producer's later recomputation that moves to that stage (None: a new recomputation there), for every
    value retained across the peak that its next reader's stage could recompute instead. One pass over
    the events before the peak and one after it (a scan per value was minutes at 20,000 ops)."""
    stage_nodes = {(e.stage, e.node) for e in events}
    counts: dict[int, int] = {}
    for e in events:
        counts[e.node] = counts.get(e.node, 0) + 1
    produced: dict[int, int] = {}  # value -> event of its live copy, up to the peak
    for t in range(peak):
        for x in instance.node_outputs[events[t].node]:
            produced[x] = t
    touched: dict[int, tuple[int, bool]] = {}  # value -> its first event after the peak: (event, a read?)
    later: dict[int, Event] = {}  # node -> its first event after the peak
    for t in range(peak + 1, len(events)):
        node = events[t].node
        later.setdefault(node, events[t])
        for x in instance.node_outputs[node]:
            touched.setdefault(x, (t, False))
        for x in instance.node_inputs[node]:
            touched.setdefault(x, (t, True))
    at_peak = set(instance.node_inputs[events[peak].node]) | set(instance.node_outputs[events[peak].node])
    candidates: dict[tuple[int, int], Event | None] = {}
    for x in produced:
        if x in at_peak or instance.value_to_end[x] or x not in touched:
            continue
        u = instance.value_producer[x]
        moved = None
        if counts[u] >= limit[u]:  # no copy left: move its first recomputation after the peak instead
            moved = later.get(u)
            if moved is None:
                continue
        t, read = touched[x]
        if read and (events[t].stage, u) not in stage_nodes:  # u precedes its reader: position order
            candidates[(u, events[t].stage)] = moved
    return candidates


def improve(instance: Instance, events: list[Event], budget: float, max_copies: int,
            deadline: float, seed: int = 0) -> list[Event]:
    """Iterated local search (destroy and repair) from a sequence that fits the budget: drop one to three
    random recomputations, :func:`repair` the overflow with a randomized choice of others, drop the
    unneeded ones (:func:`prune`); the result replaces the current sequence when it fits and is not
    longer (or, with probability ``_WORSE``, anyway — to leave a local optimum). Stops after ``_PATIENCE``
    rounds without a new best, or at ``deadline``; returns the best sequence seen. Seeded: the same
    inputs give the same rounds (on G2 at 80%: +5.14% → +4.92%, where a deterministic remove-and-repair
    descent stops at +5.14%)."""
    rng = random.Random(seed)
    best = current = events
    best_duration = current_duration = sum(instance.durations[e.node] for e in events)
    stale = 0
    while stale < _PATIENCE and time.perf_counter() < deadline:
        stale += 1
        recomputed = [e for e in current if e.copy > 0]
        if not recomputed:
            break
        victims = set(rng.sample(recomputed, min(len(recomputed), rng.choice(_DROPS))))
        trial = repair(instance, [e for e in current if e not in victims], budget, max_copies, deadline, rng)
        if simulate(instance, _ops(instance, trial)).peak > budget:
            continue
        trial = prune(instance, trial, budget)
        duration = sum(instance.durations[e.node] for e in trial)  # input nodes last 0
        if duration <= current_duration or rng.random() < _WORSE:
            current, current_duration = trial, duration
        if duration < best_duration:
            best, best_duration, stale = trial, duration, 0
    return best


def _renumber(events: list[Event]) -> list[Event]:
    counts: dict[int, int] = {}
    renumbered = []
    for e in events:
        renumbered.append(Event(e.node, counts.get(e.node, 0), e.stage))
        counts[e.node] = counts.get(e.node, 0) + 1
    return renumbered


def _ops(instance: Instance, events: list[Event]) -> tuple[int, ...]:
    return tuple(e.node for e in events if e.node < instance.n_ops)


def greedy_sequence(instance: Instance, budget: float, max_copies: int, search_seconds: float = 30.0,
                    seconds: float = math.inf) -> tuple[list[Event], SequenceProfile] | None:
    """Over the scoring variants and target slacks: the shortest pruned sequence whose simulated peak fits
    ``budget`` (the idle-span plan of :mod:`.spans` among them); if none fits, the one with the least peak
    (a warm start for phase 1). None only if the plan did not fit and every variant got stuck on ``C_v`` or
    was cut by the time limit. At most ``search_seconds`` go to :func:`repair` and :func:`improve`;
    ``seconds`` after the start every variant and pruning stop (a variant is seconds to a minute of Python
    on a 20,000-op graph)."""
    now = time.perf_counter()
    end = now + seconds
    deadline = min(now + search_seconds, end)
    planned, closest = _first(instance, budget, max_copies, end)
    fitting = None
    over: dict[tuple[tuple[int, int], ...], tuple[list[Event], SequenceProfile]] = {}
    for (a, b, c), slack in itertools.product(_SCORES, _SLACKS):
        if time.perf_counter() >= end:
            break
        events = stage_events(instance, budget * slack, max_copies, a, b, c, end)
        if events is None:
            continue
        profile = simulate(instance, _ops(instance, events))
        if profile.peak > budget:
            over.setdefault(tuple((e.node, e.stage) for e in events), (events, profile))
            if closest is None or profile.peak < closest[1].peak:
                closest = (events, profile)
            continue
        if fitting is not None and profile.duration >= fitting[1].duration and \
                profile.duration - fitting[1].duration > 0.5 * (profile.duration - instance.base_duration):
            continue  # pruning cannot catch up: skip the simulations
        events = prune(instance, events, budget, end)
        profile = simulate(instance, _ops(instance, events))
        if fitting is None or profile.duration < fitting[1].duration:
            fitting = (events, profile)
    if fitting is not None:
        if planned is not None and planned[1].duration < fitting[1].duration:
            fitting = planned
        events = improve(instance, fitting[0], budget, max_copies, deadline)
        return events, simulate(instance, _ops(instance, events))
    return _repaired(instance, list(over.values()), budget, max_copies, (deadline, end), planned, closest)


def _repaired(instance: Instance, over: list[tuple[list[Event], SequenceProfile]], budget: float, max_copies: int,
              times: tuple[float, float], planned: tuple[list[Event], SequenceProfile] | None,
              closest: tuple[list[Event], SequenceProfile] | None) -> tuple[list[Event], SequenceProfile] | None:
    """:func:`greedy_sequence` when no variant fits: repair and prune the distinct over-budget sequences
    ``over`` (least peak first, at most _REPAIRS of them) until ``times[0]`` (pruning until ``times[1]``),
    then improve the _IMPROVES shortest distinct results and the idle-span plan, and keep the shortest; if
    none fits, the least peak. The repaired sequences differ a lot (on the paper's G2 at 80%: +5.1% to
    +6.9% TDI), and the least peak is not the best start."""
    deadline, end = times
    fitting = None
    repaired: dict[tuple[int, ...], tuple[list[Event], SequenceProfile]] = {}
    for events, _ in sorted(over, key=lambda item: item[1].peak)[:_REPAIRS]:
        if time.perf_counter() >= deadline:
            break
        events = repair(instance, events, budget, max_copies, deadline)
        profile = simulate(instance, _ops(instance, events))
        if profile.peak > budget:
            if profile.peak < closest[1].peak:
                closest = (events, profile)
            continue
        events = prune(instance, events, budget, end)
        repaired.setdefault(_ops(instance, events), (events, simulate(instance, _ops(instance, events))))
    if planned is not None:
        repaired.setdefault(_ops(instance, planned[0]), planned)
    starts = sorted(repaired.values(), key=lambda item: item[1].duration)[:_IMPROVES]
    for i, (events, _) in enumerate(starts):  # each start gets an equal share of the time left
        share = (deadline - time.perf_counter()) / (len(starts) - i)
        events = improve(instance, events, budget, max_copies, time.perf_counter() + share, seed=i)
        profile = simulate(instance, _ops(instance, events))
        if fitting is None or profile.duration < fitting[1].duration:
            fitting = (events, profile)
    return fitting if fitting is not None else closest


def _first(instance: Instance, budget: float, max_copies: int,
           deadline: float) -> tuple[Found | None, Found | None]:
    """The first answer: (a sequence that fits, pruned until ``deadline``, or None; the least peak reached,
    or None). Tried in order, each whatever the deadline, so a short limit on a loaded machine still
    answers (issue 30):

    1. the idle-span plan (:func:`.spans.plan_spans`), :func:`repair`-ed when it is over the budget (at
       most :data:`_FIRST_REPAIR` simulated events in all, about half a second): on a 300-op random DAG at
       90% the plan is 4% over and its repair fits in 59 simulations;
    2. where it still does not fit, one pass of the eviction policy at the budget with the default score
       (:data:`_FIRST_SCORE`; linear-ish, 0.4 s at 20,000 ops, at most :data:`_FIRST_EVICTION` s): a
       20,000-op DAG with skips at 80%, which the plan misses, fits so (issue 40)."""
    closest = None
    events = plan_spans(instance, budget, max_copies)
    if events is not None:
        if simulate(instance, _ops(instance, events)).peak > budget:
            simulations = max(1, _FIRST_REPAIR // max(1, instance.n_ops))
            events = repair(instance, events, budget, max_copies, math.inf, simulations=simulations)
        closest = (events, simulate(instance, _ops(instance, events)))
    if closest is None or closest[1].peak > budget:
        evicted = stage_events(instance, budget, max_copies, *_FIRST_SCORE,
                               deadline=time.perf_counter() + _FIRST_EVICTION)
        if evicted is not None:
            profile = simulate(instance, _ops(instance, evicted))
            if closest is None or profile.peak < closest[1].peak:
                closest = (evicted, profile)
    if closest is None or closest[1].peak > budget:
        return None, closest
    events = prune(instance, closest[0], budget, deadline)
    return (events, simulate(instance, _ops(instance, events))), closest


def solve_greedy(instance: Instance, budget: float, max_copies: int, search_seconds: float = 30.0,
                 seconds: float = math.inf) -> MethodResult:
    """The ``greedy`` method: a sequence and no lower bound (a heuristic proves nothing); ``seconds`` as in
    :func:`greedy_sequence`."""
    start = time.perf_counter()
    found = greedy_sequence(instance, budget, max_copies, search_seconds, seconds)
    seconds = time.perf_counter() - start
    if found is None or found[1].peak > budget:
        notes = None if found is None else {"reachable_budget": found[1].peak}
        return MethodResult(method="greedy", status="no_solution", sequence=None, bound_status="none",
                            seconds=seconds, time_to_best=None, restriction=_where(max_copies), solver="greedy",
                            notes=notes)
    return _heuristic(instance, found[0], max_copies, seconds)


def smallest_reached(instance: Instance, floor: int, max_copies: int, deadline: float) -> int:
    """``--budget min`` where Moccasin's model is skipped: the least budget at which the first answer
    (:func:`_first`) fits, searched between the restriction-free ``floor`` and the input order's peak
    (which always works: no recomputation) until ``deadline`` or within :data:`_MIN_STEP` of it: down by
    a tenth of that peak while probes fit (the floor is often far below what any heuristic reaches, and a
    probe is about a second at 20,000 ops, so a short limit gets few), then by bisection. A probe that
    fits moves the upper end to the peak it reached; each runs whatever the clock. A heuristic's budget,
    proven nothing beyond the floor."""
    low, high = floor, int(math.ceil(simulate(instance, instance.op_order()).peak))
    stride = max(1, high // 10)
    while high - low > _MIN_STEP * high and time.perf_counter() < deadline:
        middle = max((low + high) // 2, high - stride)
        found, _ = _first(instance, middle, max_copies, time.perf_counter())
        if found is None:
            low, stride = middle + 1, high  # from now on, bisection
        else:
            high = min(middle, int(math.ceil(found[1].peak)))
    return high


def first_answer(instance: Instance, budget: float, max_copies: int) -> MethodResult:
    """The first answer (:func:`_first`; not pruned, no time is left) as the ``greedy`` method's result:
    what a run answers whose methods found no sequence in their time and proved none impossible (issue
    30: an exact method asked alone, stopped before its first incumbent, is no proof that the budget is
    infeasible). Where it does not fit either, the result has no sequence and its notes name the least
    peak it reached (``reachable_budget``: the message's smallest budget that works)."""
    start = time.perf_counter()
    found, closest = _first(instance, budget, max_copies, start)
    seconds = time.perf_counter() - start
    if found is None:
        notes = {"reachable_budget": closest[1].peak} if closest is not None else None
        return MethodResult(method="greedy", status="no_solution", sequence=None, bound_status="none",
                            seconds=seconds, time_to_best=None, restriction=_where(max_copies), solver="greedy",
                            notes=notes)
    result = _heuristic(instance, found[0], max_copies, seconds)
    result.notes = {"first_answer": "no method asked found a sequence in its time: the first answer stands in"}
    return result


def _heuristic(instance: Instance, events: list[Event], max_copies: int, seconds: float) -> MethodResult:
    """The ``greedy`` method's result for a sequence that fits, found in ``seconds``."""
    return MethodResult(method="greedy", status="heuristic", sequence=_ops(instance, events), bound_status="none",
                        seconds=seconds, time_to_best=seconds, restriction=_where(max_copies), solver="greedy")


def _where(max_copies: int) -> str:
    """The restriction the greedy's sequences keep."""
    return f"C_v ≤ {max_copies} computations per op, the input topological order's stages (§2.3)"
