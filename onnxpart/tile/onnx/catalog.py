"""The ONNX side's layout catalog: sharding layouts on a 1-D mesh of ``p`` devices, the algorithms each op
type offers, and collective costs. Pure data and functions; :mod:`onnxpart.tile.onnx.op_catalog` picks them
per ONNX node and :mod:`onnxpart.tile.onnx.build` applies them to an OpGraph. This module holds the layouts,
the collectives and the matmul (MatMul, Gemm, Einsum), elementwise and normalization families;
:mod:`~onnxpart.tile.onnx.catalog_conv`, :mod:`~onnxpart.tile.onnx.catalog_shape` and
:mod:`~onnxpart.tile.onnx.catalog_reduce` hold the others. :mod:`onnxpart.tile.onnx.verify` executes them.

This is the ONNX analogue of the matrix programs' ``row``/``col``/``block`` labels and feasible tilings
(:mod:`onnxpart.tile.program.program`): a tensor's label is a :class:`Layout`, an op's feasible labeling is an
:class:`Algorithm` (input layouts -> output layout, with a compute divisor and the collective it
performs itself), and a retiling is a sequence of these collectives (:func:`reshard` per mesh axis), planned and
priced on a mesh by :mod:`onnxpart.tile.onnx.resharding`.

Layouts: ``R`` replicated; ``S(d)`` sharded along tensor dimension ``d`` (ceil(size/p) per device);
``P`` partial: every device holds a full-shape addend and the value is their sum (what a
contraction-sharded MatMul leaves behind).

Collectives on a ring of ``p`` devices, ``n`` = bytes of the *full* tensor, ``a`` = per-step latency (s),
``B`` = link bandwidth (bytes/s) — the standard ring costs (Thakur, Rabenseifner & Gropp, "Optimization
of Collective Communication Operations in MPICH", IJHPCA 2005; Patarasuk & Yuan 2009 for all-reduce):

    all-gather      (p-1)·a + (p-1)/p · n/B
    reduce-scatter  (p-1)·a + (p-1)/p · n/B
    all-reduce      2(p-1)·a + 2(p-1)/p · n/B          (reduce-scatter then all-gather)
    all-to-all      (p-1)·a + (p-1)/p² · n/B           (pairwise exchange: each device keeps 1/p of its n/p)

Resharding (source -> target): same -> free; R -> S(d), R -> P, S(d) -> P are local (slice, or keep the
shard and treat the rest as zeros) and free; S(d) -> R all-gather; S(d) -> S(e) all-to-all; P -> R
all-reduce; P -> S(d) reduce-scatter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.errors import UserError

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


@dataclass(frozen=True, order=True)
class Layout:
    kind: str  # "R" | "S" | "P"
    dim: int | None = None  # the sharded dimension for "S"

    def __str__(self) -> str:
        return f"S({self.dim})" if self.kind == "S" else self.kind


R = Layout("R")
P = Layout("P")


def S(dim: int) -> Layout:  # noqa: N802 - the catalog's notation
    return Layout("S", dim)


@dataclass(frozen=True)
class Algorithm:
    """One way to run an op: the layout it reads each input in, the layout it writes, how much of the
    op's single-device compute time each device spends (``1/divisor``), and a collective it runs itself
    (None for all of the catalog's algorithms so far: collectives happen when a consumer reshards)."""

    name: str
    inputs: tuple[Layout, ...]
    output: Layout
    divisor: int  # 1 or p
    collective: str | None = None


@dataclass(frozen=True)
class Mesh:
    devices: int  # p
    latency: float = 5e-6  # seconds per ring step
    bandwidth: float = 100e9  # bytes/second per link


def layouts(shape: Sequence[int], p: int) -> tuple[Layout, ...]:
    """The layouts a tensor may take: R, P, and S(d) for every dimension with at least p elements."""
    return (R, P) + tuple(S(d) for d, size in enumerate(shape) if size >= p > 1)


def collective_volume(kind: str, nbytes: float, p: int) -> float:
    """Bytes each device of a ring of ``p`` receives in one collective over ``nbytes`` (module docstring's
    bandwidth terms times B): what :mod:`onnxpart.tile.onnx.exchange` moves, and what :func:`collective_time`
    prices."""
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}: use {', '.join(COLLECTIVES)}")
    if p <= 1 or nbytes <= 0:
        return 0.0
    return _fraction(kind, p) * nbytes


def collective_time(kind: str, nbytes: float, mesh: Mesh) -> float:
    """Seconds for one collective over the whole mesh (module docstring's ring formulas): its ring steps'
    latency plus :func:`collective_volume` over the link bandwidth."""
    p = mesh.devices
    volume = collective_volume(kind, nbytes, p)
    if volume <= 0:
        return 0.0
    return _ring_steps(kind, p) * mesh.latency + volume / mesh.bandwidth


def collective_times(kind: str, nbytes: np.ndarray, mesh: Mesh) -> np.ndarray:
    """:func:`collective_time` of many sizes at once, float for float the same (the same operations in the
    same order)."""
    p = mesh.devices
    volume = _fraction(kind, p) * nbytes
    moved = (volume > 0) & (nbytes > 0) & (p > 1)
    return np.where(moved, _ring_steps(kind, p) * mesh.latency + volume / mesh.bandwidth, 0.0)


def _fraction(kind: str, p: int) -> float:
    """The part of the bytes each of ``p`` devices receives (the ring formulas' bandwidth terms)."""
    share = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 1.0 / p}[kind]
    return share * (p - 1) / p


def _ring_steps(kind: str, p: int) -> int:
    return 2 * (p - 1) if kind == "all-reduce" else p - 1


def reshard(src: Layout, dst: Layout) -> str | None:
    """The collective that turns ``src`` into ``dst`` (None: free, local)."""
    if src == dst or dst == P or src == R:
        return None
    if src.kind == "S":
        return "all-gather" if dst == R else "all-to-all"
    return "all-reduce" if dst == R else "reduce-scatter"  # src is P


def matmul_algorithms(rank_a: int, rank_b: int, p: int) -> list[Algorithm]:
    """ONNX MatMul (numpy semantics, ranks ≥ 2 here): A[..., m, k] @ B[..., k, n] -> C[..., m, n].
    Replicated; A's rows sharded (C's rows); B's columns sharded (C's columns); the contraction k
    sharded in both (C partial, P); a batch dimension shared by A, B and C sharded in all three."""
    if rank_a < 2 or rank_b < 2:
        raise UserError("matmul_algorithms: 1-D MatMul operands are not in the catalog yet")
    rc = max(rank_a, rank_b)
    algs = [Algorithm("replicated", (R, R), R, 1),
            Algorithm("rows", (S(rank_a - 2), R), S(rc - 2), p),
            Algorithm("cols", (R, S(rank_b - 1)), S(rc - 1), p),
            Algorithm("contraction", (S(rank_a - 1), S(rank_b - 2)), P, p)]
    for d in range(rc - 2):  # batch dims, aligned from the right
        da, db = d - (rc - rank_a), d - (rc - rank_b)
        a = S(da) if da >= 0 else R
        b = S(db) if db >= 0 else R
        algs.append(Algorithm(f"batch{d}", (a, b), S(d), p))
    return algs


def einsum_algorithms(equation: str, p: int) -> list[Algorithm] | None:
    """ONNX Einsum with an explicit output (``"bij,bjk->bik"``): Y[out] = Σ over the letters not in the
    output of Π_i X_i[term_i]. Replicated; for a letter of the output, every input holding it sharded
    along it and the others replicated -> Y S(its position); for a summed letter, likewise -> P (each
    device sums its range of the letter); one input P and the others R -> P (Einsum is linear in each
    input). None (not in the catalog) for an implicit output, an ellipsis, or a letter repeated within
    one term (a diagonal)."""
    if "->" not in equation or "." in equation:
        return None
    lhs, out = equation.replace(" ", "").split("->")
    terms = lhs.split(",")
    if any(len(set(t)) != len(t) for t in terms + [out]):
        return None
    n = len(terms)
    algs = [Algorithm("replicated", (R,) * n, R, 1)]
    for letter in dict.fromkeys("".join(terms)):
        ins = tuple(S(t.index(letter)) if letter in t else R for t in terms)
        algs.append(Algorithm(f"shard-{letter}", ins, S(out.index(letter)) if letter in out else P, p))
    algs += [Algorithm(f"partial{i}", tuple(P if j == i else R for j in range(n)), P, 1) for i in range(n)]
    return algs


def gemm_algorithms(trans_a: bool, trans_b: bool, p: int, c_shape: Sequence[int] | None = None,
                    out_shape: Sequence[int] | None = None) -> list[Algorithm]:
    """ONNX Gemm: Y = alpha·A'·B' + beta·C with A' = Aᵀ if transA (2-D). The bias C (``c_shape``,
    broadcast to ``out_shape``) is read like an elementwise input: sharded where Y is and C has that
    dimension in full, else replicated; with a P output it is read as P (device 0 adds it, the others add
    zeros: R -> P is free), so the partial sums add up to one bias."""
    dim_m, dim_k_a = (1, 0) if trans_a else (0, 1)
    dim_k_b, dim_n = (1, 0) if trans_b else (0, 1)
    algs = [Algorithm("replicated", (R, R), R, 1),
            Algorithm("rows", (S(dim_m), R), S(0), p),
            Algorithm("cols", (R, S(dim_n)), S(1), p),
            Algorithm("contraction", (S(dim_k_a), S(dim_k_b)), P, p)]
    if c_shape is None:
        return algs
    if out_shape is None:
        raise ValueError("gemm_algorithms: out_shape is needed with c_shape")
    out = []
    for a in algs:
        bias = _aligned(c_shape, out_shape, a.output.dim) if a.output.kind == "S" else a.output
        out.append(Algorithm(a.name, a.inputs + (bias,), a.output, a.divisor))
    return out


def _aligned(shape: Sequence[int], out_shape: Sequence[int], d: int) -> Layout:
    """How a broadcasting input is read when the output is S(d): S of its aligned dimension when it
    has that dimension in full, else R (it broadcasts there)."""
    k = d - (len(out_shape) - len(shape))
    return S(k) if k >= 0 and shape[k] == out_shape[d] else R


def with_replicated_rest(algs: Sequence[Algorithm], n: int) -> list[Algorithm]:
    """``algs`` on ``n`` input slots: the first ones as they read them, every further slot (shapes, scale
    and bias vectors, a dtype donor) replicated."""
    return [Algorithm(a.name, a.inputs[:n] + (R,) * (n - len(a.inputs)), a.output, a.divisor, a.collective)
            for a in algs]


def elementwise_algorithms(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]], p: int,
                           linear: str | None = None) -> list[Algorithm]:
    """Broadcasting elementwise ops: replicated, or the output sharded along d with each input sharded
    along its aligned dimension — or replicated where it broadcasts (size 1 or missing there).
    ``linear``: ``"sum"`` (Add/Sub: partials add up, all inputs P -> P) or ``"scale"`` (Mul/Div by a
    replicated factor: one input P, the others R -> P)."""
    r = len(out_shape)
    algs = [Algorithm("replicated", tuple(R for _ in in_shapes), R, 1)]
    for d in range(r):
        if out_shape[d] < p:
            continue
        ins = tuple(_aligned(shape, out_shape, d) for shape in in_shapes)
        algs.append(Algorithm(f"shard{d}", ins, S(d), p))
    if linear == "sum":
        algs.append(Algorithm("partial-sum", tuple(P for _ in in_shapes), P, 1))
    elif linear == "scale":
        for i in range(len(in_shapes)):
            ins = tuple(P if j == i else R for j in range(len(in_shapes)))
            algs.append(Algorithm(f"partial-scale{i}", ins, P, 1))
    return algs


def transpose_algorithms(perm: Sequence[int], p: int) -> list[Algorithm]:
    """Transpose: the output's dimension i is the input's perm[i], so S(perm[i]) -> S(i); R and P keep."""
    algs = [Algorithm("replicated", (R,), R, 1), Algorithm("partial", (P,), P, 1)]
    algs += [Algorithm(f"shard{i}", (S(d),), S(i), p) for i, d in enumerate(perm)]
    return algs


def normalization_algorithms(rank: int, axis: int, op: str, p: int) -> list[Algorithm]:
    """Softmax (one axis) and LayerNormalization (axes ``axis..rank-1``; scale and bias replicated):
    replicated, or sharded along any dimension that is not normalized (sharding a normalized axis
    needs a statistics all-reduce; not in the catalog yet)."""
    axis = axis % rank
    normalized = {axis} if op == "Softmax" else set(range(axis, rank))
    extra = (R, R) if op == "LayerNormalization" else ()
    algs = [Algorithm("replicated", (R,) + extra, R, 1)]
    algs += [Algorithm(f"shard{d}", (S(d),) + extra, S(d), p) for d in range(rank) if d not in normalized]
    return algs
