"""Simulated annealing and the biased (1+1) EA (Section 4.2), written once for both objectives.

A *state* gives every op a choice — its device (latency) or its split of the batch over the devices
(throughput) —, ``choices[i]`` lists op ``i``'s options and ``fitness(state)`` is the makespan of the
state's list schedule (``inf`` for an infeasible one). Both searches are seeded and run a fixed number
of fitness evaluations, so the same seed gives the same answer; the wall-clock ``time_limit`` is only a
safety cap that ends a run early.

* **SA** (Kirkpatrick et al., 1983): move one random op to another random option; accept a worse
  fitness ``f'`` with probability ``exp(-(f'-f)/(T·f0))``, ``T`` cooling geometrically from ``t_start``
  to ``t_end`` (relative to the initial fitness ``f0``).
* **Biased (1+1) EA** (Droste et al., 2002; biased: started from a good state, Section 4.2): each op
  moves to another random option with probability ``1/n`` (at least one moves); the child replaces the
  parent when it is no worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import monotonic as now
from typing import Any

import numpy as np



@dataclass
class SearchResult:
    """``best``: the first state of least fitness met; ``last``: the last accepted one (for the EA, which
    accepts no worse child, of least fitness too: the latest of equal ones); ``evaluations`` of the
    fitness, ``seconds`` spent."""

    best: list
    last: list
    evaluations: int
    seconds: float


def search(method: str, fitness: Callable[[list], float], init: Sequence[Any], choices: Sequence[Sequence[Any]],
           iterations: int = 2000, seed: int = 0, time_limit: float = math.inf, t_start: float = 0.05,
           t_end: float = 1e-4) -> SearchResult:
    """SA (``method="sa"``) or the biased (1+1) EA (``"ea"``) from ``init`` (module docstring)."""
    t0 = now()
    rng = np.random.default_rng(seed)
    current = list(init)
    f = f0 = fitness(current)
    best, fbest = list(current), f
    movable = [i for i in range(len(choices)) if len(choices[i]) > 1]
    scale = f0 if math.isfinite(f0) and f0 > 0 else 1.0
    evals = 1
    for it in range(iterations if movable else 0):
        if now() - t0 > time_limit:
            break
        child = list(current)
        for i in _flips(method, movable, rng):
            options = [c for c in choices[i] if c != current[i]]
            child[i] = options[int(rng.integers(len(options)))]
        fc = fitness(child)
        evals += 1
        if method == "sa":
            temp = t_start * (t_end / t_start) ** (it / max(1, iterations - 1))
            accept = fc <= f or (math.isfinite(fc) and rng.random() < math.exp(-(fc - f) / (temp * scale)))
        else:
            accept = fc <= f
        if accept:
            current, f = child, fc
            if f < fbest:
                best, fbest = list(current), f
    return SearchResult(best, current, evals, now() - t0)


def _flips(method: str, movable: list[int], rng: np.random.Generator) -> list[int]:
    """The ops a step moves: one at random (SA); each with probability ``1/n``, at least one (EA)."""
    if method == "sa":
        return [movable[int(rng.integers(len(movable)))]]
    return [i for i in movable if rng.random() < 1.0 / len(movable)] or [movable[int(rng.integers(len(movable)))]]
