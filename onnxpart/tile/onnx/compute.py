"""What one device pays to run its part of an op: the launch overhead in full, plus the roofline of its
shard — the compute cost of GSPMD's and Alpa's intra-operator passes, where every device launches
every kernel of the program, sharded or not.

For an op whose single-device time is ``work = overhead + max(F / peak, M / bandwidth)`` (the analytic
cost model, :mod:`onnxpart.cost_models.analytic`), an algorithm with compute divisor k whose slots hold
``m`` of the op's ``M`` bytes on each device (a sharded slot its shard, a replicated or partial one the
whole tensor: every device reads a replicated weight in full) costs each device

    overhead + max(F / k / peak, M · m_slots / M_slots / bandwidth)

seconds, ``m_slots / M_slots`` being the per-device share of the bytes of the op's inputs and outputs.
The overhead is the ``--device`` spec's ``op_overhead`` (at most ``work``), never divided. A replicated
algorithm costs ``work`` itself. For measured costs (``--cost measured``, a costs file) the measured
time above the overhead is scaled by the same roofline ratio, shard over whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRoofline:
    """The part of a device spec the per-device cost needs (:class:`onnxpart.cost_models.device.DeviceSpec`)."""

    overhead: float  # seconds per kernel launch
    memory_bandwidth: float  # bytes/s
    peaks: tuple[tuple[str, float], ...]  # (dtype, FLOP/s)

    @classmethod
    def of(cls, spec) -> "DeviceRoofline":
        return cls(float(spec.op_overhead), float(spec.memory_bandwidth),
                   tuple(sorted((str(k), float(v)) for k, v in spec.peak_flops.items())))

    def peak(self, dtype: str) -> float:
        table = dict(self.peaks)
        return table.get(dtype) or table.get("float32") or max(table.values())

    def roofline(self, flops: float, nbytes: float, dtype: str) -> float:
        return max(flops / self.peak(dtype), nbytes / self.memory_bandwidth)

    def seconds(self, op, dtype: str, whole: Sequence[float], local: Sequence[float], divisor: int) -> float:
        """One device's seconds for ``op`` (an :class:`onnxpart.graph.Op` with work, flops and mem_bytes)
        run with compute ``divisor`` on slots of ``whole`` bytes of which it holds ``local`` (module
        docstring)."""
        if divisor == 1 and sum(local) >= sum(whole):
            return op.work
        overhead = min(self.overhead, op.work)
        full = self.roofline(op.flops, op.mem_bytes, dtype)
        if full <= 0:
            return overhead + (op.work - overhead) / divisor
        share = sum(local) / sum(whole) if sum(whole) else 1.0 / divisor
        return overhead + (op.work - overhead) * self.roofline(op.flops / divisor, op.mem_bytes * share, dtype) / full
