"""Heterogeneous mapping and scheduling (Ghannane 2023): map every op onto one device of a system of
heterogeneous devices and order it, minimizing one input's latency or maximizing a batch's throughput,
with a certified lower bound.

One dispatcher over two problems, as sibling packages with the same module names (``model``,
``simulator``, ``heuristics``, ``exact``, ``bounds``, ``split``, ``pieces``, ``emit``, ``check``):

* :mod:`.latency` — one input's makespan (Section 2.3 and 3.3 of the thesis);
* :mod:`.throughput` — a batch split into slices over the devices (Sections 3.1–3.2);
* :mod:`.system` — the devices, links, routing, the ``--system`` file and measured costs both read;
* :mod:`.common` — what both share: the costed :class:`Instance`, the method catalogue and a run's
  bookkeeping (the registry, the time budget and the runner are :mod:`onnxpart.strategy`'s), SA and EA over
  a fitness function, the output files' common parts.

``solve(instance, Options(objective=...))`` runs the objective's methods; ``OBJECTIVES[objective]`` is
its package (``solve``, ``METHODS``, ``pieces``, ``emit``, ``check``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from onnxpart.board import Board
from onnxpart.errors import UserError
from onnxpart.schedule import latency, throughput
from onnxpart.schedule.common.instance import Instance, from_graph
from onnxpart.schedule.common.solution import Solution
from onnxpart.schedule.latency.simulator import Schedule, simulate, validate
from onnxpart.schedule.system import Device, Link, System, load_system
from onnxpart.strategy import MethodResult

__all__ = ["Device", "Instance", "Link", "System", "from_graph", "load_system", "Schedule", "simulate",
           "validate", "Options", "Solution", "MethodResult", "solve", "METHODS", "OBJECTIVES"]

#: Each objective's package, by name.
OBJECTIVES = {"latency": latency, "throughput": throughput}
#: The method names, in tie-break order (both objectives offer the same ones).
METHODS = latency.METHODS.names


@dataclass(frozen=True)
class Options:
    methods: tuple[str, ...] | None = None  # None: the objective's ``DEFAULT_METHODS``
    objective: str = "latency"
    time_limit: float = 10.0  # total seconds: the searches (SA/EA) and the exact methods share them
    seed: int = 0
    iterations: int = 2000  # SA / EA fitness evaluations
    workers: int = 0  # CP-SAT threads of a whole-graph solve; SPLIT's processes; 0 = one per core
    lp_bound: bool = True  # the load LP among the simple bounds
    batch: int = 1  # throughput: inputs per batch (L), split into slices over the devices

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise UserError(f"unknown objective {self.objective!r}: use latency or throughput")
        if self.methods is None:  # frozen: the default depends on the objective, so it is set here
            object.__setattr__(self, "methods", OBJECTIVES[self.objective].DEFAULT_METHODS)
        unknown = set(self.methods) - set(METHODS)
        if unknown or not self.methods:
            raise UserError(f"unknown schedule method(s) {', '.join(sorted(unknown)) or '(none given)'}: "
                            f"use {', '.join(METHODS)}")
        if self.batch < 1:
            raise UserError("batch must be a positive integer")
        if not self.time_limit > 0:
            raise UserError("time limit must be positive")


def solve(instance: Instance, options: Options = Options(), board: Board | None = None) -> Solution:
    """Run ``options.methods`` on ``instance`` for ``options.objective`` (:func:`.latency.solve`,
    :func:`.throughput.solve`) and return the best validated schedule with every method's result and every
    proven lower bound. ``options.time_limit`` is the whole run's wall clock; ``board``
    (:class:`onnxpart.board.Board`) hears every improved schedule (``offer``) and every finished bound
    (``add``), which is what the command's progress bar shows."""
    options = replace(options, workers=options.workers or os.cpu_count() or 1)
    return OBJECTIVES[options.objective].solve(instance, options, board)
