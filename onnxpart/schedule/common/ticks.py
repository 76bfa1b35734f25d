"""Integer time for the CP-SAT models of both objectives, and CP-SAT's deterministic time.

CP-SAT needs integers: every duration and delay is rounded DOWN to ticks of ``1/scale`` seconds, which
relaxes the problem (``⌊a+b⌋ ≥ ⌊a⌋+⌊b⌋`` keeps every real schedule feasible after flooring its starts),
so a proven bound in ticks, divided by ``scale``, is a proven bound in seconds.

SPLIT's module solves stop on CP-SAT's deterministic time (:func:`deterministic_seconds`), not on the wall
clock, so the same seed gives the same files on any machine load; the wall clock
(:class:`onnxpart.strategy.Budget`) only caps them.
"""

from __future__ import annotations

import math

#: CP-SAT deterministic seconds per wall-clock second on module models, an estimate on the low side (0.08–0.4
#: measured on a loaded 2-core machine): the deterministic budget then usually ends a solve before its wall
#: deadline does. On the benchmark's 1-channel stack of ten modules at T = 60 s with one worker, 0.1 ended
#: SPLIT after 26 s (LB/UB 0.895), 0.2 after 39 s (0.959) with no solve cut by the wall clock, 0.3 at the wall
#: clock with 40 solves cut (0.972, but no longer reproducible).
DET_PER_SECOND = 0.2


def deterministic_seconds(seconds: float) -> float:
    """CP-SAT deterministic time standing for ``seconds`` of the wall clock (:data:`DET_PER_SECOND`)."""
    return DET_PER_SECOND * seconds


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
