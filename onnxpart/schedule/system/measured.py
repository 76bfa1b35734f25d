"""Measured op times for a device: the system file's ``costs:`` entry (costs files, ``onnxpart.costs/1``,
as ``onnxpart annotate --cost measured [--batch B]`` writes them on that device) gives each op's seconds
there, by op name, instead of the device spec's analytic roofline — the thesis profiles every op on every
device of its platform (Section 4.1). One file is the time per single input (batch 1); a mapping gives
one file per measured batch size, and :class:`~onnxpart.schedule.system.batch_curve.BatchCurve` gives the time
at any batch size from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxpart.costs_io import read_costs_file
from onnxpart.errors import UserError
from onnxpart.schedule.system.batch_curve import BatchCurve
from onnxpart.schedule.system.model import System


def measured_times(graph: Any, path: str, device: str, batch: int) -> np.ndarray:
    """Seconds per op of ``graph`` (by name) from the costs file at ``path`` (``device``'s measurement at
    ``batch``; its times are checked by the costs schema); a one-line error naming the op the file lacks."""
    work = {op.name: op.work for op in read_costs_file(path).ops}
    out = np.empty(len(graph.ops))
    for i, op in enumerate(graph.ops):
        if op.name not in work:
            raise UserError(f"{path} (device {device}, batch {batch}): no measured time for op {op.name} (measure "
                            "the same model with the same --coarsen: onnxpart annotate model.onnx --cost measured "
                            f"--batch {batch} -o costs.json)")
        out[i] = work[op.name]
    return out


def measured_curves(graph: Any, system: System, fixed: np.ndarray) -> dict[int, BatchCurve]:
    """Device index → its :class:`BatchCurve`, for every device whose system entry names costs files
    (copies of one group share one curve; each file is read once); ``fixed`` is the (n, K)
    batch-independent part, used with a single measured size."""
    curves: dict[int, BatchCurve] = {}
    by_group: dict[str, BatchCurve] = {}
    for u, d in enumerate(system.devices):
        if d.costs is None:
            continue
        if d.group not in by_group:
            times = np.column_stack([measured_times(graph, path, d.group, b) for b, path in d.costs])
            by_group[d.group] = BatchCurve(tuple(b for b, _ in d.costs), times, np.asarray(fixed)[:, u].copy())
        curves[u] = by_group[d.group]
    return curves
