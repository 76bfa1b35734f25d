"""Searching over topological orders (Section 4.2 and Appendices B.1, C.1).

Every partition with an acyclic quotient graph is an optimal slicing of *some* topological order
(Theorem 4.3), and every topological order is what Kahn's algorithm returns for *some* node priorities
(Algorithm 3). So the search is over priority vectors x ∈ [0, 1]ⁿ, each decoded by Kahn + SliceGraph
(Algorithm 2, :class:`Decoder`):

* warm starts: the file's order and a depth-first order (Kahn with a stack);
* ``mla-weighted`` seeding (Appendix C.1): a BRKGA run minimizing Σ io(u, v)·|π⁻¹(u) − π⁻¹(v)|;
* random priorities (``random-T``);
* BRKGA (Gonçalves & Resende 2011): elite and mutant fractions, biased crossover, generations.

Everything is seeded; with the same seed and no time limit reached, the same orders are explored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.partition.model import Instance
from onnxpart.partition.runs import DENSE_LIMIT, best_slicing, best_value
from onnxpart.partition.segments import Slicing

log = logging.getLogger(__name__)


class Dag:
    """An instance's DAG (:attr:`Instance.dag <onnxpart.partition.model.Instance.dag>`) as the search sees
    it: random keys decode **highest key first** (Algorithm 3), i.e. the core's Kahn on negated keys."""

    def __init__(self, inst: Instance):
        self.dag = inst.dag

    def kahn(self, priority: Sequence[float]) -> np.ndarray:
        """Algorithm 3: Kahn's algorithm, always taking the available node of highest priority
        (ties: lower index first)."""
        return self.dag.topological_order(-np.asarray(priority, dtype=float))

    def dfs_order(self) -> np.ndarray:
        """Depth-first topological order: Kahn with a stack (follow a chain while it lasts)."""
        return self.dag.dfs_order()


def keys_of_order(order: Sequence[int]) -> np.ndarray:
    """Priorities for which Kahn's algorithm returns exactly ``order`` (earlier = higher)."""
    n = len(order)
    keys = np.empty(n)
    keys[np.asarray(order, dtype=np.int64)] = 1.0 - np.arange(n) / max(n, 1)
    return keys


class Decoder:
    """Algorithm 2 (BrkgaSortAndSliceDecoder): priorities -> Kahn order -> SliceGraph value, memoized
    per order; on long orders (where the value comes with its slicing) the best slicing is kept too, so
    asking for it again costs nothing."""

    def __init__(self, inst: Instance, k: int):
        self.inst = inst
        self.k = k
        self.dag = Dag(inst)
        self.cache: dict[bytes, float] = {}
        self.best: tuple[bytes, Slicing] | None = None
        self.evaluations = 0

    def order(self, keys: Sequence[float]) -> np.ndarray:
        return self.dag.kahn(keys)

    def value(self, order: np.ndarray) -> float:
        key = order.tobytes()
        if key not in self.cache:
            self.evaluations += 1
            if self.inst.n <= DENSE_LIMIT:
                self.cache[key] = best_value(self.inst, order, self.k)
            else:
                self._keep(key, best_slicing(self.inst, order, self.k))
        return self.cache[key]

    def slicing(self, order: np.ndarray) -> Slicing:
        key = order.tobytes()
        if self.best is not None and self.best[0] == key:
            return self.best[1]
        return self._keep(key, best_slicing(self.inst, order, self.k))

    def _keep(self, key: bytes, slicing: Slicing) -> Slicing:
        self.cache[key] = slicing.value
        if self.best is None or slicing.value < self.best[1].value:
            self.best = key, slicing
        return slicing


@dataclass(frozen=True)
class BrkgaOptions:
    """Biased random-key GA parameters (Gonçalves & Resende 2011; paper's brkga-10000: 100 × 100)."""

    population: int = 100
    generations: int = 100
    elite: float = 0.2  # fraction of the population kept as elite
    mutants: float = 0.15  # fraction replaced by fresh random keys each generation
    rho: float = 0.7  # probability an offspring gene comes from its elite parent


def brkga(fitness: Callable[[np.ndarray], float], n: int, options: BrkgaOptions, rng: np.random.Generator,
          seeds: Sequence[np.ndarray] = (), stop: Callable[[float], bool] = lambda best: False,
          on_generation: Callable[[int, float, np.ndarray], None] | None = None) -> tuple[float, np.ndarray]:
    """Minimize ``fitness`` over keys in [0, 1]ⁿ. ``seeds`` enter the first population; ``stop(best)`` is
    checked after every evaluation (time limit, closed gap). Returns the best value and its keys."""
    size = max(options.population, 2)
    n_elite = min(max(1, int(round(options.elite * size))), size - 1)
    n_mutant = min(int(round(options.mutants * size)), size - n_elite)
    population = rng.random((size, n))
    for i, seed in enumerate(list(seeds)[:size]):
        population[i] = seed
    scores = _scores(fitness, population, stop)
    for generation in range(options.generations):
        rank = np.argsort(scores, kind="stable")
        population, scores = population[rank], scores[rank]
        if on_generation is not None:
            on_generation(generation, float(scores[0]), population[0])
        if stop(float(scores[0])) or generation == options.generations - 1:
            break
        n_children = size - n_elite - n_mutant
        elite_parent = population[rng.integers(0, n_elite, n_children)]
        other_parent = population[rng.integers(n_elite, size, n_children)] if size > n_elite else elite_parent
        inherit = rng.random((n_children, n)) < options.rho
        children = np.where(inherit, elite_parent, other_parent)
        mutants = rng.random((n_mutant, n))
        fresh = np.concatenate([children, mutants])
        population = np.concatenate([population[:n_elite], fresh])
        scores = np.concatenate([scores[:n_elite], _scores(fitness, fresh, stop)])
    best = int(np.argmin(scores))
    return float(scores[best]), population[best]


def _scores(fitness: Callable[[np.ndarray], float], members: np.ndarray, stop: Callable[[float], bool]) -> np.ndarray:
    """``fitness`` of each member in turn, +inf for those left once ``stop(best so far)`` says so: on an
    LLM-sized graph one population is a minute of decoding, which the time limit must be able to cut."""
    scores = np.full(len(members), np.inf)
    for i, member in enumerate(members):
        scores[i] = fitness(member)
        if stop(float(scores[:i + 1].min())):
            break
    return scores


def mla_weighted_order(inst: Instance, dag: Dag, rng: np.random.Generator, options: BrkgaOptions,
                       stop: Callable[[float], bool]) -> np.ndarray:
    """Appendix C.1's ``mla-weighted``: a topological order minimizing Σ io(u,v)·|π⁻¹(u) − π⁻¹(v)| (BRKGA
    over Kahn priorities), used as a zero-shot seed for MTPP."""
    counts = np.diff(inst.cons_ptr)
    src = np.repeat(inst.producer, counts)
    weight = np.repeat(inst.transfer, counts)
    dst = inst.cons_idx
    position = np.empty(inst.n, dtype=np.int64)

    def arrangement(keys: np.ndarray) -> float:
        position[dag.kahn(keys)] = np.arange(inst.n)
        return float((weight * np.abs(position[src] - position[dst])).sum())

    _, keys = brkga(arrangement, inst.n, options, rng, seeds=[keys_of_order(np.arange(inst.n))], stop=stop)
    return dag.kahn(keys)
