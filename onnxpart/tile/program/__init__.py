"""Matrix programs: a tiling per matrix with the least retiling cost, the problem of ``onnxpart tile
program.json``, after "Matrix Tiling as Constrained Hypergraph Labeling" (CHLP, Sections 3–6).

Public entry: :func:`solve` (a CHLP :class:`~onnxpart.tile.program.model.Instance` or a parsed
:class:`~onnxpart.tile.program.program.Program`, plus :class:`ProgramOptions`) -> :class:`ProgramSolution`.
The methods (:data:`REGISTRY`; they run in the order asked):

* ``local`` — the Section 6 baseline (one forward pass, each expression's locally best tiling);
* ``greedy`` — Algorithms 1–4 with β, η, α (:class:`~onnxpart.tile.program.heuristics.GreedyOptions`);
* ``exhaustive`` — enumeration, refused above ``exhaustive_limit`` labelings (the refusal is recorded
  in the results with the size, not raised, unless it was the only method asked for);
* ``tree`` — Theorem 1's linear-time algorithm; with ``tree="auto"`` it also runs (first) whenever it
  applies (the incidence graph is a forest, e.g. transpose-only programs);
* ``exact`` — CP-SAT over one-hot choices, warm-started from the greedy tiling, proven optimal or a
  proven bound at the time limit (the whole solve's: exact has what the others left of it).

Every method's labeling is re-costed by :meth:`Instance.cost`; the answer is the cheapest (ties: the
method run first). Lower bounds are proven values only: exhaustive and tree optima (status ``optimal``) and
the CP-SAT bound (``optimal`` or ``time_limit``); heuristics give none. Files: :mod:`onnxpart.tile.program.emit`;
the ``--check-certificate`` recomputation: :mod:`onnxpart.tile.program.check`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import Bounded, LowerBound
from onnxpart.errors import UserError
from onnxpart.strategy import Budget, Method, MethodResult, Registry, run_methods
from onnxpart.tile.program.limits import EXHAUSTIVE_LIMIT

if TYPE_CHECKING:
    from onnxpart.tile.program.heuristics import GreedyOptions
    from onnxpart.tile.program.model import Instance
    from onnxpart.tile.program.program import Program


@dataclass(frozen=True)
class ProgramOptions:
    methods: tuple[str, ...] = ("local", "greedy", "exact")
    tree: str = "auto"  # "auto": also run Theorem 1's algorithm where it applies; "off": only if listed
    beta: int = 2  # greedy bucket size β
    eta: float = 0.1  # greedy weight ratio η
    alpha: int = 10  # greedy exhaustive threshold α on |S|
    exhaustive_limit: int = EXHAUSTIVE_LIMIT  # labelings the exhaustive search may enumerate
    time_limit: float = 10.0  # total seconds, every method together
    workers: int = 0  # CP-SAT threads; 0 = one per core
    seed: int = 0

    @property
    def greedy(self) -> GreedyOptions:
        from onnxpart.tile.program.heuristics import GreedyOptions

        return GreedyOptions(self.beta, self.eta, self.alpha)


@dataclass(kw_only=True)
class ProgramResult(MethodResult):
    """One method's labeling (label index per vertex; None when it gave no tiling) and its proven bound."""

    labels: tuple[int, ...] | None = None
    proven: LowerBound | None = None


@dataclass
class ProgramSolution(Bounded):
    instance: Instance
    labels: dict[str, str]  # matrix -> tiling
    choices: dict[str, str]  # expression -> "algorithm[label, ...]" (its best feasible labeling)
    cost: int
    method: str
    results: list[ProgramResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    @property
    def value(self) -> float:
        return self.cost


@dataclass
class _Run:
    """What the methods share in one solve: the instance, the solve's clock, the labelings found so far."""

    instance: Instance
    budget: Budget
    answers: dict[str, Any] = field(default_factory=dict)

    def result(self, method: str, start: float, labels, status: str, proven: LowerBound | None = None,
               note: str = "", board: Board | None = None) -> ProgramResult:
        """``method``'s result, started at ``start``: its labeling re-costed, its bound on the board."""
        self.answers[method] = labels
        if proven is not None and board is not None:
            board.add(proven)
        value = None if labels is None else self.instance.cost(labels)
        return ProgramResult(method=method, status=status, value=value, bound=None if proven is None else proven.value,
                             seconds=time.monotonic() - start, note=note,
                             labels=None if labels is None else tuple(int(a) for a in labels), proven=proven)


def _local(run: _Run, options: ProgramOptions, board: Board, seconds: float) -> ProgramResult:
    from onnxpart.tile.program.heuristics import local

    start = time.monotonic()
    return run.result("local", start, local(run.instance), "heuristic")


def _greedy(run: _Run, options: ProgramOptions, board: Board, seconds: float) -> ProgramResult:
    from onnxpart.tile.program.heuristics import greedy

    start = time.monotonic()
    return run.result("greedy", start, greedy(run.instance, options.greedy), "heuristic")


def _tree(run: _Run, options: ProgramOptions, board: Board, seconds: float) -> ProgramResult:
    from onnxpart.tile.program import tree

    start = time.monotonic()
    if not tree.applies(run.instance):
        return run.result("tree", start, None, "not_applicable",
                          note="the incidence graph has a cycle (Theorem 1 needs a tree)")
    x, cost = tree.solve_tree(run.instance)
    bound = LowerBound("tree-dp", float(cost), "optimal", "dp", time.monotonic() - start,
                       note="Theorem 1: min-sum DP on the incidence forest")
    return run.result("tree", start, x, "optimal", bound, board=board)


def _exhaustive(run: _Run, options: ProgramOptions, board: Board, seconds: float) -> ProgramResult:
    from onnxpart.tile.program.exact import exhaustive
    from onnxpart.tile.program.space import SpaceTooLarge

    start = time.monotonic()
    try:
        x, cost = exhaustive(run.instance, options.exhaustive_limit)
    except SpaceTooLarge as exc:
        return run.result("exhaustive", start, None, "refused", note=str(exc))
    bound = LowerBound("exhaustive", float(cost), "optimal", "enumeration", time.monotonic() - start)
    return run.result("exhaustive", start, x, "optimal", bound, board=board)


def _exact(run: _Run, options: ProgramOptions, board: Board, seconds: float) -> ProgramResult:
    """CP-SAT from greedy's tiling (a greedy run of its own when greedy did not run), in ``seconds``: what the
    others left of the solve."""
    from onnxpart.tile.program.exact import solve_cpsat_tiling
    from onnxpart.tile.program.heuristics import greedy

    start = time.monotonic()
    hint = run.answers.get("greedy")
    if hint is None:
        hint = greedy(run.instance, options.greedy)
    found = solve_cpsat_tiling(run.instance, max(seconds, run.budget.left()), hint, options.workers, options.seed)
    if found.labels is None:
        return run.result("exact", start, None, "no_solution", found.bound, f"CP-SAT found no tiling ({found.status})",
                          board)
    return run.result("exact", start, found.labels, found.status, found.bound, board=board)


#: The methods (``--method`` picks among them; they run in the order asked, by default
#: :attr:`ProgramOptions.methods`).
REGISTRY = Registry(
    Method("local", "heuristic", _local, 0, "each expression's locally best tiling, in program order"),
    Method("greedy", "heuristic", _greedy, 0, "Algorithms 1–4: buckets of expressions in greedy order"),
    Method("exhaustive", "exact", _exhaustive, 0, "every labeling of the shared matrices, up to a limit"),
    Method("tree", "exact", _tree, 0, "Theorem 1: the optimum when the incidence graph is a forest"),
    Method("exact", "exact", _exact, 1, "CP-SAT: the optimum or a proven bound"),
)


def solve(problem: Instance | Program, options: ProgramOptions = ProgramOptions(),
          board: Board | None = None, seconds: float | None = None) -> ProgramSolution:
    """Run every requested method on the instance (built from the program if one is given) within ``seconds``
    (default ``options.time_limit``); ``board`` (:mod:`onnxpart.board`) hears every method's tiling
    (``offer``) and every proven bound (``add``)."""
    from onnxpart.tile.program import tree
    from onnxpart.tile.program.model import build_instance
    from onnxpart.tile.program.program import Program

    instance = build_instance(problem) if isinstance(problem, Program) else problem
    board = board if board is not None else Board()
    names = list(REGISTRY.parse(",".join(options.methods) or ","))
    if options.tree not in ("auto", "off"):
        raise UserError(f"tree must be 'auto' or 'off', got {options.tree!r}")
    options.greedy.check()
    if options.tree == "auto" and "tree" not in names and tree.applies(instance):
        names.insert(0, "tree")
    run = _Run(instance, Budget(options.time_limit if seconds is None else seconds))
    results = run_methods([REGISTRY[name] for name in names], run, options, board, run.budget)
    bounds = [r.proven for r in results if r.proven is not None]
    solved = [r for r in results if r.labels is not None]
    if not solved:
        raise UserError("; ".join(f"{r.method}: {r.note}" for r in results) or "no method gave a tiling")
    best = min(solved, key=lambda r: r.value)
    return ProgramSolution(instance, instance.label_names(best.labels), _choices(instance, best.labels),
                           int(best.value), best.method, results, bounds)


def _choices(instance: Instance, labels: tuple[int, ...]) -> dict[str, str]:
    out = {}
    for e, t in zip(instance.edges, instance.choices(labels)):
        out[e.name] = f"{e.algorithms[t]}[{', '.join(instance.labels[a] for a in e.tuples[t])}]"
    return out
