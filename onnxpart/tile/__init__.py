"""Tiling (``onnxpart tile``): a tiling per matrix with the least retiling cost, after "Matrix Tiling as
Constrained Hypergraph Labeling" (CHLP, Sections 3–6).

Public entry: :func:`solve` (a CHLP :class:`~onnxpart.tile.model.Instance` or a parsed
:class:`~onnxpart.tile.program.Program`, plus :class:`TileOptions`) -> :class:`Solution`. Methods:

* ``local`` — the Section 6 baseline (one forward pass, each expression's locally best tiling);
* ``greedy`` — Algorithms 1–4 with β, η, α (:class:`~onnxpart.tile.heuristics.GreedyOptions`);
* ``exhaustive`` — enumeration, refused above ``exhaustive_limit`` labelings (the refusal is recorded
  in the results with the size, not raised, unless it was the only method asked for);
* ``tree`` — Theorem 1's linear-time algorithm; with ``tree="auto"`` it also runs whenever it applies
  (the incidence graph is a forest, e.g. transpose-only programs);
* ``exact`` — CP-SAT over one-hot choices, warm-started from the greedy tiling, proven optimal or a
  proven bound at the time limit.

ONNX models take the same route with per-pair collective costs: :mod:`onnxpart.tile.onnx_model`
(the layout instance), :mod:`onnxpart.tile.onnx_search` (local, greedy, CP-SAT) and
:mod:`onnxpart.tile.emit` (plan.json, certificate, annotated.onnx).

Every method's labeling is re-costed by :meth:`Instance.cost`; the answer is the cheapest (ties: the
method listed first). Lower bounds are proven values only: exhaustive and tree optima (status
``optimal``) and the CP-SAT bound (``optimal`` or ``time_limit``); heuristics give none.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from onnxpart.certificate import LowerBound, best_bound
from onnxpart.errors import UserError
from onnxpart.tile import tree as tree_mod
from onnxpart.tile.exact import EXHAUSTIVE_LIMIT, exhaustive, solve_cpsat_tiling
from onnxpart.tile.heuristics import GreedyOptions, greedy, local
from onnxpart.tile.model import Instance, build_instance
from onnxpart.tile.program import Program
from onnxpart.tile.space import SpaceTooLarge

log = logging.getLogger(__name__)

METHODS = ("local", "greedy", "exhaustive", "tree", "exact")


@dataclass(frozen=True)
class TileOptions:
    methods: tuple[str, ...] = ("local", "greedy", "exact")
    tree: str = "auto"  # "auto": also run Theorem 1's algorithm where it applies; "off": only if listed
    beta: int = 2  # greedy bucket size β
    eta: float = 0.1  # greedy weight ratio η
    alpha: int = 10  # greedy exhaustive threshold α on |S|
    exhaustive_limit: int = EXHAUSTIVE_LIMIT  # labelings the exhaustive search may enumerate
    time_limit: float = 10.0  # seconds for the exact method
    workers: int = 2
    seed: int = 0

    @property
    def greedy(self) -> GreedyOptions:
        return GreedyOptions(self.beta, self.eta, self.alpha)


@dataclass
class MethodResult:
    method: str
    labels: tuple[int, ...] | None  # label index per vertex; None when the method gave no tiling
    cost: int | None
    seconds: float
    status: str  # heuristic | optimal | time_limit | refused | not_applicable | no_solution
    note: str = ""


@dataclass
class Solution:
    instance: Instance
    labels: dict[str, str]  # matrix -> tiling
    choices: dict[str, str]  # expression -> "algorithm[label, ...]" (its best feasible labeling)
    cost: int
    method: str
    results: list[MethodResult] = field(default_factory=list)
    lower_bounds: list[LowerBound] = field(default_factory=list)

    @property
    def best_lower_bound(self) -> float | None:
        return best_bound(self.lower_bounds)

    @property
    def proven_optimal(self) -> bool:
        lb = self.best_lower_bound
        return lb is not None and lb >= self.cost - 1e-9


def solve(problem: Instance | Program, options: TileOptions = TileOptions()) -> Solution:
    """Run every requested method on the instance (built from the program if one is given)."""
    instance = build_instance(problem) if isinstance(problem, Program) else problem
    for method in options.methods:
        if method not in METHODS:
            raise UserError(f"unknown tile method {method!r}: use {', '.join(METHODS)}")
    if options.tree not in ("auto", "off"):
        raise UserError(f"tree must be 'auto' or 'off', got {options.tree!r}")
    options.greedy.check()
    methods = list(dict.fromkeys(options.methods))
    if options.tree == "auto" and "tree" not in methods and tree_mod.applies(instance):
        methods.insert(0, "tree")
    results: list[MethodResult] = []
    bounds: list[LowerBound] = []
    greedy_labels: np.ndarray | None = None
    for method in methods:
        result, bound = _run(method, instance, options, greedy_labels)
        if method == "greedy" and result.labels is not None:
            greedy_labels = np.asarray(result.labels)
        results.append(result)
        if bound is not None:
            bounds.append(bound)
    solved = [r for r in results if r.labels is not None]
    if not solved:
        raise UserError("; ".join(f"{r.method}: {r.note}" for r in results) or "no method gave a tiling")
    best = min(solved, key=lambda r: r.cost)
    return Solution(instance, instance.label_names(best.labels), _choices(instance, best.labels),
                    int(best.cost), best.method, results, bounds)


def _run(method: str, instance: Instance, options: TileOptions,
         greedy_labels: np.ndarray | None) -> tuple[MethodResult, LowerBound | None]:
    start = time.perf_counter()
    if method in ("local", "greedy"):
        x = local(instance) if method == "local" else greedy(instance, options.greedy)
        return _result(method, instance, x, start, "heuristic"), None
    if method == "tree":
        if not tree_mod.applies(instance):
            return MethodResult("tree", None, None, time.perf_counter() - start, "not_applicable",
                                "the incidence graph has a cycle (Theorem 1 needs a tree)"), None
        x, _ = tree_mod.solve_tree(instance)
        result = _result(method, instance, x, start, "optimal")
        return result, LowerBound("tree-dp", float(result.cost), "optimal", "dp", result.seconds,
                                  note="Theorem 1: min-sum DP on the incidence forest")
    if method == "exhaustive":
        try:
            x, _ = exhaustive(instance, options.exhaustive_limit)
        except SpaceTooLarge as exc:
            return MethodResult(method, None, None, time.perf_counter() - start, "refused", str(exc)), None
        result = _result(method, instance, x, start, "optimal")
        return result, LowerBound("exhaustive", float(result.cost), "optimal", "enumeration", result.seconds)
    hint = greedy_labels if greedy_labels is not None else greedy(instance, options.greedy)
    exact = solve_cpsat_tiling(instance, options.time_limit, hint, options.workers, options.seed)
    if exact.labels is None:
        return MethodResult(method, None, None, time.perf_counter() - start, "no_solution",
                            f"CP-SAT found no tiling ({exact.status})"), exact.bound
    return _result(method, instance, exact.labels, start, exact.status), exact.bound


def _result(method: str, instance: Instance, x: np.ndarray, start: float, status: str) -> MethodResult:
    labels = tuple(int(a) for a in x)
    return MethodResult(method, labels, instance.cost(labels), time.perf_counter() - start, status)


def _choices(instance: Instance, labels: tuple[int, ...]) -> dict[str, str]:
    out = {}
    for e, t in zip(instance.edges, instance.choices(labels)):
        out[e.name] = f"{e.algorithms[t]}[{', '.join(instance.labels[a] for a in e.tuples[t])}]"
    return out
