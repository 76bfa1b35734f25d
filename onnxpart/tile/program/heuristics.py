"""Fast tilings: the local solver of Section 6 and the greedy solver of Section 5 (Algorithms 1–4) of
"Matrix Tiling as Constrained Hypergraph Labeling".

* :func:`local` — one forward pass in program order; each expression takes its locally best feasible
  labeling given the tilings fixed so far (its not-yet-tiled matrices take that labeling's labels).
* :func:`greedy` — Algorithm 1 (connected components solved independently), Algorithm 2 (a component
  whose search space |S| ≤ α is searched exhaustively, else the inner greedy), Algorithm 3 (repeatedly
  take a bucket E'' of at most β edges in greedy order and tile its untiled matrices optimally given
  the partial tiling S) and Algorithm 4 (the greedy order: γ(e) = w(e)·min C(e | S) on the last layer,
  then layer by layer downwards γ(e) = w(e)·min C(e | S) + Σ_{e' ∈ cov(e)} γ(e'); sorted by γ
  descending; the bucket takes edges while γ(E'[i]) ≥ η·γ(E'[0])).

Readings where the paper leaves a choice (each one stated so a reader can check it):

* Algorithm 4's line 5 omits w(e); our C(e | S) always includes w(e), so lines 2 and 5 agree.
* Line 12's test is ``γ(E'[i]) ≥ η·γ(E'[0])`` (the printed ``>`` would return an empty bucket, and
  loop forever, when every γ is 0, which is the case before anything is tiled); E'[0] is always taken.
* Ties in γ go to the lower layer, then to program order.
* The bucket step (Algorithm 3, line 5) minimizes the conditional cost C(e | S ∪ S_E'') of *every*
  remaining edge touching the bucket's matrices, not only the bucket's own edges, so that an edge
  whose matrices are all tiled by this step is counted; matrices outside the bucket stay free.
* Edges whose matrices are all tiled leave E' (their cost is decided).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from onnxpart.errors import UserError
from onnxpart.tile.program.model import Instance
from onnxpart.tile.program.space import complete, conditional_cost, reduce_edges, search

log = logging.getLogger(__name__)

#: The bucket step enumerates at most this many labelings (β edges of 3 matrices, tau = 3: 3^(3β)).
MAX_BUCKET_SPACE = 1 << 21


@dataclass(frozen=True)
class GreedyOptions:
    beta: int = 2  # bucket size β (Algorithm 4)
    eta: float = 0.1  # weight ratio η (Algorithm 4)
    alpha: int = 10  # exhaustive threshold α on |S| (Algorithm 2); the paper's experiments used 10

    def check(self) -> None:
        if self.beta < 1:
            raise UserError(f"greedy: beta (bucket size) must be at least 1, got {self.beta}")
        if not 0.0 <= self.eta <= 1.0:
            raise UserError(f"greedy: eta (weight ratio) must be in [0, 1], got {self.eta}")
        if self.alpha < 0:
            raise UserError(f"greedy: alpha (exhaustive threshold) must be non-negative, got {self.alpha}")


def local(instance: Instance) -> np.ndarray:
    """The local solver: expressions in program order, each with its locally best feasible labeling
    (ties: the catalog's first) given the matrices tiled by earlier expressions."""
    x = np.full(instance.n, -1, dtype=np.int64)
    for i in range(instance.m):
        r = reduce_edges(instance, [i], x, [])[0]
        t = instance.arrays[i][1][int(np.argmin(r.base))]
        for v, label in zip(instance.arrays[i][0].tolist(), t.tolist()):
            if x[v] < 0:
                x[v] = label if label in instance.domains[v] else instance.domains[v][0]
    return complete(instance, x)


def greedy(instance: Instance, options: GreedyOptions = GreedyOptions()) -> np.ndarray:
    """Algorithms 1–2: each connected component exhaustively when |S| ≤ α, else by the inner greedy."""
    options.check()
    x = np.full(instance.n, -1, dtype=np.int64)
    layers = instance.layers()
    covers = instance.covers()
    for component in instance.components():
        edges = sorted({i for v in component for i in instance.incident[v]})
        if not edges:
            continue
        if instance.space_size(component) <= options.alpha:
            labels, _ = search(instance, edges, x, component)
            x[component] = labels
        else:
            _inner_greedy(instance, edges, x, layers, covers, options)
    return complete(instance, x)


def _inner_greedy(instance: Instance, edges: list[int], x: np.ndarray, layers: list[int],
                  covers: list[list[int]], options: GreedyOptions) -> None:
    """Algorithm 3 on one component, tiling ``x`` in place."""
    remaining = list(edges)
    while True:
        remaining = [i for i in remaining if (x[instance.arrays[i][0]] < 0).any()]
        if not remaining:
            return
        bucket = greedy_order(instance, remaining, x, layers, covers, options)
        free = sorted({int(v) for i in bucket for v in instance.arrays[i][0] if x[v] < 0})
        if instance.space_size(free) > MAX_BUCKET_SPACE:
            raise UserError(f"greedy: beta={options.beta} makes a bucket of {len(free)} matrices "
                            f"({instance.space_size(free):,} tilings); use a smaller beta")
        touching = sorted({j for v in free for j in instance.incident[v]})
        labels, _ = search(instance, touching, x, free)
        x[free] = labels
        taken = set(bucket)
        remaining = [i for i in remaining if i not in taken]


def gamma_scores(instance: Instance, remaining: list[int], x: np.ndarray, layers: list[int],
                 covers: list[list[int]]) -> dict[int, int]:
    """γ of Algorithm 4, lines 2–7, over the remaining edges E' given the partial tiling ``x``."""
    alive = set(remaining)
    gamma: dict[int, int] = {}
    for i in sorted(remaining, key=lambda j: (-layers[j], j)):  # last layer first
        gamma[i] = conditional_cost(instance, i, x) + sum(gamma[j] for j in covers[i] if j in alive)
    return gamma


def greedy_order(instance: Instance, remaining: list[int], x: np.ndarray, layers: list[int],
                 covers: list[list[int]], options: GreedyOptions) -> list[int]:
    """Algorithm 4: the first bucket E'' of the greedy order (at most β edges)."""
    gamma = gamma_scores(instance, remaining, x, layers, covers)
    order = sorted(remaining, key=lambda j: (-gamma[j], layers[j], j))
    bucket = [order[0]]
    for i in order[1:options.beta]:
        if gamma[i] < options.eta * gamma[order[0]]:
            break
        bucket.append(i)
    return bucket
