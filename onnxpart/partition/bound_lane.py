"""The bound lane of :func:`onnxpart.partition.solve`: the MIP and CP-SAT lower-bound jobs, what each
gets of the time limit, running them on the shared :class:`~onnxpart.parallel.Runner`, and turning their
posted bounds and results into board entries (``bottleneck-guess`` = min over the k guesses' LB_j)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import numpy as np

from onnxpart.board import Board, Status
from onnxpart.certificate import LowerBound
from onnxpart.parallel import BoundPoster, Event, Runner
from onnxpart.partition.exact import BoundResult, bottleneck_mip, exact_mip, exact_skipped, guess_mip, scaled
from onnxpart.partition.model import Instance, simple_lower_bound, work_lower_bound
from onnxpart.partition.weighted import weighted_bottleneck
from onnxpart.strategy import Method, cores

log = logging.getLogger(__name__)

WEIGHTED_SHARE = 6  # the weighted bottleneck's time, in units of all the other short bound jobs
GRACE = 0.5  # seconds past the deadline a job has to send the result its solver's time limit left it
YIELD_AFTER = 0.25  # of its time, after which an exact MIP proving less than another job gets low priority


class BoundLane:
    """The bound jobs on a :class:`Runner`: their posted bounds and results go onto the board as they
    arrive (``bottleneck-guess`` once all k guesses are in)."""

    def __init__(self, runner: Runner, jobs: list[dict], board: Board, inst: Instance, k: int):
        self.runner, self.board, self.inst, self.k = runner, board, inst, k
        self.results: list[BoundResult] = []
        self.methods = {job_method(job) for job in jobs}
        self.exact: tuple[int, dict, float] | None = None  # the exact MIP's job id, job, start, until it yields
        for job in jobs:
            job_id = runner.submit(run_bound_job, job)
            if job["kind"] == "exact":
                self.exact = (job_id, job, time.monotonic())

    def take(self, events: list[Event]) -> bool:
        """Put ``events`` on the board; report progress when the bound rose. Never stops by itself."""
        rose, finished = False, False
        for event in events:
            if event.kind == "bound":
                rose = self.board.post(event.method, event.value) or rose
                continue
            if event.kind == "error":
                log.warning("a bound computation failed: %s", event.value)
            self.results.append(event.value if event.kind == "done" else
                                BoundResult("error", None, "error", 0.0, note=str(event.value)[:200]))
            finished = True
        if finished:  # after the whole batch: bottleneck-guess needs all k guesses at once
            self._merge(done=not self.runner.busy)
        if rose or finished:
            self.board.report("bounds")
        self._yield_exact()
        return False

    def _yield_exact(self) -> None:
        """Past :data:`YIELD_AFTER` of its time, an exact MIP whose proven bound (at least its objective
        floor) is below what another job proved gets a lower CPU priority (:meth:`Runner.lower_priority`):
        it goes on with a smaller share of the cores. Where the single-block bounds are the strong ones
        (REGAL: the weighted bottleneck proves 2-7% above Σ work / k, where HiGHS's bound of Figure 3 stays
        within 1% of it after 480 s, BENCHMARKS), three processes on two cores otherwise give the one that
        proves the most two thirds of a core. A lower priority, not a stop: where the exact MIP's bound
        rises late (inception_v2, k = 16) it still gets there."""
        if self.exact is None:
            return
        job_id, job, start = self.exact
        if time.monotonic() < start + YIELD_AFTER * (job["deadline"] - start):
            return
        proven = self.board.live.get("exact", job.get("objective_floor", 0.0))
        if self.board.lower > proven * (1 + 1e-9) and self.runner.lower_priority(job_id):
            log.info("the exact MIP proves %.6g, another bound %.6g: it runs at a lower priority", proven,
                     self.board.lower)
            self.exact = None

    def stop(self, deadline: float) -> bool:
        """Drain the events; True once the deadline passed or the incumbent meets a proven bound."""
        self.take(self.runner.poll())
        return time.monotonic() >= deadline or self.board.closed()

    def finish(self, deadline: float) -> None:
        """Jobs still running once the gap is closed cannot improve anything: end them, do not wait; they
        report the bound they posted last. Otherwise wait for them (their deadlines stop them), but no
        longer than :data:`GRACE` past ``deadline``: a job still building its model then (a MIP over
        20,000 ops) is ended too. Ended early, unfinished guesses are simply not reported. (Ctrl-C never
        gets here: it propagates, and the runner's ``with`` ends the workers.)"""
        self.take(self.runner.poll())
        early = self.board.closed()
        self.take(self.runner.shutdown(wait=not early, until=deadline + GRACE))
        self._merge(done=not early)
        for bound in self.board.posted_bounds(SOURCES):
            self.board.add(bound)
        if not early:
            self._list_unproven()

    def _list_unproven(self) -> None:
        """Jobs ended past the deadline before they posted anything (a MIP still building its model on a
        large graph) are listed too, with no bound: the certificate says what ran."""
        listed = {b.method for b in self.board.bounds}
        for method in sorted(self.methods & set(SOURCES) - listed):
            self.board.add(LowerBound(method, None, Status.INTERRUPTED.value, SOURCES[method][0],
                                      round(self.board.seconds, 3),
                                      f"{SOURCES[method][1]}; ended at the time limit before it proved a bound"))

    def _merge(self, done: bool) -> None:
        merge_bounds(self.board.bounds, self.results, self.k, done=done, work_floor=work_lower_bound(self.inst, self.k))


def bound_jobs(inst: Instance, k: int, options, methods: Sequence[Method], deadline: float,
               warm: np.ndarray | None, floor: float) -> list[dict]:
    """Job descriptions for :func:`run_bound_job`, from each bound method's ``run`` (the registry of
    :mod:`onnxpart.partition`): the ``exact`` kind first (strongest), then the ``bound`` kind in registry
    order (the weighted bottleneck, CP-SAT, and the bottleneck MIP for ``bottleneck``; then the guesses).
    ``floor`` (a proven bound) is the exact MIP's and the guesses' objective lower limit.

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
    now = time.monotonic()
    jobs = [dict(job, deadline=deadline) for m in methods if m.kind == "exact"
            for job in m.run(inst, k, L, floor, warm, options.seed)]
    short = [job for m in methods if m.kind == "bound" for job in m.run(inst, k, L, floor, warm, options.seed)]
    workers = cores(options.workers)
    lanes = workers - 1 if jobs and workers > 1 else workers
    if jobs and workers == 1:  # one worker: the exact MIP takes its turn like the others
        short, jobs = jobs + short, []
    shares = [WEIGHTED_SHARE * max(1, len(short) - 1) if job["kind"] == "weighted" else 1 for job in short]
    rounds = [max(shares[i:i + lanes]) for i in range(0, len(short), lanes)]
    for i, job in enumerate(short):
        job["deadline"] = min(deadline, now + sum(rounds[:i // lanes + 1]) / sum(rounds) * (deadline - now))
    return jobs + short


def skipped_bounds(inst: Instance, k: int, methods: Sequence[Method]) -> list[LowerBound]:
    """The certificate entry of the exact MIP when it is requested but too large to build
    (:func:`~onnxpart.partition.exact.exact_skipped`): no value, status ``skipped``, and why."""
    why = exact_skipped(inst, k) if k > 1 and any(m.name == "exact" for m in methods) else None
    if why is None:
        return []
    solver, note = SOURCES["exact"]
    return [LowerBound("exact", None, "skipped", solver, 0.0, f"{note}; {why}")]


def job_method(job: dict) -> str:
    """The method name ``job`` reports its bound under."""
    return {"guess": f"guess-{job.get('j')}", "weighted": "weighted-bottleneck"}.get(job["kind"], job["kind"])


def run_bound_job(job: dict) -> BoundResult:
    """Run one bound job described by ``job`` (picklable, for a process pool): a HiGHS MIP of this module
    or the CP-SAT weighted bottleneck (:mod:`~onnxpart.partition.weighted`). The time limit is what is
    left until ``job['deadline']`` (``time.monotonic()``, the same clock in every process). The exact,
    bottleneck and weighted jobs post their proven bound while they run (:func:`onnxpart.parallel.post_bound`);
    a guess's LB_j alone bounds nothing."""
    limit = job["deadline"] - time.monotonic()
    name = job_method(job)
    if limit <= 0.05:
        return BoundResult(name, None, "time_limit", 0.0, note="no time left")
    inst, k, seed = job["inst"], job["k"], job["seed"]
    if job["kind"] == "weighted":  # CP-SAT, on integers of its own scale
        return weighted_bottleneck(inst, k, limit, seed=seed, on_bound=BoundPoster(name, 1.0))
    # Solve in units of the work bound L so that HiGHS' absolute tolerances (1e-6) are relative ones.
    scale = job["lower"] if job["lower"] > 0 else 1.0
    inst = scaled(inst, scale)
    lower = job["lower"] / scale
    if job["kind"] == "exact":
        result = exact_mip(inst, k, limit, lower=job.get("objective_floor", job["lower"]) / scale,
                           warm=job.get("warm"), seed=seed, on_bound=BoundPoster(name, scale))
    elif job["kind"] == "bottleneck":
        result = bottleneck_mip(inst, k, lower, limit, seed=seed, on_bound=BoundPoster(name, scale))
    else:
        result = guess_mip(inst, k, job["j"], lower, limit, seed=seed,
                           floor=job.get("objective_floor", 0.0) / scale)
    for attr in ("value", "incumbent_value"):
        value = getattr(result, attr)
        if value is not None and math.isfinite(value):
            setattr(result, attr, value * scale)
    return result


SOURCES = {"exact": ("highs", "Figure 3, Eqs. 5-12"), "bottleneck": ("highs", "three-superblock MIP, Section 3.2"),
            "weighted-bottleneck": ("cp-sat", "Section 3.2's three superblocks with Eq. 14 for pigeonhole "
                                              "weights pi = work + alpha*io({v}): some block holds pi(V)/k")}


def merge_bounds(lbs: list[LowerBound], results: list[BoundResult], k: int, done: bool,
                  work_floor: float) -> None:
    """Turn finished jobs into LowerBound entries; bottleneck-guess is min_j LB_j once all j are in."""
    names = {b.method for b in lbs}
    for r in results:
        if r.method in SOURCES and r.method not in names:
            solver, note = SOURCES[r.method]
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
