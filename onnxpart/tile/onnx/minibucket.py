"""A proven lower bound on the step time where bucket elimination's order is too wide: mini-bucket elimination
(Dechter & Rish, "Mini-buckets: a general scheme for bounded inference", Journal of the ACM 50, 2003, §3).

Bucket elimination (:mod:`onnxpart.tile.onnx.elimination`) minimizes a variable v out of the sum of the
functions that mention it, building one table over all their other variables; a transformer stage on a 16- or
32-device mesh needs tables of 10⁷–10⁸ assignments there, and elimination refuses it. Mini-buckets keep every
table within ``max_table``: a bucket whose union scope is too large is split into mini-buckets Q₁ … Q_r (first
fit, largest functions first), and v is minimized out of each separately. Since

    min_v Σ_j Σ_{f ∈ Q_j} f  ≥  Σ_j min_v Σ_{f ∈ Q_j} f

at every assignment of the rest, each step keeps a function that is below the exact one, and the constant left
at the end is at most the network's minimum: the step time of every plan of the instance, fitting memory or
not (the network here is the min-sum one: memory is not modelled). With no bucket split it is the optimum.
Its cost is that of elimination with tables of at most ``max_table`` entries.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from onnxpart.tile.onnx.elimination import MAX_TABLE, Network
from onnxpart.tile.onnx.pareto import GiveUp


#: Up to this many variables an order over the table limit is still min-fill's (its fill graph has at most
#: n²/2 edges: ~100 MB); beyond, fewest neighbours first (:func:`_fewest_neighbours`).
MIN_FILL_VARIABLES = 1000


@dataclass(frozen=True)
class MiniBucketBound:
    value: float  # seconds: below every plan's step time
    splits: int  # buckets split in all (0: the value is the optimum)


def lower_bound(network: Network, deadline: float | None = None,
                max_table: int = MAX_TABLE) -> MiniBucketBound | None:
    """Mini-bucket elimination (module docstring) of ``network``'s step-time terms along a min-fill order (within
    ``max_table`` where one exists; over it on small networks, else fewest neighbours first); None past
    ``deadline`` (``time.monotonic()`` seconds)."""
    found = kept_function(network, (), deadline, max_table)
    return None if found is None else MiniBucketBound(float(found[0]), found[1])


def kept_function(network: Network, keep: tuple[int, ...], deadline: float | None = None, max_table: int = MAX_TABLE,
                  per_byte: Mapping[int, float] | None = None) -> tuple[np.ndarray, int] | None:
    """Every variable but ``keep`` minimized out by mini-bucket elimination: (a table over ``keep``'s values, in
    that order, below the network's least step time given them — plus, for each tensor variable v of
    ``per_byte``, ``per_byte[v]`` times its bytes per device —; the buckets split), None past ``deadline``.
    ``keep`` empty: the table is the bound itself (shape ())."""
    try:
        order = _order(network, keep, deadline, max_table)
        left, splits, _ = _eliminate(network.sizes, _terms(network, per_byte), order, max_table, deadline)
    except GiveUp:
        return None
    return _summed(tuple(keep), left, network.sizes), splits


def decoded(network: Network, pins: Mapping[int, int], deadline: float | None = None, max_table: int = MAX_TABLE,
            per_byte: Mapping[int, float] | None = None) -> tuple[dict[int, int], int] | None:
    """A plan of ``network`` with each variable of ``pins`` at its value there, least in step time plus
    ``per_byte`` (as in :func:`kept_function`) where no bucket is split, else the mini-bucket greedy plan
    (Dechter & Rish 2003, §4: each variable, last eliminated first, takes the value least for the functions in
    its bucket given the values already set): (every variable's value index, the buckets split); None past
    ``deadline``."""
    pinned = tuple(pins)
    try:
        order = _order(network, pinned, deadline, max_table) + list(pinned)
        terms = _terms(network, per_byte)
        terms += [((v,), np.where(np.arange(network.sizes[v]) == k, 0.0, math.inf)) for v, k in pins.items()]
        _, splits, buckets = _eliminate(network.sizes, terms, order, max_table, deadline, keep_buckets=True)
    except GiveUp:
        return None
    values: dict[int, int] = {}
    for v, bucket in zip(reversed(order), reversed(buckets)):
        total = np.zeros(network.sizes[v])
        for scope, table in bucket:
            index = tuple(slice(None) if u == v else values[u] for u in scope)
            total = total + table[index]
        values[v] = int(np.argmin(total))
    return values, splits


def _order(network: Network, keep: tuple[int, ...], deadline: float | None, max_table: int) -> list[int]:
    """Every variable but ``keep``: min-fill within ``max_table`` where such an order exists; over it on small
    networks, else fewest neighbours first."""
    return network.order(max_table, deadline, frozenset(keep)) or (
        network.order(math.inf, deadline, frozenset(keep)) if len(network.sizes) <= MIN_FILL_VARIABLES
        else _fewest_neighbours(network, keep))


def _terms(network: Network, per_byte: Mapping[int, float] | None) -> list[tuple[tuple, np.ndarray]]:
    """The network's terms as (scope, table) with ``per_byte[v]`` times v's bytes per device on v's unary term."""
    per_byte = per_byte or {}
    return [(tuple(scope), np.asarray(cost + (per_byte.get(scope[0], 0.0) * mem if len(scope) == 1 else 0.0),
                                      dtype=float).reshape([network.sizes[v] for v in scope]))
            for scope, mem, cost in network.terms]


def _fewest_neighbours(network: Network, keep: tuple[int, ...]) -> list[int]:
    """Every variable but ``keep``, fewest neighbours in the network first: an order for a network whose min-fill
    order has tables over the limit. (Min-fill with no limit adds the fill edges of every elimination: on a wide
    network a graph of millions of edges, when the mini-buckets keep far smaller scopes.)"""
    neighbours: dict[int, set] = {v: set() for v in range(len(network.sizes))}
    for scope, _, _ in network.terms:
        for v in scope:
            neighbours[v].update(scope)
    return sorted((v for v in neighbours if v not in keep), key=lambda v: (len(neighbours[v]), v))


def _eliminate(sizes: list[int], terms: list[tuple[tuple, np.ndarray]], order: list[int], max_table: int,
               deadline: float | None, keep_buckets: bool = False) -> tuple[list, int, list]:
    """The bucket pass over ``order``, each function waiting in the bucket of its scope's first variable there:
    (the functions over variables outside ``order`` that are left, the buckets split, each bucket's functions
    when ``keep_buckets``)."""
    position = {v: k for k, v in enumerate(order)}
    buckets: list[list] = [[] for _ in order]
    left: list = []

    def place(function: tuple) -> None:
        ranks = [position[v] for v in function[0] if v in position]
        (buckets[min(ranks)] if ranks else left).append(function)

    for term in terms:
        place(term)
    splits, kept = 0, []
    for k in range(len(order)):
        if deadline is not None and time.monotonic() > deadline:
            raise GiveUp
        minis = _partition(buckets[k], sizes, max_table)
        kept.append(buckets[k] if keep_buckets else None)
        buckets[k] = []
        splits += len(minis) - 1
        for scope, functions in minis:
            axes = (order[k],) + tuple(v for v in sorted(scope) if v != order[k])
            place((axes[1:], _summed(axes, functions, sizes).min(axis=0)))
    return left, splits, kept


def _partition(bucket: list, sizes: list[int], max_table: int) -> list[tuple[set, list]]:
    """First fit, largest table first: each mini-bucket's union scope has at most ``max_table`` assignments
    (a function over that alone is a mini-bucket of its own)."""
    minis: list[tuple[set, list]] = []
    for function in sorted(bucket, key=lambda f: -f[1].size):
        for scope, functions in minis:
            union = scope | set(function[0])
            if math.prod(sizes[v] for v in union) <= max_table:
                scope |= union
                functions.append(function)
                break
        else:
            minis.append((set(function[0]), [function]))
    return minis


def _summed(axes: tuple, functions: list, sizes: list[int]) -> np.ndarray:
    """Σ of ``functions`` (scope, table) as one table over ``axes``, by broadcasting."""
    total = np.zeros([sizes[v] for v in axes])
    for scope, table in functions:
        moved = np.transpose(table, sorted(range(len(scope)), key=lambda i: axes.index(scope[i])))
        total = total + moved.reshape([sizes[v] if v in scope else 1 for v in axes])
    return total
