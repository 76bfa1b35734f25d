"""Cost models: analytic (roofline over FLOPs and bytes) and measured (onnxruntime profiling).

Both return a new OpGraph with ``work`` (seconds), ``flops`` and ``mem_bytes`` on every op and the
interconnect ``bandwidth`` (bytes/s) used to price tensors that cross devices or stages.
"""

from __future__ import annotations

from onnxpart.cost_models.analytic import analytic_costs, device_costs, node_cost
from onnxpart.cost_models.device import DeviceSpec, builtin_devices, load_device

__all__ = ["analytic_costs", "device_costs", "node_cost", "DeviceSpec", "builtin_devices", "load_device"]
