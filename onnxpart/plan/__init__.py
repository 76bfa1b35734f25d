"""``onnxpart plan``: one certified plan for a model on a cluster — pipeline stages × a device mesh per stage ×
memory that fits. It composes the strategies: partition's stage model and search (the ``pipeline`` baseline),
tile's layout instance, solve, bounds and greedy on each stage's sub-mesh, and tile's memory model; what is new
here is the cluster (:mod:`.cluster`), the plan family and its units (:mod:`.model`, :mod:`.units`), the
dynamic program over it (:mod:`.dp`, :mod:`.exact`) and its bound, and the transfers between stages
(:mod:`.transfers`).

Public entry: :func:`solve` (a :class:`~onnxpart.plan.model.Problem`, :class:`Options`) -> :class:`Solution`.
The methods (:data:`REGISTRY`), each one row of the comparison:

* ``dp`` — Alpa's inter-operator dynamic program over (units, devices) × sub-meshes with tile as the
  intra-operator pass; its bound is the program run on tile's proven unit bounds (:func:`.exact.family_bound`),
  with the runs it picks bounded whole by tile (:mod:`.refine`);
* ``pipeline``, ``tensor-parallel``, ``megatron``, ``data-parallel`` — the baselines (:mod:`.heuristics`).

The answer is the fastest plan that fits; the certificate's bound covers the plan family (a baseline outside
it, partition's stages, is compared against the same bound: no plan of the family beats the answer by more
than the gap). This module imports no solver.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import Bounded, LowerBound
from onnxpart.errors import InfeasibleError
from onnxpart.strategy import Budget, Method, MethodResult, Registry, run_methods

if TYPE_CHECKING:
    from onnxpart.plan.model import Priced, Problem, Shape
    from onnxpart.plan.unit_costs import UnitTable


@dataclass(frozen=True)
class Options:
    methods: tuple[str, ...] = ("dp", "pipeline", "tensor-parallel", "megatron", "data-parallel")
    time_limit: float = 60.0
    seed: int = 0
    workers: int = 0

    def __post_init__(self) -> None:
        REGISTRY.parse(",".join(self.methods) or ",")


@dataclass(kw_only=True)
class PlanResult(MethodResult):
    """One method's plan priced (``priced``; None when it has none), and why not in ``note``."""

    priced: Priced | None = None
    shape: str = ""


@dataclass
class Solution(Bounded):
    problem: Problem
    priced: Priced
    method: str
    results: list[PlanResult]
    lower_bounds: list[LowerBound]
    one_device: Priced
    table: UnitTable | None = None

    @property
    def value(self) -> float:
        return self.priced.value


@dataclass
class _Run:
    """What the methods share: the problem, the clock, the seed and the unit table (built once, by ``dp``)."""

    problem: Problem
    budget: Budget
    seed: int
    workers: int
    table: UnitTable | None = None
    bound: LowerBound | None = None

    def result(self, method: str, start: float, priced, status: str = "heuristic", note: str = "") -> PlanResult:
        if priced is not None and not priced.fits:
            note = note or f"does not fit: a device needs {priced.missing:.6g} bytes more than it has"
            return PlanResult(method=method, status="no_solution", seconds=time.monotonic() - start, note=note,
                              priced=priced, shape=priced.shape.describe())
        return PlanResult(method=method, status=status if priced is not None else "no_solution",
                          value=None if priced is None else priced.value, seconds=time.monotonic() - start,
                          note=note, priced=priced, shape="" if priced is None else priced.shape.describe(),
                          bound=self.bound.value if method == "dp" and self.bound is not None else None)


#: The parts of ``dp``'s time: tile on the unit table (and, on small families, every run), where the chain over
#: the units' cuts (:mod:`.interfaces`) and then the bound's refinement (:mod:`.refine`) must end; the rest prices
#: the shapes the search picks.
TABLE_PART, INTERFACES_BY, REFINED_BY = 0.3, 0.65, 0.8


def _dp(run: _Run, options: Options, board: Board, seconds: float) -> PlanResult:
    """The dynamic program (:mod:`.exact`), its bound refined (:mod:`.refine`), its shape priced, shapes over
    memory barred and searched again (:func:`_search`)."""
    from onnxpart.plan.interfaces import interface_bounds
    from onnxpart.plan.refine import refine
    from onnxpart.plan.unit_costs import exact_runs, unit_table

    start = time.monotonic()
    problem = run.problem
    run.table = unit_table(problem, run.budget, seconds * TABLE_PART / 2, run.seed, run.workers)
    exact_runs(problem, run.table, seconds * TABLE_PART / 2, run.seed)
    interfaces = interface_bounds(problem, run.budget.until(seconds * INTERFACES_BY - (time.monotonic() - start)),
                                  _meshes_first(problem, run.table))
    if interfaces is not None:
        run.table.chain, run.table.chained = interfaces.bound, interfaces.layouts
    run.bound = refine(problem, run.table, run.budget.until(seconds * REFINED_BY - (time.monotonic() - start)),
                       run.seed)
    board.add(run.bound)
    _record_chained(problem, run.table, {} if interfaces is None else interfaces.stages)
    best = _search(run, run.budget.until(max(0.0, seconds - (time.monotonic() - start))))
    status = "optimal" if best is not None and best.fits and run.bound.value is not None and \
        best.value <= run.bound.value * (1 + 1e-12) else "heuristic"
    return run.result("dp", start, best, status)


def _meshes_first(problem: Problem, table: UnitTable) -> list[int]:
    """The sub-meshes of the shape that attains the family's bound on the unit table, then those of the shape its
    estimates rank first: where the chain's bounds and plans (:mod:`.interfaces`) matter most."""
    from onnxpart.plan import exact

    _, runs = exact.family_bound(problem, table)
    ranked = exact.search(problem, table, math.inf)
    shape = ranked[0][1] if ranked else None
    return [m for _, _, m in runs] + ([problem.meshes.index(mesh) for _, mesh in shape.stages] if shape else [])


#: At most this many shapes are priced in full by ``dp``'s search.
ROUNDS = 16


def _search(run: _Run, deadline: float) -> Priced | None:
    """Price the shape the estimates rank first, write what its stages really cost into the estimates (tile's
    plans of the whole stages, :class:`~onnxpart.plan.refine.StagePrice` with no bound), bar its runs over
    memory, and search again — until the first-ranked shape is one already priced (the estimates agree with
    the prices there), :data:`ROUNDS` shapes, or ``deadline``. -> the fastest that fits (else the first)."""
    from onnxpart.plan import exact
    from onnxpart.plan.evaluate import evaluate

    problem, table = run.problem, run.table
    best, tried, barred = None, set(), set()
    while len(tried) < ROUNDS and time.monotonic() < deadline:
        fresh = [shape for _, shape in exact.search(problem, table, deadline, barred) if shape not in tried]
        if not fresh:
            break
        tried.add(fresh[0])
        priced = evaluate(problem, fresh[0], table, max(0.05, deadline - time.monotonic()) / 2, run.seed)
        _record(problem, table, priced)
        barred |= {(i, j, problem.meshes.index(mesh)) for (i, j), (_, mesh), memory in
                   zip(priced.shape.units, priced.shape.stages, priced.memory)
                   if memory["total"] > problem.cluster.memory}
        if best is None or (priced.fits, -priced.value) > (best.fits, -best.value):
            best = priced
    return best


def _record(problem: Problem, table: UnitTable, priced: Priced) -> None:
    """Each stage of ``priced`` into ``table.stages`` where it beats the plan known for its run, with its memory
    but the inputs in flight (the estimates add those for each shape; the proven bound kept)."""
    from onnxpart.plan.refine import StagePrice

    for (i, j), (_, mesh), stage, held in zip(priced.shape.units, priced.shape.stages, priced.stages, priced.memory):
        key = (i, j, problem.meshes.index(mesh))
        known = table.stages.get(key)
        if known is None or known.layouts is None or stage.compute < known.cost:
            table.stages[key] = StagePrice(known.lower if known else 0.0, dict(stage.layouts), stage.compute, True,
                                           held["total"] - held["in_flight"])


def _record_chained(problem: Problem, table: UnitTable, prices: dict) -> None:
    """The whole model as one stage on each mesh with chained unit plans (``prices``: mesh index ->
    :class:`~onnxpart.plan.refine.StagePrice`, :meth:`.interfaces.WholeModel.price`) into ``table.stages`` where
    it beats the plan known for that run — one that fits a device first, then the cheaper —, with its memory:
    the search's estimates then know what a stage that tile alone cannot solve costs and holds with them (the
    proven bound kept)."""
    from onnxpart.plan.interfaces import WholeModel

    count, limit = problem.units.count, problem.cluster.memory * (1 + 1e-12)
    for m, price in prices.items():
        known = table.stages.get((0, count, m))
        if known is not None and known.layouts is not None:
            held = known.memory if known.memory is not None else WholeModel(problem, m).held(known.layouts)
            if (price.memory > limit, price.cost) >= (held > limit, known.cost):
                continue
        table.stages[(0, count, m)] = dataclasses.replace(price, lower=known.lower if known else 0.0)


def _baseline(name: str, make):
    def method(run: _Run, options: Options, board: Board, seconds: float) -> PlanResult:
        from onnxpart.plan.evaluate import evaluate

        start = time.monotonic()
        shape = make(run, seconds / 2)
        why = _outside(run.problem, shape)
        if why:
            return PlanResult(method=name, status="skipped", seconds=time.monotonic() - start, note=why)
        # tile's solve, the units' own plans merged and the stage prices recorded for the shape's runs (dp's among
        # them); the chained unit plans are no merge start here
        table = None if run.table is None else dataclasses.replace(run.table, chained={})
        priced = evaluate(run.problem, shape, table, max(0.05, seconds - (time.monotonic() - start)), run.seed)
        return run.result(name, start, priced)

    return method


def _outside(problem: Problem, shape: Shape) -> str:
    """Why a baseline's shape is not run: more devices than the cluster, or meshes ``--mesh-sizes`` leaves out."""
    if shape.devices > problem.cluster.devices:
        return (f"skipped: {shape.describe()} needs {shape.devices} devices, the cluster has "
                f"{problem.cluster.devices}")
    if problem.mesh_sizes is not None and any(mesh not in problem.meshes for _, mesh in shape.stages):
        return f"skipped: {shape.describe()} uses sub-meshes outside --mesh-sizes"
    return ""


def _pipeline(run: _Run, seconds: float):
    from onnxpart.plan.heuristics import pipeline_shape

    return pipeline_shape(run.problem, seconds, run.seed)


def _shape(name: str):
    def make(run: _Run, seconds: float):
        from onnxpart.plan import heuristics

        return getattr(heuristics, f"{name}_shape")(run.problem)

    return make


REGISTRY = Registry(
    Method("dp", "exact", _dp, 4, "Alpa's dynamic program over stages × sub-meshes, tile inside each stage"),
    Method("pipeline", "heuristic", _baseline("pipeline", _pipeline), 1,
           "pure pipeline: partition, one device per stage"),
    Method("tensor-parallel", "heuristic", _baseline("tensor-parallel", _shape("tensor_parallel")), 1,
           "pure tensor parallel: tile on the whole cluster as a nodes × devices mesh"),
    Method("megatron", "heuristic", _baseline("megatron", _shape("megatron")), 1,
           "tensor parallel inside each node, equal pipeline stages across nodes"),
    Method("data-parallel", "heuristic", _baseline("data-parallel", _shape("data_parallel")), 0.5,
           "the whole model on each device, one replica per device the batch allows"),
)


def solve(problem: Problem, options: Options = Options(), board: Board | None = None,
          seconds: float | None = None) -> Solution:
    """Run the methods asked within ``seconds`` (default ``options.time_limit``); the answer is the fastest plan
    that fits. InfeasibleError (exit 4) when none fits, naming the bytes missing and the least cluster that
    could hold the model (:func:`_infeasible`)."""
    from onnxpart.plan.evaluate import evaluate
    from onnxpart.plan.heuristics import one_device_shape

    board = board if board is not None else Board()
    run = _Run(problem, Budget(options.time_limit if seconds is None else seconds), options.seed, options.workers)
    one = evaluate(problem, one_device_shape(problem))  # one plan on one device: first, inside the budget
    results = run_methods(REGISTRY.select(options.methods), run, options, board, run.budget)
    fitting = [r for r in results if r.value is not None]
    bounds = [run.bound] if run.bound is not None else []
    if not fitting:
        raise InfeasibleError(_infeasible(problem, results))
    best = min(fitting, key=lambda r: (r.value, REGISTRY.names.index(r.method)))
    return Solution(problem, best.priced, best.method, results, [_covering(b, best.value) for b in bounds], one,
                    run.table)


def _covering(bound: LowerBound, answer: float) -> LowerBound:
    """The family's bound as the certificate states it: when a baseline outside the family (partition's stages)
    beats it, the bound over the family and that answer together is the answer itself."""
    if bound.value is None or bound.value <= answer:
        return bound
    return LowerBound(bound.method, answer, bound.status, bound.solver, bound.seconds,
                      note=bound.note + f"; {bound.value:.9g} over the family, above the answer found outside it: "
                      "the bound over the family and that answer is the answer")


def _infeasible(problem: Problem, results: list[PlanResult]) -> str:
    """No plan fits: the fewest bytes a device lacked among the plans tried, and the fewest nodes whose devices
    could hold every weight once (every weight is resident on some device: a proven necessary count)."""
    cluster = problem.cluster
    tried = [r.priced.missing for r in results if r.priced is not None]
    total = sum(p.bytes for p in problem.graph.params.values())
    nodes = max(1, math.ceil(total / (cluster.devices_per_node * cluster.memory)))
    from onnxpart.units import format_bytes

    missing = f"{format_bytes(min(tried))} per device short" if tried else "no plan found"
    return (f"no plan fits {cluster.nodes}x{cluster.devices_per_node} {cluster.spec.name} "
            f"({format_bytes(cluster.memory)} per device): {missing}; the model's weights need at least "
            f"{nodes} node(s) of {cluster.devices_per_node} such devices")


def describe_options(options: Options) -> dict[str, Any]:
    return {"methods": list(options.methods), "time_limit": options.time_limit, "seed": options.seed}
