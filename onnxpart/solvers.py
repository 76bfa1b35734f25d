"""Thin wrappers over HiGHS (highspy) and CP-SAT (ortools): every call takes a time limit and returns
the best incumbent *and* the solver's proven bound, with a status that says whether it was proven
optimal or stopped by the limit.

highspy and ortools each ship a ``libhighs.so.1``; the pinned pair in pyproject.toml (ortools 9.15,
highspy < 1.15) loads side by side in one process (see tests/test_solvers.py).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import highspy
import numpy as np

from onnxpart import interrupts

if TYPE_CHECKING:  # imported by solve_cpsat: its caller built a model, so ortools is loaded by then, and a
    from ortools.sat.python import cp_model  # command that runs no CP-SAT does not pay its 0.3-1.5 s import

log = logging.getLogger(__name__)


@dataclass
class SolveResult:
    """Outcome of one solver call (minimization).

    ``objective`` is the incumbent's value (None if none was found); ``bound`` is the proven lower
    bound on the optimum (``-inf`` if nothing was proven); ``status`` is one of ``optimal``,
    ``time_limit``, ``infeasible``, ``interrupted`` or ``error``.
    """

    status: str
    objective: float | None
    bound: float
    seconds: float
    values: list[float] = field(default_factory=list)
    solver: str = ""

    @property
    def has_solution(self) -> bool:
        return self.objective is not None


def to_integers(values: Sequence[float] | np.ndarray, total_units: float | None = None, rounding: str = "down", *,
                total: float | None = None, unit: float | None = None,
                margin: float = 0.0) -> tuple[np.ndarray, float]:
    """Real solver data (costs, durations, capacities) as integers for CP-SAT, max flow or a MIP.

    Returns ``(ints, scale)`` with ``ints ≈ values · scale`` (int64). The grid is given one of two ways:
    ``total_units`` integers for ``total`` (default ``Σ values``; ``scale = total_units / total``, 1 when
    ``total ≤ 0``, and ``ints = values · scale``), or one integer per ``unit`` (``ints = values / unit``,
    ``scale = 1 / unit``). The two differ only in the last bit of the float quotient; each caller keeps
    the one its published numbers were computed with.

    Rounding direction. A solver's proven bound on the integer model is a bound on the real problem only
    if every real solution stays feasible with an integer objective ≤ ``scale`` × its real objective:

    * ``"down"`` (floor) for objective coefficients and for the costs a cut or a flow adds up: with
      non-negative variables ⌊a·s⌋ ≤ a·s term by term, so the integer optimum is ≤ s × the real optimum
      and ``proven integer bound / scale`` is a valid lower bound, also when the solver stops early.
    * ``"up"`` (ceil) where the integer must not be smaller than the real number for that guarantee:
      the limit of a ``≤`` constraint (a capacity, a budget) in a relaxation whose usages are rounded
      down, or an integer incumbent that is to be reported as an upper bound on the real cost.

    ``margin`` is relative slack against the float rounding of the product, which can land just above
    (below) an integer the exact value is below (above): ``⌊x·(1 − margin)⌋`` / ``⌈x·(1 + margin)⌉``.
    """
    array = np.asarray(values, dtype=float)
    if unit is not None:
        scaled, scale = array / unit, 1.0 / unit
    else:
        total = float(array.sum()) if total is None else total
        scale = total_units / total if total > 0 else 1.0
        scaled = array * scale
    if rounding == "down":
        ints = np.floor(scaled * (1.0 - margin) if margin else scaled)
    elif rounding == "up":
        ints = np.ceil(scaled * (1.0 + margin) if margin else scaled)
    else:
        raise ValueError(f"rounding must be 'down' or 'up', not {rounding!r}")
    return ints.astype(np.int64), scale


class SparseModel:
    """A MIP or LP built column by column and row by row (minimization), handed to HiGHS in one
    ``passModel`` — much faster than adding rows one by one through highspy for large models."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    @property
    def num_cols(self) -> int:
        return len(self.cost)

    def var(self, lower: float = 0.0, upper: float = math.inf, cost: float = 0.0, integer: bool = False) -> int:
        """Add a column; returns its index."""
        self.lower.append(float(lower))
        self.upper.append(float(upper))
        self.cost.append(float(cost))
        self.integer.append(bool(integer))
        return len(self.cost) - 1

    def vars(self, count: int, lower: float = 0.0, upper: float | np.ndarray = math.inf,
             integer: bool = False) -> np.ndarray:
        """Add ``count`` columns of zero cost at once (``upper`` one value or one per column); returns their
        indices."""
        first = len(self.cost)
        self.lower += [float(lower)] * count
        self.upper += np.broadcast_to(np.asarray(upper, dtype=float), (count,)).tolist()
        self.cost += [0.0] * count
        self.integer += [bool(integer)] * count
        return np.arange(first, first + count, dtype=np.int64)

    def rows(self, index: np.ndarray, value: np.ndarray, lower: float = -math.inf, upper: float = math.inf) -> None:
        """Add one row ``lower ≤ Σ_w value[r, w]·x[index[r, w]] ≤ upper`` per row ``r`` of the (R, W) arrays,
        leaving out the entries with a negative index or a zero value (so rows of different lengths are
        padded with index −1); the columns of a row must be distinct (:meth:`row` sums repeats)."""
        keep = (index >= 0) & (value != 0.0)
        self.index += index[keep].tolist()
        self.value += value[keep].astype(float).tolist()
        self.starts += (self.starts[-1] + np.cumsum(keep.sum(axis=1))).tolist()
        self.row_lower += [float(lower)] * index.shape[0]
        self.row_upper += [float(upper)] * index.shape[0]

    def row(self, terms: Mapping[int, float] | Iterable[tuple[int, float]], lower: float = -math.inf,
            upper: float = math.inf) -> None:
        """Add ``lower ≤ Σ coef·x[col] ≤ upper``; zero coefficients are dropped, repeated columns summed."""
        merged: dict[int, float] = {}
        for col, coef in (terms.items() if isinstance(terms, Mapping) else terms):
            merged[col] = merged.get(col, 0.0) + coef
        for col, coef in merged.items():
            if coef != 0.0:
                self.index.append(col)
                self.value.append(coef)
        self.starts.append(len(self.index))
        self.row_lower.append(float(lower))
        self.row_upper.append(float(upper))

    def highs(self, relax: bool = False) -> highspy.Highs:
        """A HiGHS instance holding the model (``relax``: integrality dropped, i.e. the LP relaxation)."""
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(self.cost), len(self.row_lower)
        lp.col_cost_ = np.asarray(self.cost, dtype=float)
        lp.col_lower_ = np.asarray(self.lower, dtype=float)
        lp.col_upper_ = np.asarray(self.upper, dtype=float)
        lp.row_lower_ = np.asarray(self.row_lower, dtype=float)
        lp.row_upper_ = np.asarray(self.row_upper, dtype=float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = lp.num_col_, lp.num_row_
        lp.a_matrix_.start_ = np.asarray(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(self.index, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(self.value, dtype=float)
        if not relax and any(self.integer):
            lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                               for i in self.integer]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.passModel(lp)
        return h


def solve_highs(highs: highspy.Highs, time_limit: float, *, mip_rel_gap: float = 1e-6,
                threads: int = 1, seed: int = 0, verbose: bool = False,
                on_bound: Callable[[float], None] | None = None, node_limit: int | None = None) -> SolveResult:
    """Run a built HiGHS model (MIP or LP) under a time limit and read its proven dual bound.
    ``on_bound(bound)`` receives a MIP's proven dual bound while it runs (HiGHS' MIP interrupt callback).
    ``node_limit`` (``mip_max_nodes``) stops a MIP after that many branch-and-bound nodes: with one
    thread a limit that does not depend on the machine's speed, so the bound reached is reproducible.
    Ctrl-C or SIGTERM stops it at once and is raised when it returns (:func:`onnxpart.interrupts.deferred`)."""
    stop = _highs_callbacks(highs, on_bound)
    highs.setOptionValue("output_flag", bool(verbose))
    highs.setOptionValue("time_limit", float(max(time_limit, 1e-3)))
    highs.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    highs.setOptionValue("threads", int(threads))
    highs.setOptionValue("random_seed", int(seed))
    if node_limit is not None:
        highs.setOptionValue("mip_max_nodes", int(node_limit))
    start = time.perf_counter()
    with interrupts.deferred(stop):
        highs.run()
    seconds = time.perf_counter() - start
    model_status = highs.getModelStatus()
    info = highs.getInfo()
    is_mip = highs.getLp().integrality_ and any(
        v != highspy.HighsVarType.kContinuous for v in highs.getLp().integrality_)
    has_primal = info.primal_solution_status == 2  # kSolutionStatusFeasible
    objective = float(info.objective_function_value) if has_primal else None
    if model_status == highspy.HighsModelStatus.kOptimal:
        status = "optimal"
        bound = float(info.mip_dual_bound) if is_mip else objective
        if bound is None or not math.isfinite(bound):
            bound = objective if objective is not None else -math.inf
    elif model_status == highspy.HighsModelStatus.kInfeasible:
        return SolveResult("infeasible", None, math.inf, seconds, solver="highs")
    elif model_status in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt,
                          highspy.HighsModelStatus.kIterationLimit, highspy.HighsModelStatus.kSolutionLimit):
        status = "time_limit" if model_status != highspy.HighsModelStatus.kInterrupt else "interrupted"
        # An LP stopped early proves nothing; a MIP's dual bound is proven at any point.
        bound = float(info.mip_dual_bound) if is_mip and math.isfinite(info.mip_dual_bound) else -math.inf
    else:
        log.warning("HiGHS ended with status %s", highs.modelStatusToString(model_status))
        status, bound = "error", -math.inf
    values = list(highs.getSolution().col_value) if has_primal else []
    return SolveResult(status, objective, bound, seconds, values, solver="highs")


def _highs_callbacks(highs: highspy.Highs, on_bound: Callable[[float], None] | None) -> Callable[[], None]:
    """Install HiGHS' interrupt callbacks (simplex, IPM, MIP): they report the MIP's proven dual bound to
    ``on_bound`` and stop the run once the returned function was called. -> that stop function."""
    stopped = threading.Event()
    kinds = highspy.cb.HighsCallbackType

    def callback(kind, _message, data_out, data_in, _user) -> None:
        if on_bound is not None and kind == kinds.kCallbackMipInterrupt and math.isfinite(data_out.mip_dual_bound):
            on_bound(float(data_out.mip_dual_bound))
        if stopped.is_set():
            data_in.user_interrupt = True

    highs.setCallback(callback, None)
    for kind in (kinds.kCallbackSimplexInterrupt, kinds.kCallbackIpmInterrupt, kinds.kCallbackMipInterrupt):
        highs.startCallback(kind)
    return stopped.set


def _solve_stoppably(solver: cp_model.CpSolver, model: cp_model.CpModel, callback) -> Any:
    """``solver.Solve`` that Ctrl-C or SIGTERM ends at once: its ``stop_search`` runs from the signal
    watcher (:func:`onnxpart.interrupts.deferred`), and the interrupt is raised when it returns. CP-SAT's
    own SIGINT handler stays off (``catch_sigint_signal``): it resets SIGINT to its default afterwards,
    and a later Ctrl-C would kill the process without any clean-up."""
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        solver.stop_search()

    with interrupts.deferred(stop):
        if stopped.is_set():  # the signal came before the search began, when CP-SAT ignores a stop
            solver.parameters.max_time_in_seconds = 0.0
        return solver.Solve(model, callback)


def solve_cpsat(model: cp_model.CpModel, time_limit: float, *, workers: int = 2, seed: int = 0,
                hint_callback: Callable[[float, float, float], None] | None = None,
                verbose: bool = False, parameters: Mapping[str, Any] | None = None,
                on_bound: Callable[[float], None] | None = None,
                ) -> tuple[SolveResult, cp_model.CpSolver]:
    """Solve a CP-SAT model; ``hint_callback(seconds, incumbent, bound)`` is called on each new
    incumbent (for progress bars), ``on_bound(bound)`` on each new proven objective bound. Ctrl-C or
    SIGTERM stops the search at once and is raised when it returns (:func:`_solve_stoppably`).
    ``parameters`` sets further ``SatParameters`` fields by name (e.g. ``interleave_search``,
    ``max_deterministic_time`` for reproducible multi-worker runs; a list extends a repeated field such
    as ``subsolvers``)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(max(time_limit, 1e-3))
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.log_search_progress = bool(verbose)
    solver.parameters.catch_sigint_signal = False
    for name, value in (parameters or {}).items():
        if isinstance(value, (list, tuple)):  # a repeated field, e.g. subsolvers
            getattr(solver.parameters, name).extend(value)
        else:
            setattr(solver.parameters, name, value)
    if on_bound is not None:
        solver.best_bound_callback = on_bound
    callback = None
    if hint_callback is not None:
        class _Progress(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                hint_callback(self.WallTime(), self.ObjectiveValue(), self.BestObjectiveBound())

        callback = _Progress()
    start = time.perf_counter()
    code = _solve_stoppably(solver, model, callback)
    seconds = time.perf_counter() - start
    has_solution = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    objective = solver.ObjectiveValue() if has_solution else None
    if code == cp_model.OPTIMAL:
        status = "optimal"
    elif code == cp_model.INFEASIBLE:
        status = "infeasible"
    elif code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT model invalid: {model.Validate()}")
    else:
        status = "time_limit"
    bound = solver.BestObjectiveBound() if code != cp_model.INFEASIBLE else math.inf
    return SolveResult(status, objective, float(bound), seconds, solver="cp-sat"), solver
