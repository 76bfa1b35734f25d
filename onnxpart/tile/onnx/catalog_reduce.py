"""The layout catalog's reductions (see :mod:`onnxpart.tile.onnx.catalog`): ReduceSum, ReduceMean, ReduceMax,
ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, with
``axes`` (an attribute before opset 13/18, an input after), ``keepdims`` and ``noop_with_empty_axes``
as ONNX defines them; and ArgMax, ArgMin (one ``axis``, ``keepdims``), which shard like ReduceMax on its
kept dims (each index is within the unsharded reduced axis, so it is the global one).

* a dim that is not reduced may be sharded: S(d) -> S(d'), d' = d with keepdims, else d minus the
  reduced dims before it;
* a reduced dim may be sharded when the reduction is a sum of per-element terms (ReduceSum, ReduceL1,
  ReduceSumSquare): each device reduces its shard and the partial sums add up, S(d) -> P;
* ReduceSum and ReduceMean are linear: P -> P.

Sharded algorithms divide the op's compute by D; the axes input, if any, is read replicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxpart.tile.onnx.catalog import P, R, Algorithm, S

REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}
SUMS = {"ReduceSum", "ReduceL1", "ReduceSumSquare"}
LINEAR = {"ReduceSum", "ReduceMean"}


def reduced_axes(rank: int, axes: Sequence[int] | None, noop_with_empty_axes: bool) -> set[int]:
    """The reduced dims: ``axes`` normalized; all dims when none are given (unless noop_with_empty_axes)."""
    if not axes:
        return set() if noop_with_empty_axes else set(range(rank))
    return {a % rank for a in axes}


def reduce_algorithms(op_type: str, rank: int, reduced: set[int], keepdims: bool, n_inputs: int,
                      p: int) -> list[Algorithm]:
    """A reduction over ``reduced`` of a rank-``rank`` input (module docstring)."""
    rest = (R,) * (n_inputs - 1)
    algs = [Algorithm("replicated", (R,) + rest, R, 1)]
    for d in range(rank):
        if d not in reduced:
            out = d if keepdims else d - sum(a < d for a in reduced)
            algs.append(Algorithm(f"shard{d}", (S(d),) + rest, S(out), p))
        elif op_type in SUMS:
            algs.append(Algorithm(f"reduce{d}", (S(d),) + rest, P, p))
    if op_type in LINEAR:
        algs.append(Algorithm("partial", (P,) + rest, P, 1))
    return algs
