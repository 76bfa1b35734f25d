"""Op times measured at several batch sizes on one device, and the rule that gives ``t(op, device, b)``
at any batch size ``b ≥ 1`` from them (the throughput objective's slice times, Section 3.2).

With measured sizes ``s_1 < … < s_m`` and times ``t_1 … t_m`` of one op:

* **at a measured size** the measurement: ``t(s_k) = t_k``;
* **between two measured sizes** linear interpolation, ``t(b) = t_k + (b − s_k)·(t_{k+1} − t_k)/(s_{k+1} − s_k)``:
  an op's time is close to affine in the batch between neighbouring measured sizes (a fixed part —
  launch, reading the weights — plus a per-input part that changes slowly as the device fills up);
* **above the largest** the last segment's slope, clipped at ≥ 0: ``t(b) = t_m + max(0, σ_m)·(b − s_m)``,
  ``σ_m = (t_m − t_{m−1})/(s_m − s_{m−1})``. Past the measured range the device is at least as full as
  at ``s_m``, so the marginal cost per input is the last one measured; a negative slope is measurement
  noise (more inputs never take less time), so it is flattened rather than extrapolated to zero;
* **below the smallest** the first segment's slope, clipped at ≥ 0, but never under proportional
  scaling: ``t(b) = max(t_1 − max(0, σ_1)·(s_1 − b), t_1·b/s_1)``. For an exactly affine op
  ``a + c·b`` with ``a ≥ 0`` the first term is exact and the second below it, so the floor only acts
  when the first segment extrapolates to a negative fixed part (noise, or a device that gets more
  efficient per input faster than affine): it then assumes no fixed part at all, which keeps
  ``t(b) > 0`` and the per-input time ``t(b)/b`` no better than at ``s_1``;
* **one measured size** ``s_1`` (the single-file form): the rule of
  :meth:`~onnxpart.schedule.common.instance.Instance.time_batch` scaled from that point,
  ``t(b) = f + (t_1 − f)·b/s_1`` with ``f = min(fixed, t_1)`` the batch-independent part (the device
  spec's launch overhead and weight read, 0 without a spec) — exactly today's rule when ``s_1 = 1``.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchCurve:
    """``times[i, k]``: seconds of op ``i`` at batch ``sizes[k]`` (ascending, distinct); ``fixed[i]`` its
    batch-independent part, used only with a single measured size (module docstring)."""

    sizes: tuple[int, ...]
    times: np.ndarray  # (n ops, len(sizes))
    fixed: np.ndarray  # (n ops,)

    def at(self, i: int, b: int) -> float:
        """Seconds of op ``i`` for a batch of ``b ≥ 1`` inputs (the rule of the module docstring)."""
        s, t = self.sizes, self.times[i]
        if len(s) == 1:
            f = min(float(self.fixed[i]), float(t[0]))
            return f + (float(t[0]) - f) * b / s[0]
        k = bisect.bisect_left(s, b)
        if k < len(s) and s[k] == b:
            return float(t[k])
        if 0 < k < len(s):
            return float(t[k - 1] + (b - s[k - 1]) * (t[k] - t[k - 1]) / (s[k] - s[k - 1]))
        if k == len(s):
            return float(t[-1] + max(0.0, (t[-1] - t[-2]) / (s[-1] - s[-2])) * (b - s[-1]))
        slope = max(0.0, (t[1] - t[0]) / (s[1] - s[0]))
        return float(max(t[0] - slope * (s[0] - b), t[0] * b / s[0]))

    def rows(self, ops: Sequence[int]) -> "BatchCurve":
        """The curve of the ops ``ops`` only (a sub-instance's)."""
        ops = list(ops)
        return BatchCurve(self.sizes, self.times[ops], self.fixed[ops])

    @functools.cached_property
    def digest(self) -> bytes:
        """Bytes that differ whenever two curves give different times (hashing, device symmetry)."""
        h = hashlib.sha256(np.asarray(self.sizes, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(self.times, dtype=float).tobytes())
        h.update(np.ascontiguousarray(self.fixed, dtype=float).tobytes())
        return h.digest()
