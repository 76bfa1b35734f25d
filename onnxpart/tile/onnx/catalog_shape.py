"""The layout catalog's data-movement family (see :mod:`onnxpart.tile.onnx.catalog`): Reshape, Flatten,
Squeeze, Unsqueeze, Concat, Split, Slice, Pad, Tile, Resize/Upsample, Expand, Gather, GatherElements,
GatherND and ConstantOfShape. Each is linear
in its data input (Pad with a nonzero constant excepted, below), so a partial input gives a partial output
(P -> P); every other input (shapes, axes, starts, pads, scales, indices) is read replicated unless
stated.

Reshape family: in row-major order a tensor of shape ``[pre, n, post]`` (``pre`` the product of the dims
before ``d``) sharded along ``d`` gives device k the flat positions ``f`` with
``(f mod n·post) div (n·post/D) = k``. A reshape keeps the flat order, so the output is S(d') exactly
when the product of the output dims before ``d'`` equals ``pre`` (then ``m·post' = n·post``) and both
``n`` and ``m`` divide by D — the sharded dim leads its group of merged or split dims and the shards
stay contiguous. Locally the node runs on the shard; only Reshape's shape input is rewritten to the
local output shape (:mod:`onnxpart.tile.onnx.verify`).

Concat, Split and Slice: sharded along a dim they do not touch -> sharded there (every output of a
Split alike). Slice's touched axes come from its ``axes`` (attribute, constant input, or all of
``starts``'s length when omitted).

Pad (ONNX Pad-18: ``pads`` [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over ``axes``, an attribute
before opset 11), Tile (output dim d = input dim d · repeats[d]) and Resize/Upsample (output dim d from
``scales[d]`` or ``sizes[d]``) are per-index along every dim they leave alone: a dim with zero pads on
both sides, with repeats 1, or resized with scale exactly 1 (its output size equal to its input size and
scale 1 when ``scales`` is given) may be sharded, S(d) -> S(d) — e.g. batch and channels of an NCHW
image upsampled in H and W. The pads, and the scales when the sizes are not given, must be known
constants. Resize is left out in ``tf_crop_and_resize`` (the roi moves every dim) and
``tf_half_pixel_for_nn`` (scale 1 maps index i to i + 1/2, which ``round_prefer_ceil`` sends to i + 1)
modes, and with ``sizes`` under a ``keep_aspect_ratio_policy`` other than ``stretch`` (one scale for all
axes). Tile and Resize are linear, so P -> P; Pad too in its edge, reflect and wrap modes and with a
zero (or omitted) constant value, not with another constant (each partial would add it).

Expand (output = input broadcast to ``shape``, numpy rules): the output sharded along d with the input
read like an elementwise op's (:func:`onnxpart.tile.onnx.catalog.elementwise_algorithms`: sharded along its
aligned dim when it has d in full, replicated where it broadcasts); linear, P -> P. Locally the shape
input is rewritten to the local output shape, as for Reshape.

Shape and Size read only their input's shape, which every device knows whole (shapes are static here):
the input in any layout (R, P, S(d)) -> R, no collective; locally the node's value is that static shape
(:mod:`onnxpart.tile.onnx.verify`), not the shard's.

Gather (``axis`` a, data rank r, indices rank q; output = data[:a] + indices + data[a+1:]):

* ``rows``: data S(a) (an embedding table split by rows), indices R -> P: device k looks up the
  indices that fall in its rows at their offset and writes zeros for the others (a local rewrite);
* ``data{j}``: data S(j), j ≠ a (e.g. the embedding's columns), indices R -> S(j) or S(j+q-1) after a;
* ``indices{i}``: data R, indices S(i) -> S(a+i).

GatherElements (``axis`` a; data and indices of one rank r, output shaped like indices: out[i] = data[i with
i_a replaced by indices[i]]): ``indices``: data R, indices S(a) -> S(a) (each device looks up its own
positions; only along a, where the index is the value, not the position); ``shard{d}``: data S(d), indices
S(d) -> S(d) for d ≠ a where data and indices have the same size (each device's positions pick from its own
rows); linear in data, P -> P.

GatherND (``batch_dims`` b; indices [..., k], output = indices.shape[:-1] + data.shape[b + k:]):
``batch{d}``: data S(d), indices S(d) -> S(d) for a batch dim d < b; ``indices{d}``: data R, indices S(d) ->
S(d) for b ≤ d < rank(indices) − 1; ``data{d}``: data S(d), indices R -> S(rank(indices) − 1 + d − b − k) for a
dim d ≥ b + k the lookup keeps whole; linear in data, P -> P.

ConstantOfShape (one shape input, computed at run time): the output in any S(d), each device filling its
own shard; locally the shape input is rewritten to the local output shape (:mod:`onnxpart.tile.onnx.verify`).

Every sharded algorithm divides the op's compute by D.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from onnxpart.tile.onnx.catalog import P, R, Algorithm, S, elementwise_algorithms, with_replicated_rest

RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def reshape_dim(in_shape: Sequence[int], out_shape: Sequence[int], d: int, p: int) -> int | None:
    """The output dim that S(d) of the input becomes through a reshape (module docstring); None when the
    shards would not stay contiguous or a size does not divide by ``p``."""
    pre = math.prod(in_shape[:d])
    if in_shape[d] % p:
        return None
    for e, size in enumerate(out_shape):
        if math.prod(out_shape[:e]) == pre and size % p == 0 and size >= p:
            return e
    return None


def reshape_algorithms(in_shape: Sequence[int], out_shape: Sequence[int], n_inputs: int, p: int) -> list[Algorithm]:
    """Reshape/Flatten/Squeeze/Unsqueeze: data plus ``n_inputs - 1`` replicated shape or axes inputs."""
    rest = (R,) * (n_inputs - 1)
    algs = [Algorithm("replicated", (R,) + rest, R, 1), Algorithm("partial", (P,) + rest, P, 1)]
    for d in range(len(in_shape)):
        e = reshape_dim(in_shape, out_shape, d, p)
        if e is not None:
            algs.append(Algorithm(f"shard{d}", (S(d),) + rest, S(e), p))
    return algs


def untouched_algorithms(rank: int, touched: set[int], n_data: int, n_rest: int, p: int,
                         linear: bool = True) -> list[Algorithm]:
    """Concat (``n_data`` inputs), Split, Slice, Pad, Tile and Resize (one data input, ``n_rest``
    constant inputs): every data input sharded along a dim the op does not touch, the output(s) likewise;
    P -> P when the op is ``linear`` in its data."""
    rest = (R,) * n_rest
    algs = [Algorithm("replicated", (R,) * n_data + rest, R, 1)]
    algs += [Algorithm("partial", (P,) * n_data + rest, P, 1)] if linear else []
    algs += [Algorithm(f"shard{d}", (S(d),) * n_data + rest, S(d), p) for d in range(rank) if d not in touched]
    return algs


def expand_algorithms(in_shape: Sequence[int], out_shape: Sequence[int], p: int) -> list[Algorithm]:
    """Expand (data, shape) (module docstring): the data read as an elementwise input, the shape R; P -> P."""
    algs = with_replicated_rest(elementwise_algorithms(out_shape, [in_shape], p), 2)
    return algs + [Algorithm("partial", (P, R), P, 1)]


def metadata_algorithms(rank: int, p: int) -> list[Algorithm]:
    """Shape and Size (module docstring): the input read in any layout, the (static) value replicated."""
    return ([Algorithm("replicated", (R,), R, 1), Algorithm("partial", (P,), R, 1)]
            + [Algorithm(f"shard{d}", (S(d),), R, 1) for d in range(rank)])


def gather_algorithms(data_rank: int, indices_rank: int, axis: int, p: int) -> list[Algorithm]:
    """Gather (module docstring)."""
    a, q = axis % data_rank, indices_rank
    algs = [Algorithm("replicated", (R, R), R, 1), Algorithm("partial", (P, R), P, 1),
            Algorithm("rows", (S(a), R), P, p)]
    algs += [Algorithm(f"data{j}", (S(j), R), S(j if j < a else j + q - 1), p) for j in range(data_rank) if j != a]
    algs += [Algorithm(f"indices{i}", (R, S(i)), S(a + i), p) for i in range(q)]
    return algs


def gather_elements_algorithms(data_shape: Sequence[int], indices_shape: Sequence[int], axis: int,
                               p: int) -> list[Algorithm]:
    """GatherElements (module docstring)."""
    r = len(data_shape)
    a = axis % r
    algs = [Algorithm("replicated", (R, R), R, 1), Algorithm("partial", (P, R), P, 1)]
    algs.append(Algorithm("indices", (R, S(a)), S(a), p))
    algs += [Algorithm(f"shard{d}", (S(d), S(d)), S(d), p) for d in range(r)
             if d != a and data_shape[d] == indices_shape[d]]
    return algs


def gather_nd_algorithms(data_rank: int, indices_shape: Sequence[int], batch_dims: int, p: int) -> list[Algorithm]:
    """GatherND (module docstring)."""
    q, b, k = len(indices_shape), batch_dims, int(indices_shape[-1])
    algs = [Algorithm("replicated", (R, R), R, 1), Algorithm("partial", (P, R), P, 1)]
    algs += [Algorithm(f"batch{d}", (S(d), S(d)), S(d), p) for d in range(b)]
    algs += [Algorithm(f"indices{d}", (R, S(d)), S(d), p) for d in range(b, q - 1)]
    algs += [Algorithm(f"data{d}", (S(d), R), S(q - 1 + d - b - k), p) for d in range(b + k, data_rank)]
    return algs


def fill_algorithms(out_rank: int, p: int) -> list[Algorithm]:
    """ConstantOfShape (module docstring): the shape read replicated, the output filled in any layout."""
    return [Algorithm("replicated", (R,), R, 1)] + [Algorithm(f"shard{d}", (R,), S(d), p) for d in range(out_rank)]


def pad_touched(rank: int, pads, axes) -> set[int]:
    """The dims Pad pads or crops: those of ``axes`` (all dims when None) with a nonzero begin or end."""
    axes = [a % rank for a in (range(rank) if axes is None else axes)]
    pads = [int(x) for x in pads]
    return {a for i, a in enumerate(axes) if pads[i] or pads[i + len(axes)]}


def resized_dims(in_shape: Sequence[int], out_shape: Sequence[int], axes=None, scales=None) -> set[int]:
    """The dims Tile or Resize moves (module docstring): output size unlike the input's, or a known
    scale other than 1 on one of ``axes`` (all dims when None)."""
    touched = {d for d, (a, b) in enumerate(zip(in_shape, out_shape)) if a != b}
    if scales is not None and len(scales):
        axes = range(len(in_shape)) if axes is None else [a % len(in_shape) for a in axes]
        touched |= {a for a, s in zip(axes, scales) if float(s) != 1.0}
    return touched
