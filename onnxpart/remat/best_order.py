"""``--order best`` (the default of ``onnxpart remat``): the file's order (Moccasin §2.3) and the
memory-minimizing topological order (:mod:`.orders`), each solved by :func:`onnxpart.remat.solve_in_order`
with half of what the order search left; the shorter sequence answers, and its certificate adds the
``either-order`` bound, which holds for every sequence whose first computations follow either order."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import LowerBound
from onnxpart.errors import InfeasibleError
from onnxpart.strategy import Budget

if TYPE_CHECKING:
    from onnxpart.remat import Options, Solution
    from onnxpart.remat.model import Instance
    from onnxpart.remat.orders import OrderResult


def best_of_orders(problem: Instance, found: OrderResult, options: Options, board: Board,
                    budget: Budget) -> Solution:
    """``--order best``: the file's order (§2.3) and the memory-minimizing one ``found``, each solved with
    half of what the order search left (a step that ends early leaves its time to the next) on its own
    board (one order's bounds do not hold for the other's sequences); the smaller budget answers
    (``--budget min``), then the shorter sequence, ties to the file's order. The file's order alone runs
    when ``found`` is that order or when it fits without recomputation (TDI 0 is optimal under any
    order). The answer's certificate adds :func:`_either_order_bound`."""
    from onnxpart.remat import solve_in_order

    plan = [(None, replace(options, order="fixed"))]
    if found.order != problem.op_order():
        plan.append((found, replace(options, order="minmem")))
    tries: list[tuple[Solution | None, InfeasibleError | None]] = []  # (the solution or the partial one, its error)
    for i, (order, options_in_order) in enumerate(plan):
        part = Budget(budget.share(1.0, later=len(plan) - 1 - i), ledger=budget.ledger, clock=budget.clock)
        try:
            solution = solve_in_order(problem, order, options_in_order, OrderBoard(board), part)
        except InfeasibleError as exc:
            tries.append((getattr(exc, "solution", None), exc))
            continue
        tries.append((solution, None))
        if solution.start.peak <= solution.budget:
            break
    solved = [s for s, exc in tries if exc is None]
    if not solved:
        raise tries[0][1]
    chosen = min(solved, key=lambda s: (s.budget, s.value))
    ran = [s for s, _ in tries if s is not None]
    chosen.tried = [_order_row(s) for s in ran]
    if len(ran) > 1:
        chosen.lower_bounds.append(_either_order_bound(ran))
        board.add(chosen.lower_bounds[-1])
    return chosen


class OrderBoard(Board):
    """One order's board under ``--order best``: its own bounds (they hold only for sequences in its
    order's stages); every sequence offered to it is also offered to the run's board, which holds no
    bound until both orders are done and reports the progress of an offer (this board does not)."""

    def __init__(self, run: Board):
        super().__init__(run.on_progress, run.floor)
        self.run = run

    def offer(self, value: float, how: str) -> bool:
        self.run.offer(value, how)
        return super().offer(value, how)

    def report(self, phase: str) -> None:
        """The run's board has reported this offer."""


def _either_order_bound(solutions: list[Solution]) -> LowerBound:
    """The least of the orders' best bounds: a lower bound on every sequence whose first computations follow
    either order, since each order's best bound holds for every sequence in its own stages. An order where a
    method proved that no sequence fits has none to bound and is left out (one always found a sequence)."""
    value = min((s.best_lower_bound if s.best_lower_bound is not None else s.instance.base_duration
                 for s in solutions if all(r.status != "infeasible" for r in s.results)),
                default=solutions[0].instance.base_duration)  # no-recompute: every sequence's bound
    return LowerBound("either-order", value, "bound", "min", 0.0,
                      "holds under: first computations in the file's order or in the memory-minimizing order "
                      "(the lesser of the two orders' best bounds)")


def _order_row(solution: Solution) -> dict[str, Any]:
    """One order's outcome under ``--order best``: what it found and what it proved, in its own stages."""
    from onnxpart.remat import tdi_of

    best, inst = solution.best, solution.instance
    return {"order": solution.options.order, "input_order_peak_bytes": solution.start.peak,
            "budget_bytes": solution.budget, "method": None if best is None else best.method,
            "duration": None if best is None else best.profile.duration,
            "tdi": None if best is None else tdi_of(inst, best.profile.duration),
            "tdi_lower_bound": tdi_of(inst, solution.best_lower_bound)}
