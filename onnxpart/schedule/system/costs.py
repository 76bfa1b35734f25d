"""Per-device op times of a system: where a device's seconds for an op come from.

* :func:`analytic_cost_fn` — the analytic roofline of the device's spec
  (:func:`onnxpart.cost_models.analytic.device_costs`, one pass per distinct spec);
* :func:`table_cost_fn` — the graph's own cost table (``--costs``, ``--cost measured``) when it has a
  column for every device;
* :func:`recorded_cost_fn` — a graph file's recorded FLOPs and bytes, on the cost model's roofline
  (:func:`onnxpart.cost_models.analytic.roofline`);
* :func:`fixed_part` — the batch-independent part of an op's time (throughput's slice times);
* devices with measured costs files are timed by :mod:`.measured` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnxpart.cost_models.analytic import device_costs, roofline
from onnxpart.errors import UserError
from onnxpart.schedule.system.model import System


def _launch(spec: Any, op: Any) -> float:
    """The launch overheads of an op's nodes (at least one) on a spec."""
    return spec.op_overhead * max(1, len(getattr(op, "nodes", ()) or ()))


def fixed_part(spec: Any, op: Any) -> float:
    """The batch-independent seconds of an op on a spec: its launch overheads and reading its weights
    once (the roofline's memory term for the parameters); 0 without a spec."""
    if spec is None:
        return 0.0
    return float(_launch(spec, op) + roofline(0.0, op.param_bytes, spec))


def analytic_cost_fn(graph: Any, system: System) -> Callable[[int, int], float]:
    """Seconds of op i on device u from the graph's per-device cost table
    (:func:`onnxpart.cost_models.analytic.device_costs`: one roofline pass per distinct spec). Devices
    with a measured costs file are costed by :mod:`.measured` instead, and are not columns here."""
    specced = [d for d in system.devices if d.costs is None]
    for d in specced:
        if d.spec is None:
            raise UserError(f"device {d.name} has no device spec: give one (or a costs file) in the system file")
    table = device_costs(graph, {d.name: d.spec for d in specced}).costs
    column = {d.name: table.devices.index(d.name) for d in specced}
    return lambda i, u: float(table.work[i, column[system.devices[u].name]])


def table_cost_fn(graph: Any, system: System) -> Callable[[int, int], float] | None:
    """Seconds from the graph's own cost table (``--costs``, ``--cost measured``) when it has a column
    for every device of ``system`` (by copy name or group); None otherwise (then each device's spec is
    costed analytically by :func:`onnxpart.schedule.common.instance.from_graph`)."""
    table = getattr(graph, "costs", None)
    if table is None:
        return None
    columns = []
    for d in system.devices:
        name = d.name if d.name in table.devices else d.group if d.group in table.devices else None
        if name is None:
            return None
        columns.append(table.devices.index(name))
    return lambda i, u: float(table.work[i, columns[u]])


def recorded_cost_fn(graph: Any, system: System) -> Callable[[int, int], float]:
    """Seconds from each op's recorded FLOPs and bytes moved (a graph file has no ONNX nodes to cost
    again): the cost model's roofline on each device's spec, plus the launch overheads."""
    for d in system.devices:
        if d.spec is None and d.costs is None:
            raise UserError(f"device {d.name} has no device spec: give one (or a costs file) in the system file")

    def cost(i: int, u: int) -> float:
        op, spec = graph.ops[i], system.devices[u].spec
        return roofline(op.flops, op.mem_bytes, spec) + _launch(spec, op)

    return cost
