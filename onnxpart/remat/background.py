"""The Checkmate LP relaxation (:func:`.checkmate.lp_lower_bound`) as a second proven lower bound for
Moccasin, solved in a worker process while CP-SAT searches, within the same time limit.

CP-SAT's objective bound on the stage grid stays at the trivial ``Σ w_v`` on larger instances (the
paper's G2 at 80%: +0.00% after 60 s); the LP relaxation of the same stage structure (Moccasin §2.3,
Checkmate's stages, the memory of Eq. 4) bounds every sequence Moccasin may return (see
:func:`.checkmate.lp_lower_bound`). Only an LP solved to optimality is reported as a bound.
"""

from __future__ import annotations

import logging
import time

from onnxpart.certificate import LowerBound
from onnxpart.parallel import Runner
from onnxpart.remat.model import Instance

log = logging.getLogger(__name__)

METHOD = "checkmate-lp-relaxation"
NOTE = ("holds under: the input topological order's stages, any number of recomputations (so also under "
        "C_v); LP relaxation of the Checkmate MILP, rounded up to a whole duration quantum")
#: The LP has O(n²) columns and rows (G2, n = 250: 0.2 M columns, 0.7 M rows); above this many nodes it
#: would not be solved within a usual time limit, and building it would take gigabytes.
MAX_NODES = 600


def lp_job(instance: Instance, budget: float, time_limit: float, seed: int, delay: float) -> tuple:
    """In a worker: wait ``delay`` seconds, then solve the LP; -> (value, status, the LP's own seconds)."""
    from onnxpart.remat.checkmate import lp_lower_bound

    time.sleep(delay)
    start = time.perf_counter()
    try:
        value, status = lp_lower_bound(instance, budget, max(time_limit - delay, 0.1), seed)
    except Exception as exc:  # noqa: BLE001 - reported as "error", never as a bound
        value, status = None, f"error: {exc}"
    return value, status, time.perf_counter() - start


class BackgroundLpBound:
    """Start the LP in a worker of the shared :class:`~onnxpart.parallel.Runner` now, after ``delay``
    seconds, all within ``time_limit``; :meth:`result` collects it (or stops it). The delay leaves the CPU
    to CP-SAT on instances it solves at once (G1, fcn_8_vgg: proven optimal within two seconds), where the
    LP cannot add anything."""

    def __init__(self, instance: Instance, budget: float, time_limit: float, seed: int = 0,
                 delay: float = 0.0) -> None:
        self._start = time.perf_counter()
        self._runner = Runner(workers=1)
        self._runner.submit(lp_job, instance, budget, time_limit, seed, delay)

    def result(self, wait: float) -> LowerBound:
        """The bound if the LP is solved to optimality within ``wait`` more seconds; else an entry with no
        value. The worker is stopped either way."""
        value, status, seconds = None, "time_limit", time.perf_counter() - self._start
        deadline = time.monotonic() + max(wait, 0.0)
        try:
            while True:  # at least one poll: the LP may have finished while CP-SAT used all the time
                for event in self._runner.poll(min(0.2, max(deadline - time.monotonic(), 0.0))):
                    if event.kind == "done":
                        value, status, seconds = event.value  # seconds: the LP's own, after the delay
                    elif event.kind == "error":
                        status = "error"
                if not self._runner.busy or time.monotonic() >= deadline:
                    break
        finally:
            self.cancel()
        if status != "optimal":
            value = None
        log.info("checkmate LP relaxation: %s after %.1f s%s", status, seconds,
                 "" if value is None else f", duration ≥ {value:g}")
        return LowerBound(METHOD, value, "optimal" if value is not None else
                          ("infeasible" if status == "infeasible" else "time_limit" if status == "time_limit"
                           else "error"), "highs", round(seconds, 3), NOTE)

    def cancel(self) -> None:
        self._runner.shutdown(wait=False)
