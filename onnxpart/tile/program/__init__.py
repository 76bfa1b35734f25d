"""Matrix programs: a tiling per matrix with the least retiling cost, the problem of ``onnxpart tile
program.json``, after "Matrix Tiling as Constrained Hypergraph Labeling" (CHLP, Sections 3–6).

Public entry: :func:`solve` (a CHLP :class:`~onnxpart.tile.program.model.Instance` or a parsed
:class:`~onnxpart.tile.program.program.Program`, plus :class:`ProgramOptions`) -> :class:`ProgramSolution`.
The methods (:data:`METHODS`; they run in the order asked):

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

from onnxpart.board import Board
from onnxpart.certificate import LowerBound, above, best_bound
from onnxpart.errors import UserError
from onnxpart.tile.methods import Budget, Method, Outcome, Run, asked, registry, run_methods
from onnxpart.tile.program import tree as tree_mod
from onnxpart.tile.program.exact import EXHAUSTIVE_LIMIT, exhaustive, solve_cpsat_tiling
from onnxpart.tile.program.heuristics import GreedyOptions, greedy, local
from onnxpart.tile.program.model import Instance, build_instance
from onnxpart.tile.program.program import Program
from onnxpart.tile.program.space import SpaceTooLarge


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
        return GreedyOptions(self.beta, self.eta, self.alpha)


@dataclass
class ProgramResult:
    method: str
    labels: tuple[int, ...] | None  # label index per vertex; None when the method gave no tiling
    cost: int | None
    seconds: float
    status: str  # heuristic | optimal | time_limit | refused | not_applicable | no_solution
    note: str = ""


@dataclass
class ProgramSolution:
    instance: Instance
    labels: dict[str, str]  # matrix -> tiling
    choices: dict[str, str]  # expression -> "algorithm[label, ...]" (its best feasible labeling)
    cost: int
    method: str
    results: list[ProgramResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    @property
    def best_lower_bound(self) -> float | None:
        return best_bound(self.lower_bounds)

    @property
    def proven_optimal(self) -> bool:
        lb = self.best_lower_bound
        return lb is not None and not above(self.cost, lb)


def _local(instance: Instance, run: Run) -> Outcome:
    return Outcome(local(instance), "heuristic")


def _greedy(instance: Instance, run: Run) -> Outcome:
    return Outcome(greedy(instance, run.options.greedy), "heuristic")


def _tree(instance: Instance, run: Run) -> Outcome:
    if not tree_mod.applies(instance):
        return Outcome(None, "not_applicable", note="the incidence graph has a cycle (Theorem 1 needs a tree)")
    start = time.perf_counter()
    x, cost = tree_mod.solve_tree(instance)
    return Outcome(x, "optimal", LowerBound("tree-dp", float(cost), "optimal", "dp", time.perf_counter() - start,
                                            note="Theorem 1: min-sum DP on the incidence forest"))


def _exhaustive(instance: Instance, run: Run) -> Outcome:
    start = time.perf_counter()
    try:
        x, cost = exhaustive(instance, run.options.exhaustive_limit)
    except SpaceTooLarge as exc:
        return Outcome(None, "refused", note=str(exc))
    return Outcome(x, "optimal", LowerBound("exhaustive", float(cost), "optimal", "enumeration",
                                            time.perf_counter() - start))


def _exact(instance: Instance, run: Run) -> Outcome:
    """CP-SAT from greedy's tiling (a greedy run of its own when greedy did not run)."""
    hint = run.answers.get("greedy")
    if hint is None:
        hint = greedy(instance, run.options.greedy)
    found = solve_cpsat_tiling(instance, run.budget.left(), hint, run.options.workers, run.options.seed)
    if found.labels is None:
        return Outcome(None, "no_solution", found.bound, f"CP-SAT found no tiling ({found.status})")
    return Outcome(found.labels, found.status, found.bound)


#: The methods (``--method`` picks among them; they run in the order asked, by default
#: :attr:`ProgramOptions.methods`).
METHODS = registry(
    Method("local", "heuristic", _local, 0, "each expression's locally best tiling, in program order"),
    Method("greedy", "heuristic", _greedy, 0, "Algorithms 1–4: buckets of expressions in greedy order"),
    Method("exhaustive", "exact", _exhaustive, 0, "every labeling of the shared matrices, up to a limit"),
    Method("tree", "exact", _tree, 0, "Theorem 1: the optimum when the incidence graph is a forest"),
    Method("exact", "exact", _exact, 1, "CP-SAT: the optimum or a proven bound"),
)


def solve(problem: Instance | Program, options: ProgramOptions = ProgramOptions(),
          board: Board | None = None) -> ProgramSolution:
    """Run every requested method on the instance (built from the program if one is given); ``board``
    (:mod:`onnxpart.board`) hears every method's tiling (``offer``) and every proven bound (``add``)."""
    instance = build_instance(problem) if isinstance(problem, Program) else problem
    board = board if board is not None else Board()
    names = list(asked(options.methods, METHODS, "a matrix program"))
    if options.tree not in ("auto", "off"):
        raise UserError(f"tree must be 'auto' or 'off', got {options.tree!r}")
    options.greedy.check()
    if options.tree == "auto" and "tree" not in names and tree_mod.applies(instance):
        names.insert(0, "tree")
    run = Run(options, Budget(options.time_limit, {name: METHODS[name].weight for name in names}))
    ran = run_methods(METHODS, names, instance, run, board, instance.cost)
    results = [ProgramResult(d.method, None if d.value is None else tuple(int(a) for a in d.outcome.answer), d.value,
                             d.seconds, d.outcome.status, d.outcome.note) for d in ran]
    bounds = [d.outcome.bound for d in ran if d.outcome.bound is not None]
    solved = [r for r in results if r.labels is not None]
    if not solved:
        raise UserError("; ".join(f"{r.method}: {r.note}" for r in results) or "no method gave a tiling")
    best = min(solved, key=lambda r: r.cost)
    return ProgramSolution(instance, instance.label_names(best.labels), _choices(instance, best.labels),
                           int(best.cost), best.method, results, bounds)


def _choices(instance: Instance, labels: tuple[int, ...]) -> dict[str, str]:
    out = {}
    for e, t in zip(instance.edges, instance.choices(labels)):
        out[e.name] = f"{e.algorithms[t]}[{', '.join(instance.labels[a] for a in e.tuples[t])}]"
    return out
