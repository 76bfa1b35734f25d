"""Integer time for the CP-SAT models of both objectives.

CP-SAT needs integers: every duration and delay is rounded DOWN to ticks of ``1/scale`` seconds, which
relaxes the problem (``⌊a+b⌋ ≥ ⌊a⌋+⌊b⌋`` keeps every real schedule feasible after flooring its starts),
so a proven bound in ticks, divided by ``scale``, is a proven bound in seconds.
"""

from __future__ import annotations

import math


class Ticks:
    """The tick of a model whose schedules fit in ``horizon`` seconds: ``scale`` ticks per second, a
    power of ten putting the horizon near 10^7 ticks (exact on round data); ``top`` the horizon in ticks
    (an upper bound for every time variable)."""

    def __init__(self, horizon: float):
        self.scale = 10.0 ** math.floor(math.log10(1e7 / horizon)) if horizon > 0 else 1.0
        self.top = math.ceil(horizon * self.scale) + 1

    def __call__(self, seconds: float) -> int:
        """``seconds`` in ticks, rounded down (a relaxation)."""
        return int(math.floor(seconds * self.scale))
