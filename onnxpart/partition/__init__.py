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

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.board import Board, Progress
from onnxpart.certificate import LowerBound, best_bound
from onnxpart.parallel import Runner
from onnxpart.partition.bound_lane import BoundLane, bound_jobs
from onnxpart.partition.cuts import convex_block_bound, single_block_bound
from onnxpart.partition.exact import BoundResult
from onnxpart.partition.ideals import IDEAL_LIMIT, ideal_dp
from onnxpart.partition.local_search import improve, iterated
from onnxpart.partition.model import BlockCost, Instance, block_costs, check_assignment, simple_lower_bound
from onnxpart.partition.orders import BrkgaOptions, Decoder, brkga, keys_of_order, mla_weighted_order

log = logging.getLogger(__name__)

BOUND_METHODS = ("simple", "bottleneck", "guess", "exact")
LOCAL_SEARCH_SHARE = 0.15  # of the time limit, kept from the order search for the local search
LOCAL_SEARCH_KICKS = 200  # iterated local search kicks when no bound job is left to wait for


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
        return best_bound(self.lower_bounds)


def _compact(assignment: np.ndarray) -> np.ndarray:
    """Renumber blocks so the non-empty ones are 0..b−1 in their order (empty blocks go last)."""
    used = np.unique(assignment)
    remap = np.zeros(int(assignment.max(initial=0)) + 1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return remap[assignment]


def solve(inst: Instance, options: Options, board: Board | None = None) -> Solution:
    """Search a partition and prove lower bounds within ``options.time_limit`` seconds (see module doc);
    ``board`` (default: one reporting to ``options.progress``) follows the incumbent and the bounds."""
    deadline = time.time() + options.time_limit
    k = options.k
    board = board or Board(options.progress)
    for bound in _combinatorial_bounds(inst, k, options.bounds, options.time_limit, options.seed):
        board.add(bound)
    exact = _ideal_solution(inst, options, board)  # 1. exact ideal DP for narrow graphs
    if exact is not None:
        return exact
    search = _Search(inst, k, options, board)  # 2. warm starts
    if inst.n == 0:
        return Solution(inst, k, np.zeros(0, dtype=np.int64), "slicegraph", board.bounds,
                        {"seconds": board.seconds})
    # 3. Bounds in worker processes; running jobs post their proven bounds to the board.
    jobs = bound_jobs(inst, k, options, deadline, search.assignment(), best_bound(board.bounds) or 0.0)
    with Runner(options.workers) as runner:  # Ctrl-C or SIGTERM propagates; leaving ends the workers
        lane = BoundLane(runner, jobs, board, inst, k)
        search.run(deadline, lane)  # 4. order search, then local search on the partition
        runner.wait(lambda events: lane.take(events) or lane.stop(deadline))
        lane.finish()
    assignment, method = search.best_assignment(lane.results)  # 5. the exact MIP's incumbent too
    search.stats.update({"found_by": board.found_by, "seconds": board.seconds})
    solution = Solution(inst, k, _compact(assignment), method, board.bounds, search.stats)
    board.incumbent = solution.value
    board.report("done")
    return solution


def _ideal_solution(inst: Instance, options: Options, board: Board) -> Solution | None:
    """Tarnawski et al.'s DP over the DAG's ideals: the proven optimum when there are few ideals."""
    if options.ideal_limit <= 0 or not inst.n:
        return None
    t0 = time.perf_counter()
    exact = ideal_dp(inst, options.k, options.ideal_limit)
    if exact is None:
        return None
    # The DP's value and the recomputed Eq. (3) cost of its partition agree up to float rounding; report
    # the latter so the bound never exceeds the upper bound by a rounding error.
    value = min(exact.optimum_by_k[-1], max(c.cost for c in block_costs(inst, exact.assignment, options.k)))
    board.add(LowerBound("ideal-dp", value, "optimal", "dp", time.perf_counter() - t0,
                         f"{exact.ideals} ideals, {exact.pairs} ideal pairs"))
    solution = Solution(inst, options.k, _compact(exact.assignment), "ideal-dp", board.bounds,
                        {"ideals": exact.ideals, "optimum_by_k": list(exact.optimum_by_k), "seconds": board.seconds})
    board.offer(solution.value, "ideal-dp")
    return solution


class _Search:
    """The order search (warm starts, mla, random-T, BRKGA) and the local search on the best slicing,
    offering every improvement to the board."""

    def __init__(self, inst: Instance, k: int, options: Options, board: Board):
        self.inst, self.k, self.options, self.board = inst, k, options, board
        self.decoder = Decoder(inst, k)
        self.rng = np.random.default_rng(options.seed)
        self.best_order: np.ndarray | None = None
        self.polished: np.ndarray | None = None
        self.stats: dict[str, Any] = {}
        self.seeds = [np.arange(inst.n, dtype=np.int64), self.decoder.dag.dfs_order()]
        for order, how in zip(self.seeds, ("file-order", "dfs-order")):
            self.consider(order, how)

    def consider(self, order: np.ndarray, how: str) -> float:
        value = self.decoder.value(order)
        if self.board.offer(value, how):
            self.best_order = order
        return value

    def assignment(self) -> np.ndarray:
        return self.decoder.slicing(self.best_order).assignment

    def run(self, deadline: float, lane: BoundLane) -> None:
        """Step 4: stops ``LOCAL_SEARCH_SHARE`` of the time limit early for the local search."""
        options, board = self.options, self.board
        search_deadline = deadline - LOCAL_SEARCH_SHARE * options.time_limit

        def stop_search(_: float = 0.0) -> bool:
            return lane.stop(deadline) or time.time() >= search_deadline

        if options.mla and not stop_search():
            budget = time.time() + 0.1 * options.time_limit
            mla = mla_weighted_order(self.inst, self.decoder.dag, self.rng, BrkgaOptions(population=20, generations=20),
                                     lambda _: time.time() >= budget or stop_search())
            self.seeds.append(mla)
            self.consider(mla, "mla-weighted")
        for _ in range(options.random_orders):
            if stop_search():
                break
            self.consider(self.decoder.order(self.rng.random(self.inst.n)), "random")
        self.stats["generations"] = self._brkga(stop_search)
        if not board.closed():
            self._local_search(deadline, lane)

    def _brkga(self, stop: Callable[..., bool]) -> int:
        generations = 0

        def on_generation(generation: int, value: float, keys: np.ndarray) -> None:
            nonlocal generations
            generations = generation + 1

        if self.options.brkga.generations > 0 and not stop():
            brkga(lambda keys: self.consider(self.decoder.order(keys), "brkga"), self.inst.n, self.options.brkga,
                  self.rng, seeds=[keys_of_order(o) for o in self.seeds], stop=stop, on_generation=on_generation)
        return generations

    def _local_search(self, deadline: float, lane: BoundLane) -> None:
        """Iterated local search on the partition itself, while the bounds run: at most its share of the
        time, after which the main process idles and leaves the cores to the bound MIPs. With no bound
        running, a fixed number of kicks instead, cut only by the time limit: the same seed then gives
        the same partition however fast the machine is."""
        share = LOCAL_SEARCH_SHARE * self.options.time_limit
        kicks = 0 if lane.runner.busy else LOCAL_SEARCH_KICKS
        until = deadline if kicks else min(deadline, time.time() + share)

        def stop_local(value: float) -> bool:
            lane.take(lane.runner.poll())
            return time.time() >= deadline or value <= self.board.lower * (1 + 1e-9)

        local = iterated(self.inst, self.assignment(), self.k, self.options.seed, stop_local, until, kicks=kicks)
        if self.board.offer(local.value, "local-search"):
            self.polished = local.assignment
        self.stats["local_search_moves"] = local.moves

    def best_assignment(self, results: list[BoundResult]) -> tuple[np.ndarray, str]:
        """The search's best, or the exact MIP's incumbent (after a local descent) when that is better."""
        assignment = self.assignment() if self.polished is None else self.polished
        method = "slicegraph" if self.polished is None else "local-search"
        self.stats["evaluations"] = self.decoder.evaluations
        for result in results:
            if result.incumbent is None or result.incumbent_value is None:
                continue
            try:
                check_assignment(self.inst, result.incumbent, self.k)
            except ValueError:
                continue
            mip = improve(self.inst, result.incumbent, self.k, self.options.seed,
                          time.time() + 0.01 * self.options.time_limit)
            if self.board.offer(mip.value, "exact-mip"):
                assignment, method = mip.assignment, "exact-mip"
        return assignment, method


def bounds(inst: Instance, k: int, methods: tuple[str, ...] = BOUND_METHODS, time_limit: float = 60.0,
           workers: int = 0, warm: np.ndarray | None = None) -> list[LowerBound]:
    """The requested lower bounds alone (no search), each proven within ``time_limit``."""
    options = Options(k=k, time_limit=time_limit, bounds=methods, workers=workers)
    board = Board()
    for bound in _combinatorial_bounds(inst, k, methods, time_limit):
        board.add(bound)
    jobs = bound_jobs(inst, k, options, time.time() + time_limit, warm, best_bound(board.bounds) or 0.0)
    with Runner(workers) as runner:
        BoundLane(runner, jobs, board, inst, k).finish()
    return board.bounds


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
