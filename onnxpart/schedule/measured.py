"""Measured op times for a device: the system file's ``costs:`` entry (a costs file, ``onnxpart.costs/1``,
as ``onnxpart annotate --cost measured`` writes it on that device) gives each op's seconds there, by op
name, instead of the device spec's analytic roofline — the thesis profiles every op on every device of
its platform (Section 4.1). Times are per single input (batch 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxpart.costs_io import read_costs_file
from onnxpart.errors import UserError
from onnxpart.schedule.model import System, analytic_cost_fn


def measured_times(graph: Any, path: str) -> np.ndarray:
    """Seconds per op of ``graph`` (by name) from the costs file at ``path``; a one-line error for an
    op the file lacks or a time that is not a finite number ≥ 0."""
    data = read_costs_file(path)
    work: dict[str, Any] = {str(op.get("name")): op.get("work") for op in data["ops"]}
    out = np.empty(len(graph.ops))
    for i, op in enumerate(graph.ops):
        if op.name not in work:
            raise UserError(f"{path}: no measured time for op {op.name} (measure the same model with the same "
                            "--coarsen: onnxpart annotate model.onnx --cost measured -o costs.json)")
        value = work[op.name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UserError(f"{path}: op {op.name} has work {value!r}: expected seconds ≥ 0")
        out[i] = float(value)
    return out


def with_measured(graph: Any, system: System,
                  base: Callable[[int, int], float] | None) -> Callable[[int, int], float] | None:
    """``base`` (or the analytic roofline of the specced devices when None) with every device that names
    a costs file timed from it; ``base`` unchanged when no device does."""
    files = sorted({d.costs for d in system.devices if d.costs is not None})
    if not files:
        return base
    times = {path: measured_times(graph, path) for path in files}
    if base is None and any(d.costs is None for d in system.devices):
        base = analytic_cost_fn(graph, system)

    def cost(i: int, u: int) -> float:
        path = system.devices[u].costs
        return float(times[path][i]) if path is not None else base(i, u)

    return cost
