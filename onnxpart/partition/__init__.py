"""Pipeline partitioning (MTPP): k stages with the smallest bottleneck, and proven lower bounds.

Public entry points: :func:`solve` (search + bounds, returns a :class:`Solution`) and :func:`bounds`
(the MIP lower bounds alone). The paper is Archer et al., "Practical Performance Guarantees for
Pipelined DNN Inference" (ICML 2024); the exact mode for narrow graphs follows Tarnawski et al.
(NeurIPS 2020). See ``docs/partition.md``.

How :func:`solve` spends ``time_limit`` (wall clock):

1. Lemma 3.3's simple bound, the single-block min-cut bound and its convex refinement
   (:mod:`~onnxpart.partition.cuts`, all requested by ``simple``; milliseconds to seconds). If the DAG
   has few ideals, the ideal DP (:mod:`~onnxpart.partition.ideals`) returns the proven optimum and
   nothing else runs.
2. Warm starts (file order, DFS order) sliced optimally by SliceGraph give a first incumbent.
3. The requested MIP bounds start in a process pool sized to the machine's cores: the exact MIP (with
   the incumbent and the best bound of step 1 as objective floor) until the deadline; the weighted
   bottleneck (CP-SAT, :mod:`~onnxpart.partition.weighted`), bottleneck and the k guesses in time
   slots on the other workers (:func:`_bound_jobs`). The exact, bottleneck and weighted jobs post
   their proven bound while they run (a queue, drained whenever the search checks its stop rule): the
   progress bar shows it, and it closes the gap as soon as it meets the incumbent.
4. Meanwhile the order search runs: mla-weighted seed, random-T, then BRKGA for its generations,
   stopping early at the deadline or when the incumbent meets a proven bound; then the MIPs still
   running are ended rather than waited for, and report the bound they posted last (status
   ``interrupted``). The order search stops ``LOCAL_SEARCH_SHARE`` of the
   time limit early: the iterated local search on the partition itself
   (:mod:`~onnxpart.partition.local_search`) polishes its best slicing for at most that share (method
   ``local-search`` when it helps), so the main process uses the cores no longer than before.
5. The exact MIP's incumbent replaces the search's when it is better (after a local descent).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.certificate import LowerBound
from onnxpart.partition.cuts import convex_block_bound, single_block_bound
from onnxpart.partition.exact import BoundResult, run_bound_job, set_channel
from onnxpart.partition.ideals import IDEAL_LIMIT, ideal_dp
from onnxpart.partition.local_search import improve, iterated
from onnxpart.partition.model import (BlockCost, Instance, block_costs, check_assignment, simple_lower_bound,
                                      work_lower_bound)
from onnxpart.partition.orders import BrkgaOptions, Decoder, brkga, keys_of_order, mla_weighted_order

log = logging.getLogger(__name__)

BOUND_METHODS = ("simple", "bottleneck", "guess", "exact")
LOCAL_SEARCH_SHARE = 0.15  # of the time limit, kept from the order search for the local search
WEIGHTED_SHARE = 6  # the weighted bottleneck's time, in units of all the other short bound jobs
LOCAL_SEARCH_KICKS = 200  # iterated local search kicks when no bound job is left to wait for


@dataclass(frozen=True)
class Progress:
    """One progress report: seconds since the start, incumbent (UB), best proven bound (LB), phase."""

    seconds: float
    upper: float
    lower: float
    phase: str


@dataclass(frozen=True)
class Options:
    k: int
    time_limit: float = 60.0
    seed: int = 0
    bounds: tuple[str, ...] = ("simple", "bottleneck", "exact")
    brkga: BrkgaOptions = BrkgaOptions()
    random_orders: int = 100  # random-T before BRKGA
    mla: bool = True  # seed BRKGA with an mla-weighted order
    ideal_limit: int = IDEAL_LIMIT  # 0 disables the exact ideal DP
    workers: int = 0  # bound processes; 0 = os.cpu_count()
    progress: Callable[[Progress], None] | None = None

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if not self.time_limit > 0:
            raise ValueError("time_limit must be positive")
        unknown = set(self.bounds) - set(BOUND_METHODS)
        if unknown:
            raise ValueError(f"unknown bound methods {sorted(unknown)}")


@dataclass
class Solution:
    """A partition into k (possibly empty) blocks numbered in DAG order, with its bounds."""

    instance: Instance
    k: int
    assignment: np.ndarray  # op -> block, non-empty blocks first
    method: str  # "ideal-dp", "slicegraph", "exact-mip"
    lower_bounds: list[LowerBound]
    search: dict[str, Any] = field(default_factory=dict)

    @property
    def costs(self) -> list[BlockCost]:
        return block_costs(self.instance, self.assignment, self.k)

    @property
    def value(self) -> float:
        return max((c.cost for c in self.costs), default=0.0)

    @property
    def best_lower_bound(self) -> float | None:
        values = [b.value for b in self.lower_bounds if b.value is not None]
        return max(values) if values else None


def _compact(assignment: np.ndarray) -> np.ndarray:
    """Renumber blocks so the non-empty ones are 0..b−1 in their order (empty blocks go last)."""
    used = np.unique(assignment)
    remap = np.zeros(int(assignment.max(initial=0)) + 1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return remap[assignment]


def solve(inst: Instance, options: Options) -> Solution:
    """Search a partition and prove lower bounds within ``options.time_limit`` seconds (see module doc)."""
    start = time.perf_counter()
    deadline_wall = time.time() + options.time_limit
    k = options.k

    def elapsed() -> float:
        return time.perf_counter() - start

    lbs = _combinatorial_bounds(inst, k, options.bounds, options.time_limit, options.seed)

    live: dict[str, float] = {}  # bounds posted by bound jobs still running (step 3)

    def report(upper: float, phase: str) -> None:
        if options.progress is not None:
            lower = max([b.value for b in lbs if b.value is not None] + list(live.values()), default=0.0)
            options.progress(Progress(elapsed(), upper, lower, phase))

    # 1. Exact ideal DP for narrow graphs.
    if options.ideal_limit > 0 and inst.n:
        t0 = time.perf_counter()
        exact = ideal_dp(inst, k, options.ideal_limit)
        if exact is not None:
            # The DP's value and the recomputed Eq. (3) cost of its partition agree up to float rounding;
            # report the latter so the bound never exceeds the upper bound by a rounding error.
            value = min(exact.optimum_by_k[-1], max(c.cost for c in block_costs(inst, exact.assignment, k)))
            lbs.append(LowerBound("ideal-dp", value, "optimal", "dp", time.perf_counter() - t0,
                                  f"{exact.ideals} ideals, {exact.pairs} ideal pairs"))
            solution = Solution(inst, k, _compact(exact.assignment), "ideal-dp", lbs,
                                {"ideals": exact.ideals, "optimum_by_k": list(exact.optimum_by_k),
                                 "seconds": elapsed()})
            report(solution.value, "ideal-dp")
            return solution

    # 2. Warm starts.
    decoder = Decoder(inst, k)
    rng = np.random.default_rng(options.seed)
    best_value, best_order, best_how = math.inf, None, ""

    def consider(order: np.ndarray, how: str) -> float:
        nonlocal best_value, best_order, best_how
        value = decoder.value(order)
        if value < best_value - 1e-12 * max(1.0, abs(value)):
            best_value, best_order, best_how = value, order, how
            report(best_value, how)
        return value

    seeds = [np.arange(inst.n, dtype=np.int64), decoder.dag.dfs_order()]
    for order, how in zip(seeds, ("file-order", "dfs-order")):
        consider(order, how)
    if inst.n == 0:
        return Solution(inst, k, np.zeros(0, dtype=np.int64), "slicegraph", lbs, {"seconds": elapsed()})

    # 3. Bounds in a process pool; running jobs post their proven bounds to ``channel`` (``live``).
    warm = decoder.slicing(best_order).assignment
    jobs = _bound_jobs(inst, k, options, deadline_wall, warm, _floor(lbs))
    channel = multiprocessing.get_context("fork").Queue() if jobs else None
    pool, futures = _start_jobs(jobs, options.workers, channel)
    results: list[BoundResult] = []

    def collect() -> None:
        rose = False
        while channel is not None:
            try:
                method, value = channel.get_nowait()
            except (queue.Empty, OSError, EOFError):
                break
            if value > max(live.get(method, -math.inf), _floor(lbs)):
                rose = True
            live[method] = max(live.get(method, -math.inf), value)
        for future in [f for f in futures if f.done()]:
            futures.remove(future)
            results.append(_result_of(future))
            _merge_bounds(lbs, results, k, done=not futures, work_floor=work_lower_bound(inst, k))
            rose = True
        if rose:
            report(best_value, "bounds")

    def proven() -> float:
        return max(_floor(lbs), *live.values()) if live else _floor(lbs)

    def closed() -> bool:
        return best_value <= proven() * (1 + 1e-9)

    def stop(_: float = 0.0) -> bool:
        collect()
        return time.time() >= deadline_wall or closed()

    search_deadline = deadline_wall - LOCAL_SEARCH_SHARE * options.time_limit

    def stop_search(_: float = 0.0) -> bool:
        return stop() or time.time() >= search_deadline

    def stop_local(value: float) -> bool:
        collect()
        return time.time() >= deadline_wall or value <= proven() * (1 + 1e-9)

    polished: np.ndarray | None = None

    stats: dict[str, Any] = {}
    interrupted = False
    try:
        # 4. Order search.
        if options.mla and not stop_search():
            budget = time.time() + 0.1 * options.time_limit
            mla_opts = BrkgaOptions(population=20, generations=20)
            mla = mla_weighted_order(inst, decoder.dag, rng, mla_opts,
                                     lambda _: time.time() >= budget or stop_search())
            seeds.append(mla)
            consider(mla, "mla-weighted")
        for _ in range(options.random_orders):
            if stop_search():
                break
            consider(decoder.order(rng.random(inst.n)), "random")
        generations = 0

        def fitness(keys: np.ndarray) -> float:
            return consider(decoder.order(keys), "brkga")

        def on_generation(generation: int, value: float, keys: np.ndarray) -> None:
            nonlocal generations
            generations = generation + 1

        if options.brkga.generations > 0 and not stop_search():
            brkga(fitness, inst.n, options.brkga, rng, seeds=[keys_of_order(o) for o in seeds], stop=stop_search,
                  on_generation=on_generation)
        stats["generations"] = generations
        # Iterated local search on the partition itself, while the bounds run.
        if not closed():
            # With no bound running, a fixed number of kicks keeps the run short and deterministic.
            # It takes at most its share of the time: once it ends, the main process idles and leaves
            # the cores to the bound MIPs.
            local = iterated(inst, decoder.slicing(best_order).assignment, k, options.seed, stop_local,
                             min(deadline_wall, time.time() + LOCAL_SEARCH_SHARE * options.time_limit),
                             kicks=0 if futures else LOCAL_SEARCH_KICKS)
            if local.value < best_value - 1e-12 * max(1.0, best_value):
                polished, best_value, best_how = local.assignment, local.value, "local-search"
                report(best_value, best_how)
            stats["local_search_moves"] = local.moves
        # Wait for the bounds (they stop by the deadline themselves).
        while futures and not stop():
            cf.wait(futures, timeout=0.2, return_when=cf.FIRST_COMPLETED)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: keeping the best partition and the bounds proven so far")
    finally:
        collect()
        # Jobs still running once the gap is closed cannot improve anything: end them, do not wait.
        early = interrupted or closed()
        _shutdown(pool, futures, wait=not early)
        if not early:
            collect()
        for future in futures:
            future.cancel()
    # Ended early, the unfinished guesses are simply not reported (rather than reported as unproven);
    # the other unfinished jobs report the bound they had posted.
    _merge_bounds(lbs, results, k, done=not early, work_floor=work_lower_bound(inst, k))
    _add_posted_bounds(lbs, live, elapsed())
    if channel is not None:
        channel.close()

    # 5. The exact MIP's incumbent is a candidate too.
    assignment = decoder.slicing(best_order).assignment if polished is None else polished
    method = "slicegraph" if polished is None else "local-search"
    for result in results:
        if result.incumbent is not None and result.incumbent_value is not None:
            try:
                check_assignment(inst, result.incumbent, k)
            except ValueError:
                continue
            mip = improve(inst, result.incumbent, k, options.seed, time.time() + 0.01 * options.time_limit)
            if mip.value < best_value - 1e-12 * max(1.0, best_value):
                assignment, best_value, best_how, method = mip.assignment, mip.value, "exact-mip", "exact-mip"
    stats.update({"evaluations": decoder.evaluations, "found_by": best_how, "seconds": elapsed(),
                  "interrupted": interrupted})
    solution = Solution(inst, k, _compact(assignment), method, lbs, stats)
    report(solution.value, "done")
    return solution


def bounds(inst: Instance, k: int, methods: tuple[str, ...] = BOUND_METHODS, time_limit: float = 60.0,
           workers: int = 0, warm: np.ndarray | None = None) -> list[LowerBound]:
    """The requested lower bounds alone (no search), each proven within ``time_limit``."""
    options = Options(k=k, time_limit=time_limit, bounds=methods, workers=workers)
    lbs = _combinatorial_bounds(inst, k, methods, time_limit)
    pool, futures = _start_jobs(_bound_jobs(inst, k, options, time.time() + time_limit, warm, _floor(lbs)),
                                workers)
    results = [_result_of(f) for f in futures]
    _shutdown(pool, [], wait=True)
    _merge_bounds(lbs, results, k, done=True, work_floor=work_lower_bound(inst, k))
    return lbs


# ------------------------------------------------------------------------------------ bound jobs
def _combinatorial_bounds(inst: Instance, k: int, methods: tuple[str, ...], time_limit: float,
                          seed: int = 0) -> list[LowerBound]:
    """``simple`` (or no bounds at all) gives Lemma 3.3, the single-block min-cut bound and its convex
    refinement (:mod:`~onnxpart.partition.cuts`; at most a tenth of ``time_limit``). They are floors
    for the MIPs."""
    if methods and "simple" not in methods:
        return []
    t0 = time.perf_counter()
    simple = simple_lower_bound(inst, k)
    cut = single_block_bound(inst)
    t1 = time.perf_counter()
    lbs = [LowerBound("simple", simple, "bound", "formula", 0.0, "Lemma 3.3"),
           LowerBound("single-block", cut.value, "bound", "max-flow", round(t1 - t0, 3),
                      f"min over sets S containing op {cut.op} of f(S), by max flow ({cut.flows} solved)")]
    convex = convex_block_bound(inst, max(simple, cut.value), time.time() + 0.1 * time_limit, seed)
    lbs.append(LowerBound("convex-block", convex.value, "optimal" if convex.proven else "time_limit", "max-flow+highs",
                          round(time.perf_counter() - t1, 3),
                          f"min over blocks B containing op {convex.op} of f(B) ({convex.flows} max flows, "
                          f"{convex.mips} three-superblock MIPs); at least the bounds above"))
    return lbs


def _floor(lbs: list[LowerBound]) -> float:
    return max((b.value for b in lbs if b.value is not None), default=0.0)


def _bound_jobs(inst: Instance, k: int, options: Options, deadline: float, warm: np.ndarray | None,
                floor: float) -> list[dict]:
    """Job descriptions for :func:`run_bound_job`: exact first (strongest), then the weighted bottleneck
    (CP-SAT) and the bottleneck MIP (both requested by ``bottleneck``), then guesses. ``floor`` (a proven
    bound) is the exact MIP's and the guesses' objective lower limit.

    Time: with ≥ 2 workers the exact MIP keeps one worker until the deadline and the other workers run
    the short jobs one after another, in rounds of ``lanes`` jobs; round r must stop by
    ``now + T · (shares of rounds ≤ r) / (all shares)``, a round's share being its largest job's, so
    time a job leaves unused goes to the next ones and every LB_j gets its turn. The weighted bottleneck
    has ``WEIGHTED_SHARE`` times the share of all the other short jobs together: on graphs whose
    bottleneck is its io (REGAL) it is the strong bound of the lane, and its CP-SAT models need seconds
    where the guesses' MIPs stay at Σ work / k; when it proves its optimum early, the rest is theirs."""
    if k == 1 or inst.n == 0:
        return []  # the simple bound is exact for k = 1
    L = work_lower_bound(inst, k)
    floor = max(floor, simple_lower_bound(inst, k))
    now = time.time()
    jobs, short = [], []
    if "exact" in options.bounds:
        jobs.append(dict(kind="exact", inst=inst, k=k, lower=L, objective_floor=floor,
                         deadline=deadline, warm=warm, seed=options.seed))
    if "bottleneck" in options.bounds:
        short.append(dict(kind="weighted", inst=inst, k=k, lower=L, seed=options.seed))
        short.append(dict(kind="bottleneck", inst=inst, k=k, lower=L, seed=options.seed))
    if "guess" in options.bounds:
        short += [dict(kind="guess", inst=inst, k=k, j=j, lower=L, objective_floor=floor, seed=options.seed)
                  for j in range(1, k + 1)]
    workers = options.workers or os.cpu_count() or 1
    lanes = workers - 1 if jobs and workers > 1 else workers
    if jobs and workers == 1:  # one worker: the exact MIP takes its turn like the others
        short, jobs = jobs + short, []
    shares = [WEIGHTED_SHARE * max(1, len(short) - 1) if job["kind"] == "weighted" else 1 for job in short]
    rounds = [max(shares[i:i + lanes]) for i in range(0, len(short), lanes)]
    for i, job in enumerate(short):
        job["deadline"] = min(deadline, now + sum(rounds[:i // lanes + 1]) / sum(rounds) * (deadline - now))
    return jobs + short


def _start_jobs(jobs: list[dict], workers: int, channel=None) -> tuple[cf.Executor | None, list[cf.Future]]:
    """Submit the jobs to a fork process pool; its workers post running bounds to ``channel`` if given."""
    if not jobs:
        return None, []
    count = min(len(jobs), workers or os.cpu_count() or 1)
    pool = cf.ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("fork"),
                                  initializer=None if channel is None else set_channel,
                                  initargs=() if channel is None else (channel,))
    return pool, [pool.submit(run_bound_job, job) for job in jobs]


def _shutdown(pool: cf.Executor | None, futures: list[cf.Future], wait: bool) -> None:
    """Wait for the jobs (they stop by their deadlines), or cancel the queued ones and terminate this
    pool's own worker processes (a HiGHS run cannot be interrupted from outside its process)."""
    if pool is None:
        return
    if wait:
        pool.shutdown(wait=True)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    for process in workers:
        process.join(timeout=5)


def _result_of(future: cf.Future) -> BoundResult:
    try:
        return future.result()
    except Exception as exc:  # a crashed or interrupted worker proves nothing
        log.warning("a bound computation failed: %s", exc)
        return BoundResult("error", None, "error", 0.0, note=str(exc)[:200])


_SOURCES = {"exact": ("highs", "Figure 3, Eqs. 5-12"), "bottleneck": ("highs", "three-superblock MIP, Section 3.2"),
            "weighted-bottleneck": ("cp-sat", "Section 3.2's three superblocks with Eq. 14 for pigeonhole "
                                              "weights pi = work + alpha*io({v}): some block holds pi(V)/k")}


def _add_posted_bounds(lbs: list[LowerBound], live: dict[str, float], seconds: float) -> None:
    """A job ended before it returned (the gap closed, or Ctrl-C) reports the last bound it posted: it
    was proven when posted (status ``interrupted``)."""
    names = {b.method for b in lbs}
    for method, value in sorted(live.items()):
        if method in _SOURCES and method not in names:
            solver, note = _SOURCES[method]
            lbs.append(LowerBound(method, value, "interrupted", solver, round(seconds, 3),
                                  f"{note}; ended before it finished, with this bound proven"))


def _merge_bounds(lbs: list[LowerBound], results: list[BoundResult], k: int, done: bool,
                  work_floor: float) -> None:
    """Turn finished jobs into LowerBound entries; bottleneck-guess is min_j LB_j once all j are in."""
    names = {b.method for b in lbs}
    for r in results:
        if r.method in _SOURCES and r.method not in names:
            solver, note = _SOURCES[r.method]
            lbs.append(LowerBound(r.method, r.value, r.status, solver, round(r.seconds, 3),
                                  f"{note}; {r.note}" if r.note else note))
            names.add(r.method)
    guesses = [r for r in results if r.method.startswith("guess-")]
    if guesses and "bottleneck-guess" not in names and (len(guesses) == k or done):
        # A guess that proved nothing in time still has LB_j >= block_2 >= L by Eq. (14): use L for it.
        values = [r.value if r.value is not None else work_floor for r in guesses]
        value = min(values) if len(guesses) == k else None
        proven = all(r.status in ("optimal", "infeasible") for r in guesses)
        status = "optimal" if value is not None and proven else ("time_limit" if value is not None else "error")
        missing = sum(r.value is None for r in guesses)
        note = f"min over j of {k} MIPs LB_j, Section 3.3; seconds summed"
        if missing:
            note += f"; {missing} LB_j proved nothing in time and count as L (Eq. 14)"
        lbs.append(LowerBound("bottleneck-guess", value, status, "highs",
                              round(sum(r.seconds for r in guesses), 3), note))
