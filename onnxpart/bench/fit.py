"""The calibration fit: measured unit times as a linear function of the predicted op times, by least
squares (numpy's ``lstsq``).

A unit ``i`` (a stage) has, per op type ``t``, the predicted seconds ``W[i, t]`` of its ops of that type,
``n[i]`` kernel launches (its ONNX nodes) and a measured median ``y[i]``. The model is

    y[i] ≈ Σ_t s[t] · W[i, t] + c · n[i]

with a scale ``s[t]`` per op type and a per-launch overhead ``c`` — where the data allows it: one scale per
type needs more units than unknowns (``units ≥ types + 2``, one left for the residual); otherwise one scale
for every type (``units ≥ 3``), otherwise a scale alone (``c = 0``). A negative overhead or scale (what noise
on few units gives) is not physical: that term is dropped and the fit redone. The residual is the RMS of the
relative errors ``fit / y − 1`` over the units.

Where every node's kernel time inside the stages is known (:mod:`onnxpart.bench.kernels`), the data allow
more: :func:`fit_kernels` takes each op type's scale as its ops' measured kernel seconds over their predicted
seconds (the least-squares scale of ``kernel ≈ s · work`` weighted by 1 / work: a ratio of sums, so the ops
that take the time set it), and the per-launch overhead as what the stage walls hold beyond their kernels,
per launch. The residual is still that of the stages' walls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fit:
    """The fitted model: ``scales`` per op type (every type the same under ``kind`` global or scale),
    ``overhead`` seconds per launch, the ``residual`` and the ``units`` it was fit on."""

    kind: str  # "per-op-type", "global" or "scale"
    scales: dict[str, float]
    overhead: float
    residual: float
    units: int

    def scale(self, op_type: str) -> float:
        return self.scales.get(op_type, self.scales.get("*", 1.0))

    def to_dict(self) -> dict:
        return {"model": self.kind, "scales": dict(self.scales), "overhead_s": self.overhead,
                "residual": self.residual, "units": self.units}


def fit_units(work: Sequence[Mapping[str, float]], launches: Sequence[int], measured: Sequence[float]) -> Fit:
    """Fit :class:`Fit` to units given as per-type predicted seconds ``work``, ``launches`` and ``measured``."""
    types = sorted({t for unit in work for t, w in unit.items() if w > 0})
    W = np.array([[unit.get(t, 0.0) for t in types] for unit in work], dtype=float)
    n = np.asarray(launches, dtype=float)
    y = np.asarray(measured, dtype=float)
    if len(y) >= len(types) + 2:
        coef = _nonnegative(np.column_stack([W, n]), y)
        if coef is not None:
            return _fit("per-op-type", dict(zip(types, coef[:-1])), coef[-1], W, n, y)
    total = W.sum(axis=1)
    if len(y) >= 3:
        coef = _nonnegative(np.column_stack([total, n]), y)
        if coef is not None:
            return _fit("global", {"*": coef[0]}, coef[1], W, n, y, types)
    scale = float(total @ y / (total @ total)) if total @ total > 0 else 1.0
    return _fit("scale", {"*": scale}, 0.0, W, n, y, types)


def fit_kernels(op_types: Sequence[str], work: Sequence[float], kernel: Sequence[float],
                stage_ops: Sequence[Sequence[int]], stage_launches: Sequence[int], stage_extra: Sequence[float],
                measured: Sequence[float]) -> Fit:
    """:class:`Fit` of kind ``per-op-type`` from ops' predicted ``work`` and measured ``kernel`` seconds (by
    ``op_types``; module docstring) and the stages — each its op indices ``stage_ops``, its kernel launches,
    the seconds ``stage_extra`` it spends outside its ops' kernels and the predictions (its ops' weight
    generators), its ``measured`` wall."""
    totals: dict[str, list[float]] = {}
    for t, w, k in zip(op_types, work, kernel):
        pair = totals.setdefault(t, [0.0, 0.0])
        pair[0] += w
        pair[1] += k
    overall = sum(p[1] for p in totals.values()) / max(sum(p[0] for p in totals.values()), 1e-300)
    scales = {t: (k / w if w > 0 else overall) for t, (w, k) in totals.items()}
    scales["*"] = overall
    kernels = [sum(kernel[i] for i in ops) + extra for ops, extra in zip(stage_ops, stage_extra)]
    spare = sum(y - k for y, k in zip(measured, kernels))
    overhead = max(spare, 0.0) / max(sum(stage_launches), 1)
    fitted = np.array([sum(work[i] * scales[op_types[i]] for i in ops) + extra + overhead * n
                       for ops, extra, n in zip(stage_ops, stage_extra, stage_launches)])
    y = np.asarray(measured, dtype=float)
    residual = float(np.sqrt(np.mean((fitted / y - 1.0) ** 2))) if len(y) else 0.0
    return Fit("per-op-type", scales, float(overhead), residual, len(y))


def _nonnegative(A: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Least squares of ``A x ≈ y`` with every coefficient ≥ 0, or None where the unconstrained solution
    has a negative one (the caller falls back on a smaller model) or a column is all zero."""
    if not np.all(A.any(axis=0)):
        return None
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return coef if np.all(coef >= 0) else None


def _fit(kind: str, scales: dict, overhead: float, W: np.ndarray, n: np.ndarray, y: np.ndarray,
         types: Sequence[str] = ()) -> Fit:
    s = np.array([scales.get(t, scales.get("*", 1.0)) for t in types] if types else list(scales.values()))
    predicted = W @ s + overhead * n
    residual = float(np.sqrt(np.mean((predicted / y - 1.0) ** 2))) if len(y) else 0.0
    return Fit(kind, {t: float(v) for t, v in scales.items()}, float(overhead), residual, len(y))
