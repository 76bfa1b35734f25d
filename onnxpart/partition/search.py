"""How :func:`onnxpart.partition.solve` spends its :class:`~onnxpart.strategy.Budget` (``time_limit``, on
``time.monotonic()``):

1. The ``simple`` bounds: Lemma 3.3's simple bound, the single-block min-cut bound and its convex
   refinement (:mod:`~onnxpart.partition.cuts`; milliseconds to seconds). If the DAG has few ideals, the
   ideal DP (:mod:`~onnxpart.partition.ideals`) returns the proven optimum and nothing else runs.
2. Warm starts (file order, then DFS order if loading left time) sliced optimally by SliceGraph give a
   first incumbent.
3. The other requested bound methods' jobs start on the bound lane (:mod:`~onnxpart.partition.bound_lane`),
   sized to the machine's cores: the exact MIP (with the incumbent and the best bound of step 1 as
   objective floor) until the deadline; the weighted bottleneck (CP-SAT), bottleneck and the k guesses in
   time slots on the other workers. The exact, bottleneck and weighted jobs post their proven bound while
   they run (drained whenever the search checks its stop rule): the progress bar shows it, and it closes
   the gap as soon as it meets the incumbent. An exact MIP that proves less than another job past a
   quarter of its time runs on at a lower CPU priority (``BoundLane._yield_exact``).
4. Meanwhile the order search runs: mla-weighted seed, random-T, then BRKGA for its generations, stopping
   early at the deadline or when the incumbent meets a proven bound; then the MIPs still running are
   ended rather than waited for, and report the bound they posted last (status ``interrupted``). The
   order search stops the parts of the local and window searches early: the iterated local search on the
   partition itself (:mod:`~onnxpart.partition.local_search`) polishes its best slicing for at most its
   part (method ``local-search`` when it helps), then the window search
   (:mod:`~onnxpart.partition.window_lns`, where two blocks fit a window model) re-partitions consecutive
   blocks around the bottleneck exactly until the deadline or until no window helps (method
   ``window-search``).
5. The exact MIP's incumbent replaces the search's when it is better (after a local descent).

The parts of the time limit these steps take are declared once, in :data:`PARTS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.parallel import Runner
from onnxpart.partition import window_lns
from onnxpart.partition.bound_lane import BoundLane, bound_jobs, skipped_bounds
from onnxpart.partition.cuts import convex_block_bound, single_block_bound
from onnxpart.partition.exact import BoundResult
from onnxpart.partition.ideals import ideal_dp
from onnxpart.partition.local_search import improve, iterated
from onnxpart.partition.model import Instance, block_costs, check_assignment, simple_lower_bound
from onnxpart.partition.orders import BrkgaOptions, Decoder, brkga, keys_of_order, mla_weighted_order
from onnxpart.strategy import Budget, Method

#: What steps take of the time limit (:meth:`Budget.part`): the single-block and convex-block bounds, the
#: mla-weighted seed, the local and window searches (kept from the end of the order search; the window search's
#: part only where it runs) and the descent on the exact MIP's incumbent.
PARTS = {"single-block": 0.1, "convex-block": 0.1, "mla-weighted": 0.1, "local-search": 0.1,
         "window-search": 0.45, "mip-polish": 0.01}
LOCAL_SEARCH_KICKS = 200  # iterated local search kicks when no bound job is left to wait for

#: What :func:`run` finds: the op -> block assignment, the method that found it, the search's statistics.
Found = tuple[np.ndarray, str, dict[str, Any]]


def run(inst: Instance, options, board: Board, budget: Budget, methods: Sequence[Method]) -> Found:
    """Steps 1-5 of the module doc with the bound ``methods`` selected (``options``: partition's Options);
    the statistics record the ops the single-block bound covered (what ``--check-certificate`` re-derives
    it over)."""
    covered = {}
    if not methods or any(m.name == "simple" for m in methods):
        bounds, covered["single_block_ops"] = combinatorial_bounds(inst, options.k, budget, options.seed)
        for bound in bounds:
            board.add(bound)
    assignment, method, stats = _find(inst, options, board, budget, methods)
    return assignment, method, {**stats, **covered}


def _find(inst: Instance, options, board: Board, budget: Budget, methods: Sequence[Method]) -> Found:
    """Steps 1 (the ideal DP) to 5 of the module doc, after the ``simple`` bounds."""
    k = options.k
    exact = _ideal_solution(inst, options, board)  # 1. exact ideal DP for narrow graphs
    if exact is not None:
        return exact
    search = _Search(inst, k, options, board, budget)  # 2. warm starts
    if inst.n == 0:
        return np.zeros(0, dtype=np.int64), "slicegraph", {"seconds": board.seconds}
    # 3. Bounds in worker processes; running jobs post their proven bounds to the board.
    jobs = bound_jobs(inst, k, options, methods, budget.deadline, search.assignment(), board.lower)
    for bound in skipped_bounds(inst, k, methods):
        board.add(bound)
    with Runner(options.workers) as runner:  # Ctrl-C or SIGTERM propagates; leaving ends the workers
        lane = BoundLane(runner, jobs, board, inst, k)
        search.run(lane)  # 4. order search, then local search on the partition
        runner.wait(lambda events: lane.take(events) or lane.stop(budget.deadline))
        lane.finish(budget.deadline)
    assignment, method = search.best_assignment(lane.results)  # 5. the exact MIP's incumbent too
    search.stats.update({"found_by": board.found_by, "seconds": board.seconds})
    return compact(assignment), method, search.stats


def compact(assignment: np.ndarray) -> np.ndarray:
    """Renumber blocks so the non-empty ones are 0..b−1 in their order (empty blocks go last)."""
    used = np.unique(assignment)
    remap = np.zeros(int(assignment.max(initial=0)) + 1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return remap[assignment]


def _ideal_solution(inst: Instance, options, board: Board) -> Found | None:
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
    assignment = compact(exact.assignment)
    board.offer(max(c.cost for c in block_costs(inst, assignment, options.k)), "ideal-dp")
    return assignment, "ideal-dp", {"ideals": exact.ideals, "optimum_by_k": list(exact.optimum_by_k),
                                    "seconds": board.seconds}


class _Search:
    """The order search (warm starts, mla, random-T, BRKGA) and the local search on the best slicing,
    offering every improvement to the board."""

    def __init__(self, inst: Instance, k: int, options, board: Board, budget: Budget):
        self.inst, self.k, self.options, self.board, self.budget = inst, k, options, board, budget
        self.decoder = Decoder(inst, k)
        self.rng = np.random.default_rng(options.seed)
        self.best_order: np.ndarray | None = None
        self.polished: np.ndarray | None = None  # the local or window search's partition, when better
        self.polished_by = "slicegraph"
        self.stats: dict[str, Any] = {}
        self.seeds = [np.arange(inst.n, dtype=np.int64)]
        self.consider(self.seeds[0], "file-order")  # the first answer, whatever the time left
        if not budget.expired():  # a slicing is seconds at 10,000 ops and k = 80: loading may have taken it all
            self.seeds.append(self.decoder.dag.dfs_order())
            self.consider(self.seeds[1], "dfs-order")

    def consider(self, order: np.ndarray, how: str) -> float:
        value = self.decoder.value(order)
        if self.board.offer(value, how):
            self.best_order = order
        return value

    def assignment(self) -> np.ndarray:
        return self.decoder.slicing(self.best_order).assignment

    def run(self, lane: BoundLane) -> None:
        """Step 4: stops the local and window searches' parts of the time limit early, for those searches."""
        options, board, budget = self.options, self.board, self.budget
        windows = window_lns.applies(self.inst, self.k)
        polish = PARTS["local-search"] + (PARTS["window-search"] if windows else 0.0)
        search_deadline = budget.deadline - budget.part(polish)

        def stop_search(_: float = 0.0) -> bool:
            return lane.stop(budget.deadline) or time.monotonic() >= search_deadline

        if options.mla and not stop_search():
            until = budget.clock() + budget.part(PARTS["mla-weighted"])
            mla = mla_weighted_order(self.inst, self.decoder.dag, self.rng, BrkgaOptions(population=20, generations=20),
                                     lambda _: time.monotonic() >= until or stop_search())
            self.seeds.append(mla)
            self.consider(mla, "mla-weighted")
        for _ in range(options.random_orders):
            if stop_search():
                break
            self.consider(self.decoder.order(self.rng.random(self.inst.n)), "random")
        self.stats["generations"] = self._brkga(stop_search)
        if not board.closed():
            self._local_search(lane)
        if windows and not board.closed():
            self._window_search(lane)

    def _brkga(self, stop: Callable[..., bool]) -> int:
        generations = 0

        def on_generation(generation: int, value: float, keys: np.ndarray) -> None:
            nonlocal generations
            generations = generation + 1

        if self.options.brkga.generations > 0 and not stop():
            brkga(lambda keys: self.consider(self.decoder.order(keys), "brkga"), self.inst.n, self.options.brkga,
                  self.rng, seeds=[keys_of_order(o) for o in self.seeds], stop=stop, on_generation=on_generation)
        return generations

    def _local_search(self, lane: BoundLane) -> None:
        """Iterated local search on the partition itself, while the bounds run: at most its part of the
        time, after which the main process idles and leaves the cores to the bound MIPs. With no bound
        running, a fixed number of kicks instead, cut only by the time limit: the same seed then gives
        the same partition however fast the machine is."""
        budget = self.budget
        kicks = 0 if lane.runner.busy else LOCAL_SEARCH_KICKS
        until = budget.deadline if kicks else budget.until(budget.part(PARTS["local-search"]))

        def stop_local(value: float) -> bool:
            lane.take(lane.runner.poll())
            return budget.expired() or self.board.meets(value)

        local = iterated(self.inst, self.assignment(), self.k, self.options.seed, stop_local, until, kicks=kicks)
        if self.board.offer(local.value, "local-search"):
            self.polished, self.polished_by = local.assignment, "local-search"
        self.stats["local_search_moves"] = local.moves

    def _window_search(self, lane: BoundLane) -> None:
        """The window search (:mod:`~onnxpart.partition.window_lns`) on the best partition so far, until
        no window helps or the deadline."""
        start = self.assignment() if self.polished is None else self.polished

        def stop_window(value: float) -> bool:
            lane.take(lane.runner.poll())
            return self.board.meets(value)

        found = window_lns.window_search(self.inst, start, self.k, self.options.seed, stop_window,
                                         self.budget.deadline)
        if self.board.offer(found.value, "window-search"):
            self.polished, self.polished_by = found.assignment, "window-search"
        self.stats["window_search"] = {"windows": found.windows, "improvements": found.improvements}

    def best_assignment(self, results: list[BoundResult]) -> tuple[np.ndarray, str]:
        """The search's best, or the exact MIP's incumbent (after a local descent) when that is better."""
        assignment = self.assignment() if self.polished is None else self.polished
        method = self.polished_by
        self.stats["evaluations"] = self.decoder.evaluations
        for result in results:
            if result.incumbent is None or result.incumbent_value is None:
                continue
            try:
                check_assignment(self.inst, result.incumbent, self.k)
            except ValueError:
                continue
            # the descent may run its part past the deadline: the MIP's incumbent came at the deadline
            polish = self.budget.clock() + self.budget.part(PARTS["mip-polish"])
            mip = improve(self.inst, result.incumbent, self.k, self.options.seed, polish)
            if self.board.offer(mip.value, "exact-mip"):
                assignment, method = mip.assignment, "exact-mip"
        return assignment, method


def combinatorial_bounds(inst: Instance, k: int, budget: Budget, seed: int = 0) -> tuple[list[LowerBound], int]:
    """The ``simple`` bounds: Lemma 3.3, the single-block min-cut bound (skipping the ops that cannot beat
    Lemma 3.3) and its convex refinement (:mod:`~onnxpart.partition.cuts`; each at most its part of the
    time limit). They are floors for the MIPs. -> (the bounds, the ops whose min cut the single-block
    bound took: what ``--check-certificate`` re-derives it over, the certificate's
    ``details.search.single_block_ops``)."""
    t0 = time.perf_counter()
    simple = simple_lower_bound(inst, k)
    cut = single_block_bound(inst, simple, budget.until(budget.part(PARTS["single-block"])))
    t1 = time.perf_counter()
    stopped = "" if cut.complete else "; stopped at its part of the time limit"
    lbs = [LowerBound("simple", simple, "bound", "formula", 0.0, "Lemma 3.3"),
           LowerBound("single-block", cut.value, "bound" if cut.complete else "time_limit", "max-flow",
                      round(t1 - t0, 3), f"min over sets S containing op {cut.op} of f(S), by max flow over the "
                      f"first {cut.flows} ops by f({{v}}) above the simple bound{stopped}")]
    convex = convex_block_bound(inst, max(simple, cut.value), budget.until(budget.part(PARTS["convex-block"])), seed)
    lbs.append(LowerBound("convex-block", convex.value, "optimal" if convex.proven else "time_limit", "max-flow+highs",
                          round(time.perf_counter() - t1, 3),
                          f"min over blocks B containing op {convex.op} of f(B) ({convex.flows} max flows, "
                          f"{convex.mips} three-superblock MIPs); at least the bounds above"))
    return lbs, cut.flows
