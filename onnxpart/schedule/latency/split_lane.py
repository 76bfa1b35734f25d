"""MILP-SPLIT's module solves on the shared :class:`~onnxpart.parallel.Runner`: "each module solved for
every (entry device, exit device) pair" (Section 3.3.1 of the thesis,
../shared/papers/heterogeneous-scheduling-milp-split.txt) — the pairs are independent, so they run as
jobs in forked workers, at most ``workers`` at a time, and come back as events. A job is one (segment,
entry device) and solves its exit devices in turn: a process per pair would cost more in forks than the
small modules' solves (K² pairs per module: 576 on a 24-device system — of which only one per orbit of
the device automorphisms is solved, :mod:`.symmetry`; :class:`ModuleTables` fills the rest). :mod:`.split`
calls :func:`solve_modules` once for the first pass over every pair and once per refinement round.

* **A pair's work** (:func:`solve_pair`). First its floor (:func:`floor_bound`, in the first pass only): the
  sub-instance's device path and path LP (:mod:`.bounds`: with the device-aware heads, tails and
  Carlier rows), proven bounds on ``OPT(S, u, v)`` that stand where CP-SAT's is weak; then one-worker
  CP-SAT (``interleave_search``) warm-started from
  the pair's best schedule so far, else the best of MET, Greedy and HEFT. The pair's bound is the
  maximum of the two (each a proof).
* **Live bound.** A job posts the floor and CP-SAT's proven bound on ``OPT(S, u, v)`` as they rise.
  Until a pair has reported, its table entry is 0 (every segment cost is ≥ 0), so the DP recursion over
  the current table (:func:`onnxpart.schedule.latency.split.join_dp`) is a proven lower bound of the whole makespan
  at every moment; the lane posts it to the board as ``split-dp`` whenever it rises, which moves the
  progress bar.
* **Time.** A job weighs its sub-instances' op counts ``w_i``; jobs go largest first, ``W`` at a time, a
  round weighing its largest job. With ``T`` seconds a round must end by ``start + T·(its rounds'
  weights so far)/(all rounds' weights)`` on the wall clock, and inside a job each pair by its share of
  the job's time; so each call ends within its ``T``, unused time goes to the next pair or round, and a
  one-op module does not get a large module's share. A pair past its deadline answers with its warm
  start, the critical path as its bound. Whatever still runs at ``T`` (plus ``GRACE`` for results in
  flight) is terminated and counts as stopped by the wall clock; its pairs are answered the same way
  here, so every call joins a schedule (at ``T`` = 2 s on the benchmark's 20-module stack no job had
  reported before, and SPLIT had none).
* **Determinism.** Each pair's CP-SAT stops after a budget of its *deterministic* time (its floor is a
  formula and an LP's optimum) — budgets :mod:`.split` fixes from ``T`` and the op counts alone,
  depending neither on ``W`` nor on the machine's load. Results are keyed by (segment, entry, exit),
  never by arrival order. So the same seed gives the same tables, hence the same
  refinement rounds and schedule, with any number of workers — more workers buy wall-clock time, not a
  different answer — unless a wall-clock deadline stops a solve first (counted in ``wall_stops``), or
  the refinement's time ends with pairs open and budget left (``refine_left``); the result's note says
  either, as then another run may differ.
* **Stopping.** Once the board's incumbent meets a proven bound the remaining jobs cannot help: they are
  terminated, and SPLIT joins what finished (status ``interrupted``). Ctrl-C and SIGTERM propagate
  (:mod:`onnxpart.interrupts`): the runner is a context manager, so they, like an error, leave no worker
  behind.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from time import monotonic as now
from typing import NamedTuple

import numpy as np

from onnxpart.board import Board
from onnxpart.parallel import BoundPoster, Event, Runner
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.ticks import DET_PER_SECOND
from onnxpart.schedule.latency import bounds, exact, heuristics, symmetry
from onnxpart.schedule.latency.simulator import Schedule, simulate

log = logging.getLogger(__name__)

INLINE_OPS = 2  # see solve_modules
GRACE = 0.25  # seconds past the end for the last results to arrive before the jobs are terminated

Key = tuple[int, int | None, int | None]  # (segment, entry device | None, exit device | None)


class Pair(NamedTuple):
    """One (segment, entry, exit) solve: its pinned sub-instance, CP-SAT deterministic budget, whether to
    compute its floor (False in refinement rounds: the tables hold it, and it would come out the same)
    and warm start (None: the best constructive)."""

    key: Key
    sub: Instance
    budget: float
    floor: bool = True
    warm: Schedule | None = None


@dataclass(frozen=True)
class ModuleJob:
    """The pairs of one (segment, entry device), solved one after another in one worker (a process per
    entry, not per pair: forking costs more than a small module's solve), and the job's wall deadline."""

    pairs: tuple[Pair, ...]
    deadline: float  # the job stops by then (``time.monotonic``)
    seed: int

    @property
    def weight(self) -> float:
        return float(sum(pair[1].n for pair in self.pairs))


@dataclass
class ModuleResult:
    key: Key
    schedule: Schedule | None  # the sub-instance's schedule (local op indices)
    bound: float | None  # proven lower bound on OPT(S, u, v)
    status: str
    wall_stop: bool = False  # the wall-clock deadline, not the deterministic budget, stopped it


def run_module_job(job: ModuleJob) -> list[ModuleResult]:
    """Solve a job's pairs in order; pair ``p`` must stop by its share of the time left, counted from
    the job's start (``start + (deadline − start)·(weights up to p)/(all)``), so a pair that ends early
    leaves its time to the next — or later, while the pairs after it still have their budgets' nominal
    wall time (:data:`~onnxpart.schedule.common.ticks.DET_PER_SECOND`) before the deadline: CP-SAT's
    deterministic clock runs at different speeds on different models (0.04 instead of 0.2 a second on
    one 17-op module of the demo's transformer block), and a slow one may take what the rest do not need.
    Each posts its proven bound as method ``str(p)``."""
    start, total, done = now(), job.weight, 0.0
    pairs = [Pair(*pair) for pair in job.pairs]
    need = [pair.budget / DET_PER_SECOND for pair in pairs]
    out = []
    for p, pair in enumerate(pairs):
        done += pair.sub.n
        until = max(start + (job.deadline - start) * done / total, job.deadline - sum(need[p + 1:]))
        out.append(solve_pair(pair.key, pair.sub, pair.budget, until, job.seed, BoundPoster(str(p)),
                              floor=pair.floor, warm=pair.warm))
    return out


def floor_bound(sub: Instance, limit: float) -> tuple[float, bool]:
    """``(value, wall)``: the best of the sub-instance's device path and path LP (:mod:`.bounds`, ``limit``
    seconds as a safety net; its binary device-used columns searched to a node limit) — proven bounds on
    its optimum, so on ``OPT(S_k, u, v)`` —, and whether the wall clock stopped it. (The path MIP, a
    floor here before, is not: with the head, tail and Carlier rows its 64-node bound rose over the LP's
    by 0–2% on 30-op RWNN modules, at 10–50× the LP's time, which CP-SAT's search turns into more.)"""
    lp = bounds.path_lp_bound(sub, limit)  # its node limit also reads "time_limit": the clock tells them apart
    wall = lp.status == "time_limit" and lp.seconds >= limit
    return max(bounds.device_path_bound(sub).value, lp.value or 0.0), wall


def solve_pair(key: Key, sub: Instance, budget: float, deadline: float, seed: int, on_bound, *,
               floor: bool = True, warm: Schedule | None = None) -> ModuleResult:
    """One (segment, entry, exit) sub-instance (module docstring): its floor (if ``floor``; the deadline
    only as a safety net), then one-worker CP-SAT from ``warm`` (else the best constructive
    schedule) posting its proven bound; past its deadline, the warm start is the answer and the critical
    path (a closed form) the bound. A one-op module with its exit stand-in, both pinned, has one
    schedule: simulated, it is optimal (its own bound)."""
    if sub.n <= 2 and (sub.n == 1 or sub.edges) and all(len(sub.allowed(i)) == 1 for i in range(sub.n)):
        only = simulate(sub, [sub.allowed(i)[0] for i in range(sub.n)], sub.topo)
        return ModuleResult(key, only, only.makespan, "optimal")
    value, wall = bounds.critical_path_bound(sub).value, False  # microseconds
    if floor and deadline - now() > 0.02:
        value, wall = floor_bound(sub, deadline - now())
    if on_bound is not None:
        on_bound(value)
    warm = warm if warm is not None else heuristics.best_constructive(sub)
    limit = deadline - now()
    if limit <= 0.01:
        return ModuleResult(key, warm, value, "time_limit", wall_stop=True)
    t0 = now()
    res = exact.cpsat(sub, limit, warm, seed=seed, workers=1, on_bound=on_bound, deterministic_time=budget,
                      interleave=True)
    wall = wall or (res.status == "time_limit" and now() - t0 >= 0.95 * limit)
    bound = max(value, res.bound if res.bound is not None else 0.0)
    return ModuleResult(key, res.schedule, bound, res.status, wall_stop=wall)


@dataclass
class ModuleTables:
    """What the lane knows: upper and lower cost tables per segment, each pair's best schedule, latest
    status, and counts over every solve (first pass and refinements).

    Symmetry (:mod:`.symmetry`): only orbit representatives are solved; ``images[rep]`` lists the
    other pairs of its orbit with the device permutation mapping ``rep`` onto each, ``rep[key]`` a
    pair's representative. Whatever a representative's solve reports — bound, schedule (relabelled),
    status — is recorded for every pair of its orbit at once, so the tables hold what solving every
    pair would give when the solves are exact."""

    ub: list[dict]
    lb: list[dict]
    images: dict[Key, list[tuple[Key, np.ndarray]]] = field(default_factory=dict)
    rep: dict[Key, Key] = field(default_factory=dict)
    found: dict[Key, Schedule] = field(default_factory=dict)
    latest: dict[Key, str] = field(default_factory=dict)
    solves: int = 0
    wall_stops: int = 0
    refine_left: float = 0.0  # the refinement's deterministic budget (a fraction) left when its time ran out
    interrupted: bool = False

    def orbit(self, key: Key, schedule: Schedule | None = None) -> Iterator[tuple[Key, Schedule | None]]:
        """``(pair, schedule relabelled onto it)`` for ``key`` and every other pair of its orbit."""
        yield key, schedule
        for mate, perm in self.images.get(key, ()):
            yield mate, None if schedule is None else symmetry.relabel(schedule, perm)

    def raise_bound(self, key: Key, value: float) -> None:
        """A proven bound on ``OPT`` of ``key``'s pair, hence of every pair of its orbit."""
        for s, u, v in (pair for pair, _ in self.orbit(key)):
            self.lb[s][(u, v)] = max(self.lb[s][(u, v)], value)

    def take(self, result: ModuleResult) -> None:
        """A solve's result, for its pair's whole orbit; bounds only rise and schedules only improve
        (each solve's is a proof or a valid schedule, so their maximum and minimum are too)."""
        self.solves += 1
        self.wall_stops += result.wall_stop
        self.raise_bound(result.key, result.bound if result.bound is not None else 0.0)
        s, u, v = result.key
        better = result.schedule is not None and result.schedule.makespan < self.ub[s][(u, v)]
        for key, schedule in self.orbit(result.key, result.schedule if better else None):
            self.latest[key] = result.status
            if better:
                self.ub[key[0]][key[1:]] = schedule.makespan
                self.found[key] = schedule

    @property
    def status(self) -> dict[str, int]:
        """Pairs per latest status."""
        out: dict[str, int] = {}
        for status in self.latest.values():
            out[status] = out.get(status, 0) + 1
        return out

    @property
    def unsolved(self) -> int:
        """Pairs with no schedule that were not proven infeasible."""
        return sum(key not in self.found and st != "infeasible" for key, st in self.latest.items())


def inline(pairs) -> bool:
    """Whether a job's pairs are all of at most ``INLINE_OPS`` ops (one-op modules): :func:`solve_modules`
    solves them in its own process, in milliseconds, while the workers run the others."""
    return all(pair[1].n <= INLINE_OPS for pair in pairs)


def deadlines(weights: list[float], workers: int, start: float, time_limit: float) -> list[float]:
    """Each job's wall deadline: the end of its round of ``workers`` consecutive jobs, a round lasting in
    proportion to its largest weight (module docstring)."""
    rounds = [max(weights[i:i + workers]) for i in range(0, len(weights), workers)]
    total = sum(rounds) or 1.0
    ends = [start + time_limit * sum(rounds[:r + 1]) / total for r in range(len(rounds))]
    return [ends[i // workers] for i in range(len(weights))]


def solve_modules(jobs: list[ModuleJob], tables: ModuleTables, workers: int, board: Board | None, dp,
                  end: float) -> None:
    """Run ``jobs`` on a runner of ``workers`` processes, filling ``tables``; post the DP over the lower
    table (``dp(tables.lb)``) to ``board`` as it rises; stop early once the board is closed, and at
    ``end`` (plus a moment for the last results to arrive) whatever still runs. Jobs of at most
    ``INLINE_OPS`` ops per pair (one-op modules) solve in milliseconds: they run here, while the workers
    run the others."""
    keys: dict[int, list[Key]] = {}
    answered: set[Key] = set()
    best = -math.inf

    def take(events: list[Event]) -> bool:
        nonlocal best
        for event in events:
            if event.kind == "bound":
                tables.raise_bound(keys[event.job][int(event.method)], event.value)
            elif event.kind == "done":
                for result in event.value:
                    tables.take(result)
                    answered.add(result.key)
            else:  # a failed worker found nothing; the bounds it posted stand
                log.warning("a SPLIT module solve failed: %s", event.value)
                for key in keys[event.job]:
                    tables.take(ModuleResult(key, None, None, "error"))
                    answered.add(key)
        if board is not None and events:
            value = dp(tables.lb)
            if value > best:
                best = value
                if board.post("split-dp", value):
                    board.report("split")
        return (board is not None and board.closed()) or now() > end + GRACE

    small = [inline(job.pairs) for job in jobs]
    with Runner(workers) as runner:
        for job in (job for job, here in zip(jobs, small) if not here):
            keys[runner.submit(run_module_job, job)] = [pair[0] for pair in job.pairs]
        # here: past its deadline a pair costs one HEFT on two ops, so even late ones get answered
        for n, job in enumerate(job for job, here in zip(jobs, small) if here):
            keys[-1 - n] = [pair[0] for pair in job.pairs]
            stop = take([Event("done", -1 - n, run_module_job(job))] + runner.poll())
            if stop and board is not None and board.closed():
                break
        else:
            runner.wait(take)
        if runner.busy or len(keys) < len(jobs):  # closed or out of time: stop the rest
            tables.interrupted = board is not None and board.closed()
            runner.shutdown(wait=False)
            if not tables.interrupted:  # pairs still running at the end: stopped by the wall clock
                _answer_late(jobs, answered, tables)


def _answer_late(jobs: list[ModuleJob], answered: set[Key], tables: ModuleTables) -> None:
    """Pairs whose job the wall clock stopped before it reported: each answered here as a pair past its
    deadline answers in its job — its warm start (else the best constructive schedule, milliseconds on a
    module) with the critical path as its bound —, so a short time limit still joins a schedule."""
    for pair in (Pair(*pair) for job in jobs for pair in job.pairs):
        if pair.key in answered:
            continue
        warm = pair.warm if pair.warm is not None else heuristics.best_constructive(pair.sub)
        tables.take(ModuleResult(pair.key, warm, bounds.critical_path_bound(pair.sub).value, "time_limit",
                                 wall_stop=True))
