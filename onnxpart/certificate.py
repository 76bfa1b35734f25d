"""The bound certificate: one JSON shape shared by all strategies.

A certificate says how good a solution is: its objective value (the *upper bound*, for minimization),
every lower bound that was computed — each with the method, the proven value, the solver status, the
solver and the seconds it took — the best of them, and the gap ``1 - LB/UB``. Lower bounds are only ever
proven values (a MIP dual bound, a CP-SAT best objective bound, or a formula with a proof), never an
incumbent; a solver stopped by its time limit reports its proven bound with status ``time_limit``.

Every check that compares a recomputed number with one read back (``--check-certificate``,
:mod:`onnxpart.certificate_check`, :meth:`Certificate.check`; a solver's answer) uses the one tolerance rule
here: :func:`same_value`, :func:`above`, :func:`slack`, and :func:`mismatch` to name what differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "onnxpart.certificate/1"


@dataclass(frozen=True)
class LowerBound:
    method: str  # e.g. "simple", "bottleneck-guess", "ideal-dp", "moccasin-cpsat"
    value: float | None  # None when the method proved nothing (error, no bound in time)
    # "optimal" | "time_limit" | "interrupted" (ended early) | "bound" (closed formula) | "infeasible" | "error"
    status: str
    solver: str  # "highs", "cp-sat", "formula", "dp"
    seconds: float
    note: str = ""


#: The one tolerance rule of every check that compares a recomputed number with one read back (from a
#: file or a solver): relative 1e-9 of the larger magnitude (float round trips and summation order stay
#: far below it; solvers' bounds are floored or proven on the same floats), plus 1e-12 absolute so
#: that values next to 0 (a start time, an empty stage's cost) compare equal.
RTOL = 1e-9
ATOL = 1e-12


def slack(scale: float) -> float:
    """How far a value of magnitude ``scale`` may be from its recomputation."""
    return RTOL * abs(scale) + ATOL


def same_value(a: float, b: float) -> bool:
    """``a`` and ``b`` agree within the :func:`slack` of the larger."""
    return abs(a - b) <= slack(max(abs(a), abs(b)))


def above(value: float, limit: float) -> bool:
    """``value`` exceeds ``limit`` beyond its :func:`slack` (a lower bound above an upper bound)."""
    return value > limit + slack(limit)


def best_bound(bounds) -> float | None:
    """The one best-bound rule: the largest proven value among ``bounds`` (None when nothing was proven)."""
    values = [b.value for b in bounds if b.value is not None]
    return max(values) if values else None


def relative_gap(upper: float, lower: float | None) -> float | None:
    """The one gap rule: ``1 - lower/upper`` (0 when the upper bound is 0; None without a lower bound)."""
    if lower is None:
        return None
    if upper <= 0:
        return 0.0
    return max(0.0, 1.0 - lower / upper)


def is_optimal(gap: float | None) -> bool:
    """A gap that proves optimality: within the tolerance of every check (:data:`RTOL`)."""
    return gap is not None and gap <= RTOL


def mismatch(what: str, claimed: Any, recomputed: Any) -> list[str]:
    """``[]`` when ``claimed`` equals ``recomputed`` (numbers by :func:`same_value`), else one message."""
    if _number(claimed) and _number(recomputed):
        equal = same_value(claimed, recomputed)
    else:
        equal = claimed == recomputed
    return [] if equal else [f"{what} {_show(claimed)} != recomputed {_show(recomputed)}"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = repr(float(value) if _number(value) and not isinstance(value, int) else value)
    return text if len(text) <= 80 else text[:77] + "..."


class Bounded:
    """Mixin of whatever has an objective ``value`` (an upper bound: the objective is minimized) and proven
    ``lower_bounds`` — every strategy's Solution, and :class:`Certificate` — with the best bound, the gap and
    ``proven_optimal`` by the one rule (:func:`best_bound`, :func:`relative_gap`, :func:`is_optimal`)."""

    value: float
    lower_bounds: list[LowerBound]

    @property
    def best_lower_bound(self) -> float | None:
        return best_bound(self.lower_bounds)

    @property
    def gap(self) -> float | None:
        """``1 - LB/UB`` (:func:`relative_gap`)."""
        return relative_gap(self.value, self.best_lower_bound)

    @property
    def proven_optimal(self) -> bool:
        return is_optimal(self.gap)


@dataclass
class Certificate(Bounded):
    problem: str  # "mtpp", "remat", ...
    instance_sha256: str
    objective: str  # what is minimized, with its unit
    upper_bound: float
    lower_bounds: list[LowerBound] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return self.upper_bound

    def check(self, upper: float, formulas: dict[str, float]) -> list[str]:
        """What this certificate claims that a recomputation from the files does not give (``[]``: all of it
        holds): an upper bound other than the recomputed objective ``upper``, or a closed-form bound other
        than its re-derived value (``formulas``: method -> value; other bounds are not re-derivable)."""
        return mismatch("certificate upper bound", self.upper_bound, upper) + [
            problem for bound in self.lower_bounds if bound.method in formulas
            for problem in mismatch(f"{bound.method} bound", bound.value, formulas[bound.method])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "problem": self.problem,
            "instance_sha256": self.instance_sha256,
            "objective": self.objective,
            "upper_bound": self.upper_bound,
            "best_lower_bound": self.best_lower_bound,
            "gap": self.gap,
            "proven_optimal": self.proven_optimal,
            "lower_bounds": [asdict(b) for b in self.lower_bounds],
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Certificate":
        return cls(
            problem=data["problem"],
            instance_sha256=data["instance_sha256"],
            objective=data["objective"],
            upper_bound=float(data["upper_bound"]),
            lower_bounds=[LowerBound(**b) for b in data.get("lower_bounds", [])],
            details=dict(data.get("details", {})),
        )


def instance_hash(*parts: Any) -> str:
    """sha256 over a canonical JSON rendering of the parts (model hash, costs, k, options...)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
