"""MILP-SPLIT's module solves on the shared :class:`~onnxpart.parallel.Runner`: "each module solved for
every (entry device, exit device) pair" (Section 3.3.1 of the thesis,
../shared/papers/heterogeneous-scheduling-milp-split.txt) — the pairs are independent, so they run as
jobs in forked workers, at most ``workers`` at a time, and come back as events. A job is one (segment,
entry device) and solves its exit devices in turn: a process per pair would cost more in forks than the
small modules' solves (K² pairs per module: 576 on a 24-device system).

* **Live bound.** A job posts its CP-SAT proven bound on ``OPT(S, u, v)`` as it rises. Until a pair has
  reported, its table entry is 0 (every segment cost is ≥ 0), so the DP recursion over the current
  table (:func:`onnxpart.schedule.split._dp`) is a proven lower bound of the whole makespan at every
  moment; the lane posts it to the board as ``split-dp`` whenever it rises, which moves the progress bar.
* **Time.** A job weighs its sub-instances' op counts ``w_i``; jobs go largest first, ``W`` at a time, a
  round weighing its largest job. With ``T`` seconds a round must end by ``start + T·(its rounds'
  weights so far)/(all rounds' weights)`` on the wall clock, and inside a job each pair by its share of
  the job's time; so the whole SPLIT ends within ``T``, unused time goes to the next pair or round, and
  a one-op module does not get a large module's share. Whatever still runs at ``T`` (plus ``GRACE`` for
  results in flight) is terminated and counts as stopped by the wall clock.
* **Determinism.** Each job is a one-worker CP-SAT solve that also stops after ``DET_PER_SECOND·T·w_i/Σw``
  of CP-SAT's *deterministic* time — a budget that depends neither on ``W`` nor on the machine's load.
  Results are keyed by (segment, entry, exit), never by arrival order. So the same seed gives the same
  schedule with any number of workers — more workers buy wall-clock time, not a different answer —
  unless a job's wall-clock deadline stops it first (counted in ``wall_stops`` and said in the result's
  note; then another run may differ).
* **Stopping.** Once the board's incumbent meets a proven bound the remaining jobs cannot help: they are
  terminated. On Ctrl-C likewise, and SPLIT joins what finished (status ``interrupted``), as every
  solver here returns its best on Ctrl-C. The runner is a context manager, so an error leaves no worker
  behind either.
* **Throughput.** :func:`solve_batch_modules` runs the throughput SPLIT's modules (each whole-batch, no
  entry/exit pairs, no bound: batched modules overlap in time) by the same time and budget rules.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from onnxpart.board import Board
from onnxpart.parallel import BoundPoster, Event, Runner
from onnxpart.schedule import exact, heuristics
from onnxpart.schedule.model import Instance
from onnxpart.schedule.simulator import Schedule, simulate

log = logging.getLogger(__name__)

#: CP-SAT deterministic seconds per wall-clock second on module models, a low estimate (0.08–0.25 measured
#: on a loaded 2-core machine): the deterministic budget then usually ends a job before its deadline does.
DET_PER_SECOND = 0.1
INLINE_OPS = 2  # see solve_modules
GRACE = 0.25  # seconds past the end for the last results to arrive before the jobs are terminated

Key = tuple[int, int | None, int | None]  # (segment, entry device | None, exit device | None)


@dataclass(frozen=True)
class ModuleJob:
    """The pairs of one (segment, entry device), solved one after another in one worker (a process per
    entry, not per pair: forking costs more than a small module's solve): each pair's key, pinned
    sub-instance and CP-SAT deterministic budget, and the job's wall deadline."""

    pairs: tuple[tuple[Key, Instance, float], ...]
    deadline: float  # time.time() by which the job stops
    seed: int

    @property
    def weight(self) -> float:
        return float(sum(sub.n for _, sub, _ in self.pairs))


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
    leaves its time to the next. Each posts its proven bound as method ``str(p)``."""
    start, total, done = time.time(), job.weight, 0.0
    out = []
    for p, (key, sub, budget) in enumerate(job.pairs):
        done += sub.n
        until = start + (job.deadline - start) * done / total
        out.append(solve_pair(key, sub, budget, until, job.seed, BoundPoster(str(p))))
    return out


def solve_pair(key: Key, sub: Instance, budget: float, deadline: float, seed: int, on_bound) -> ModuleResult:
    """One (segment, entry, exit) sub-instance: HEFT warm start, then one-worker CP-SAT posting its
    proven bound; past its deadline, HEFT's schedule (milliseconds) is the answer. A one-op module
    with its exit stand-in, both pinned, has one schedule: simulated, it is optimal (its own bound)."""
    if sub.n <= 2 and (sub.n == 1 or sub.edges) and all(len(sub.allowed(i)) == 1 for i in range(sub.n)):
        only = simulate(sub, [sub.allowed(i)[0] for i in range(sub.n)], sub.topo)
        return ModuleResult(key, only, only.makespan, "optimal")
    warm = heuristics.heft(sub)
    limit = deadline - time.time()
    if limit <= 0.01:
        return ModuleResult(key, warm.schedule if warm else None, None, "time_limit", wall_stop=True)
    t0 = time.perf_counter()
    res = exact.cpsat(sub, limit, warm.schedule if warm else None, seed=seed, workers=1, on_bound=on_bound,
                      deterministic_time=budget)
    wall = res.status == "time_limit" and time.perf_counter() - t0 >= 0.95 * limit
    return ModuleResult(key, res.schedule, res.bound, res.status, wall_stop=wall)


@dataclass
class ModuleTables:
    """What the lane knows: upper and lower cost tables per segment, and the module schedules found."""

    ub: list[dict]
    lb: list[dict]
    found: dict[Key, Schedule] = field(default_factory=dict)
    reported: set[Key] = field(default_factory=set)
    status: dict[str, int] = field(default_factory=dict)
    wall_stops: int = 0
    unsolved: int = 0  # pairs with no schedule that were not proven infeasible
    interrupted: bool = False

    def take(self, result: ModuleResult) -> None:
        s, u, v = result.key
        self.reported.add(result.key)
        self.status[result.status] = self.status.get(result.status, 0) + 1
        self.wall_stops += result.wall_stop
        self.unsolved += result.schedule is None and result.status != "infeasible"
        self.ub[s][(u, v)] = result.schedule.makespan if result.schedule is not None else math.inf
        self.lb[s][(u, v)] = max(self.lb[s][(u, v)], result.bound if result.bound is not None else 0.0)
        if result.schedule is not None:
            self.found[result.key] = result.schedule


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
    ``end`` (``time.time()``, plus a moment for the last results to arrive) whatever still runs. Jobs of
    at most ``INLINE_OPS`` ops per pair (one-op modules) solve in milliseconds: they run here, while the
    workers run the others."""
    keys: dict[int, list[Key]] = {}
    best = -math.inf

    def take(events: list[Event]) -> bool:
        nonlocal best
        for event in events:
            if event.kind == "bound":
                s, u, v = keys[event.job][int(event.method)]
                tables.lb[s][(u, v)] = max(tables.lb[s][(u, v)], event.value)
            elif event.kind == "done":
                for result in event.value:
                    tables.take(result)
            else:  # a failed worker found nothing; the bounds it posted stand
                log.warning("a SPLIT module solve failed: %s", event.value)
                for key in keys[event.job]:
                    tables.take(ModuleResult(key, None, None, "error"))
        if board is not None and events:
            value = dp(tables.lb)
            if value > best:
                best = value
                if board.post("split-dp", value):
                    board.report("split")
        return (board is not None and board.closed()) or time.time() > end + GRACE

    small = [all(sub.n <= INLINE_OPS for _, sub, _ in job.pairs) for job in jobs]
    with Runner(workers) as runner:
        for job in (job for job, inline in zip(jobs, small) if not inline):
            keys[runner.submit(run_module_job, job)] = [key for key, _, _ in job.pairs]
        try:  # here: past its deadline a pair costs one HEFT on two ops, so even late ones get answered
            for n, job in enumerate(job for job, inline in zip(jobs, small) if inline):
                keys[-1 - n] = [key for key, _, _ in job.pairs]
                stop = take([Event("done", -1 - n, run_module_job(job))] + runner.poll())
                if stop and board is not None and board.closed():
                    break
            else:
                runner.wait(take)
        except KeyboardInterrupt:  # like every solver here: keep what was found and proven so far
            log.warning("SPLIT interrupted: joining the module solves finished so far")
            tables.interrupted = True
        if runner.busy or len(keys) < len(jobs):  # closed, Ctrl-C or out of time: stop the rest
            tables.interrupted = tables.interrupted or (board is not None and board.closed())
            runner.shutdown(wait=False)
            if not tables.interrupted:
                _unfinished(jobs, tables)


def _unfinished(jobs: list[ModuleJob], tables: ModuleTables) -> None:
    """Pairs still running at the end count as stopped by the wall clock, without a schedule."""
    for job in jobs:
        for key, _, _ in job.pairs:
            if key not in tables.reported:
                tables.take(ModuleResult(key, None, None, "time_limit", wall_stop=True))


# ------------------------------------------------------------------------------------- throughput
@dataclass(frozen=True)
class BatchModuleJob:
    """One module of the throughput SPLIT, solved whole-batch (``batch`` inputs) on its own."""

    segment: int
    sub: Instance
    batch: int
    budget: float  # seconds of CP-SAT deterministic time
    deadline: float  # time.time() by which the job stops
    seed: int


def run_batch_module_job(job: BatchModuleJob) -> tuple[int, Any, str, bool]:
    """-> (segment, its batched schedule or None, status, stopped by the wall clock): the best of bMET,
    bHEFT and plain data parallelism warm-starts one-worker batch CP-SAT (:func:`.batch.cpsat`)."""
    from onnxpart.schedule import batch as B

    warm = [r.schedule for r in (B.bmet(job.sub, job.batch), B.bheft(job.sub, job.batch),
                                 B.uniform(job.sub, job.batch)) if r.schedule is not None]
    hint = min(warm, key=lambda s: s.makespan) if warm else None
    limit = job.deadline - time.time()
    if limit <= 0.01:
        return job.segment, hint, "time_limit", True
    t0 = time.perf_counter()
    res = B.cpsat(job.sub, job.batch, limit, hint, seed=job.seed, workers=1, deterministic_time=job.budget)
    wall = res.status == "time_limit" and time.perf_counter() - t0 >= 0.95 * limit
    return job.segment, res.schedule, res.status, wall


def solve_batch_modules(subs: list[Instance], batch: int, time_limit: float, seed: int,
                        workers: int) -> list[tuple[int, Any, str, bool] | None]:
    """Every module's :func:`run_batch_module_job` on a runner of ``workers`` processes, with the latency
    lane's time rules (largest first, round deadlines, deterministic budgets, the rest ended at the time
    limit); one result per module, None where a job failed, or the time limit or Ctrl-C ended it first."""
    order = sorted(range(len(subs)), key=lambda s: (-subs[s].n, s))
    weights = [float(subs[s].n) for s in order]
    start = time.time()
    ends = deadlines(weights, max(1, workers), start, time_limit)
    per = DET_PER_SECOND * time_limit / max(1.0, sum(weights))
    results: list[tuple[int, Any, str, bool] | None] = [None] * len(subs)

    def take(events: list[Event]) -> bool:
        for event in events:
            if event.kind == "done":
                results[event.value[0]] = event.value
            elif event.kind == "error":
                log.warning("a throughput SPLIT module solve failed: %s", event.value)
        return time.time() > start + time_limit + GRACE

    with Runner(workers) as runner:
        for s, w, end in zip(order, weights, ends):
            runner.submit(run_batch_module_job, BatchModuleJob(s, subs[s], batch, per * w, end, seed))
        try:
            runner.wait(take)
        except KeyboardInterrupt:
            log.warning("throughput SPLIT interrupted: the modules not finished have no schedule")
    return results
