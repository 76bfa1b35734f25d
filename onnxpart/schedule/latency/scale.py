"""Which methods and bounds fit a graph of this size in the time the run is given (issues 30 and 40), for
latency and for the throughput objective, which reads the same rule (its list baselines on their own share
of the run: :func:`onnxpart.schedule.throughput._too_big`).

On a 20,000-op random DAG with ``--time-limit 5`` the methods that cannot pay for themselves took the
run to 34 s: CP-SAT spent 9.3 s building and presolving a model whose bound stayed 0, the load and path
LPs stopped at their limits with nothing proven (1.8 and 5.1 s for 1.25 s), HEFT took 1.5–5 s and SA
and EA spent their shares on 1–6 evaluations of 0.15–0.3 s each; the thesis MILP and MILP-SPLIT start
from the transitive closure, an n × n table (400 MB at 20,000 ops; the MILP's disjunctions are O(n²)
rows too). :func:`skip_reason` says when one is skipped — a rule on the op count and the seconds the
solve is given (the LPs: their share), with a ceiling on the op count for the whole-graph models,
never on how fast anything ran, so the same budget skips the same things (the command's budget is what
loading left of ``--time-limit``, so a slow load can skip more) — and the caller lists it with status
``skipped`` and the reason, as a method result (and, for a solver, as a lower bound that proved
nothing). MET, the first answer, is never skipped (0.2–0.8 s at 20,000 ops). The rates are measured on
this project's 2-core machine under load (BENCHMARKS.md, "schedule at scale"): every benchmark model (a
few hundred ops) stays below them at any ``--time-limit`` of a second or more.
"""

from __future__ import annotations

#: Ops per second of the run's time limit (of its share for the LPs) for which each method is run: the
#: LPs reached their optimum (or a bound) on 2,000 ops within 1.25 s and not on 5,000; CP-SAT built its
#: model of 5,000 ops in 4 s; Greedy took 0.3–1.2 s at 20,000 ops, HEFT and CPoP 1.1–1.2 s at load 4.8
#: once the insertion search made its long scans one numpy call (2.7–2.9 s before; ``Timeline`` of
#: :mod:`onnxpart.schedule.common.list_scheduling`): Greedy's rate, a 2× margin for load, and ``lagrange``'s
#: (0.4 s at 20,000 ops); an SA or EA evaluation 0.15–0.3 s (they need hundreds); the thesis MILP has a
#: row pair per pair of unordered ops; MILP-SPLIT's modules, channels and multi-channel bound took 3.5 s
#: on a 2,000-op DAG given 0.5 s (its share of ``--time-limit 0.1``, the solve 5 s past the limit). The
#: throughput objective's bGreedy, bHEFT and bCPoP took 2.3, 3.3 and 2.5 s on a 20,000-op chain at a batch of 8
#: on CPU + T4 + A100 (9 splits an op; past its share one stops there), an SA or EA evaluation 0.33 s, and its
#: CP-SAT batch model 9 s to build.
OPS_PER_SECOND = {"lp": 1000.0, "greedy": 8000.0, "heft": 8000.0, "cpop": 8000.0, "lagrange": 8000.0,
                  "sa": 500.0, "ea": 500.0, "cpsat": 500.0, "exact": 500.0, "milp": 50.0, "split": 1000.0}
#: Most ops of a whole-graph model at any time limit: their cost grows faster than the op count (at
#: ``--time-limit 60`` the LPs on 10,000 ops and CP-SAT on 20,000 took the solve 19–24 s past its limit,
#: CP-SAT on a 5,000-op chain 52 s past its 28 s share; on 2,000 ops both kept to their shares).
MAX_OPS = {"lp": 5000, "cpsat": 2000, "exact": 2000, "milp": 1000}
#: Most ops of a method that builds the n × n transitive closure (:meth:`Instance.ancestors_closure`):
#: 16 MB of booleans at 4,000 ops.
DENSE_OPS = 4000
#: The methods that build the closure.
DENSE = ("milp", "split")


def skip_reason(what: str, ops: int, seconds: float) -> str | None:
    """Why the method or bound ``what`` (a key of :data:`OPS_PER_SECOND` or :data:`DENSE`) is not run on
    ``ops`` ops in ``seconds``, or None when it is."""
    if what in DENSE and ops > DENSE_OPS:
        return f"skipped: {ops} ops > {DENSE_OPS}, its n × n reachability table would not fit in linear memory"
    if ops > MAX_OPS.get(what, ops):
        return f"skipped: {ops} ops > {MAX_OPS[what]}, the most its model is built for at any time limit"
    most = int(OPS_PER_SECOND[what] * seconds) if what in OPS_PER_SECOND else ops
    if ops > most:
        return (f"skipped: {ops} ops > {most}, the most it is run on in {seconds:.3g} s "
                f"({OPS_PER_SECOND[what]:g} ops a second)")
    return None
