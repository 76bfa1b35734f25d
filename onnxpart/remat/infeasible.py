"""Why no remat method met the budget: the one line of exit 4, with what is proven (the budget impossible
under a restriction, with the least budget that works) and what was only reached (the least peak a method's
sequences got to), kept apart."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from onnxpart.units import format_bytes

if TYPE_CHECKING:
    from onnxpart.remat import Solution
    from onnxpart.remat.model import MethodResult


def infeasible_message(solution: Solution) -> str:
    """Why no method met the budget, with the smallest budget proven reachable / the proven limit."""
    budget = solution.budget
    if solution.budget_search is not None:  # the budget came from moccasin's phase 1, which reached it
        parts = [f"--budget min: moccasin's phase 1 reached {budget:,} B, but {', '.join(solution.options.methods)} "
                 f"found no sequence within it in the time left: add moccasin to --method (it starts from that "
                 f"sequence) or raise --time-limit"]
    elif any(result.status == "infeasible" for result in solution.results):
        parts = [f"no sequence fits the budget {budget:,} B (baseline peak {solution.baseline.peak:,.0f} B); "
                 "--budget min finds the smallest budget that works"]
    else:  # running out of time, or a heuristic that got stuck, proves nothing
        parts = [f"no method found a sequence within the budget {budget:,} B (baseline peak "
                 f"{solution.baseline.peak:,.0f} B), and none proved that none exists: raise --time-limit or the "
                 "budget; --budget min finds the smallest budget that works"]
    return "; ".join(parts + [_why(result, solution.floor[0]) for result in solution.results])


def _why(result: MethodResult, floor: int) -> str:
    """What one method proved or reached when it found no sequence within the budget."""
    notes = result.notes or {}
    if result.status == "infeasible" and notes.get("proven_min_budget"):
        needed = math.ceil(notes["proven_min_budget"])
        return (f"{result.method}: proven impossible under {result.restriction} — needs --budget {needed} "
                f"({format_bytes(needed)}) or more")
    if notes.get("reachable_budget"):
        reached = math.ceil(notes["reachable_budget"])
        return (f"{result.method}: --budget {reached} ({format_bytes(reached)}) works (the smallest peak it "
                f"reached; proven ≥ {notes.get('proven_min_budget') or floor:,.0f} B, so raising --time-limit or "
                f"--max-recompute may lower it)")
    if result.profile is not None and result.status == "over_budget":
        return f"{result.method}: rounded sequence peaks at {result.profile.peak:,.0f} B"
    return f"{result.method}: {result.status}"
