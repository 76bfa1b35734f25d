"""Pipeline partitioning (MTPP): k stages with the smallest bottleneck, and proven lower bounds.

Public entry points: :func:`solve` (an :class:`~onnxpart.partition.model.Instance`, :class:`Options`, a
board -> :class:`Solution`; search + bounds within ``time_limit`` in all, :mod:`.search` says how) and
:func:`bounds` (the lower bounds alone). The bound methods, in :data:`REGISTRY` (``--bounds``): ``simple``
runs first, in this process (its bounds are the floor of the MIPs); the others' ``run`` gives their jobs
for the bound lane (:mod:`.bound_lane`), ``exact`` on a worker of its own until the deadline, the
``bound`` ones in time slots on the others. The paper is Archer et al., "Practical Performance Guarantees
for Pipelined DNN Inference" (ICML 2024); the exact mode for narrow graphs follows Tarnawski et al.
(NeurIPS 2020). See ``docs/partition.md``.

This module imports no solver: :data:`REGISTRY` is read when the command line starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board, Progress
from onnxpart.certificate import Bounded, LowerBound
from onnxpart.strategy import Budget, Method, Registry

if TYPE_CHECKING:
    import numpy as np

    from onnxpart.partition.model import BlockCost, Instance
    from onnxpart.partition.orders import BrkgaOptions

IDEAL_LIMIT = 5000  # the ideal DP runs when the DAG has at most this many ideals


def _default_brkga() -> BrkgaOptions:
    from onnxpart.partition.orders import BrkgaOptions

    return BrkgaOptions()


@dataclass(frozen=True)
class Options:
    k: int
    time_limit: float = 60.0  # the whole run: bounds and searches together
    seed: int = 0
    bounds: tuple[str, ...] = ("simple", "bottleneck", "exact")
    brkga: BrkgaOptions = field(default_factory=_default_brkga)
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
        unknown = set(self.bounds) - set(REGISTRY.names)
        if unknown:
            raise ValueError(f"unknown bound methods {sorted(unknown)}")


@dataclass
class Solution(Bounded):
    """A partition into k (possibly empty) blocks numbered in DAG order, with its bounds."""

    instance: Instance
    k: int
    assignment: np.ndarray  # op -> block, non-empty blocks first
    method: str  # "ideal-dp", "slicegraph", "local-search", "window-search", "exact-mip"
    lower_bounds: list[LowerBound]
    search: dict[str, Any] = field(default_factory=dict)

    @property
    def costs(self) -> list[BlockCost]:
        from onnxpart.partition.model import block_costs

        return block_costs(self.instance, self.assignment, self.k)

    @property
    def value(self) -> float:
        return max((c.cost for c in self.costs), default=0.0)


def solve(problem: Instance, options: Options, board: Board | None = None, seconds: float | None = None) -> Solution:
    """Search a partition and prove lower bounds within ``seconds`` (default ``options.time_limit``;
    the command passes what its ``--time-limit`` left after loading, while ``options`` keep the user's
    limit for the certificate) (:mod:`.search`); ``board`` (default: one reporting to
    ``options.progress``) follows the incumbent and the bounds."""
    from onnxpart.partition.search import run

    board = board or Board(options.progress)
    budget = Budget(options.time_limit if seconds is None else seconds)
    assignment, method, search = run(problem, options, board, budget,
                                     REGISTRY.select(options.bounds))
    solution = Solution(problem, options.k, assignment, method, board.bounds, search)
    board.incumbent = solution.value
    board.report("done")
    return solution


def bounds(inst: Instance, k: int, methods: tuple[str, ...] = (), time_limit: float = 60.0,
           workers: int = 0, warm: np.ndarray | None = None) -> list[LowerBound]:
    """The requested lower bounds alone (no search; ``methods`` default: all of them), each proven within
    ``time_limit``."""
    from onnxpart.parallel import Runner
    from onnxpart.partition.bound_lane import BoundLane, bound_jobs, skipped_bounds
    from onnxpart.partition.search import combinatorial_bounds

    selected = REGISTRY.select(methods or REGISTRY.names)
    options = Options(k=k, time_limit=time_limit, bounds=tuple(m.name for m in selected), workers=workers)
    budget = Budget(time_limit)
    board = Board()
    if "simple" in options.bounds:
        for bound in combinatorial_bounds(inst, k, budget)[0]:
            board.add(bound)
    for bound in skipped_bounds(inst, k, selected):
        board.add(bound)
    jobs = bound_jobs(inst, k, options, selected, budget.deadline, warm, board.lower)
    with Runner(workers) as runner:
        BoundLane(runner, jobs, board, inst, k).finish(budget.deadline)
    return board.bounds


# ------------------------------------------------------------------------------------ the bound methods
def _simple(*_: Any) -> list[dict]:
    return []  # no job: :func:`onnxpart.partition.search.combinatorial_bounds` runs it first, in this process


def _bottleneck(inst: Instance, k: int, lower: float, floor: float, warm, seed: int) -> list[dict]:
    return [dict(kind=kind, inst=inst, k=k, lower=lower, seed=seed) for kind in ("weighted", "bottleneck")]


def _guess(inst: Instance, k: int, lower: float, floor: float, warm, seed: int) -> list[dict]:
    return [dict(kind="guess", inst=inst, k=k, j=j, lower=lower, objective_floor=floor, seed=seed)
            for j in range(1, k + 1)]


def _exact(inst: Instance, k: int, lower: float, floor: float, warm, seed: int) -> list[dict]:
    from onnxpart.partition.exact import exact_skipped

    if exact_skipped(inst, k) is not None:  # the bound lane lists it as skipped, with why
        return []
    return [dict(kind="exact", inst=inst, k=k, lower=lower, objective_floor=floor, warm=warm, seed=seed)]


REGISTRY = Registry(
    Method("simple", "bound", _simple, help="Lemma 3.3, the single-block and convex-block min-cut bounds"),
    Method("bottleneck", "bound", _bottleneck,
           help="the three-superblock MIP (HiGHS) and the weighted bottleneck (CP-SAT)"),
    Method("guess", "bound", _guess, help="k MIPs, one per guessed bottleneck block (Section 3.3)"),
    Method("exact", "exact", _exact, help="the MIP of Figure 3 (HiGHS), on a worker until the time limit"),
)
