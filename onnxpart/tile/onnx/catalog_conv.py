"""The layout catalog's convolution family (see :mod:`onnxpart.tile.onnx.catalog` for layouts and
:class:`~onnxpart.tile.onnx.catalog.Algorithm`): Conv, ConvTranspose, pooling and BatchNormalization in inference
mode, all on NCHW-style tensors ``[N, C, spatial...]`` (ONNX's layout for these ops).

Conv (ONNX Conv-11: Y[n, m] = Σ_c X[n, c] ⋆ W[m, c] + B[m], the channels split into ``group`` groups):

* ``batch``: X S(0), W and B replicated -> Y S(0) — every image is independent;
* ``out-channels`` (group = 1): X replicated, W S(0), B S(0) -> Y S(1) — each device owns M/D filters;
* ``in-channels`` (group = 1): X S(1), W S(1), B read as P (device 0 adds it, the others add zeros)
  -> Y P — the sum over c split into D partial sums;
* ``groups`` (group > 1 and divisible by D, e.g. depthwise): X S(1), W S(0), B S(0) -> Y S(1) — each
  device owns group/D whole groups (their input channels and their filters) and runs the node with
  ``group`` = group/D (the one local rewrite, done by :mod:`onnxpart.tile.onnx.verify`).

ConvTranspose (ONNX ConvTranspose-11: Y[n, o] = Σ_c X[n, c] ⋆ᵀ W[c, o] + B[o], W of shape
(C_in, C_out/group, k...) — the input channels are W's dim 0, the output channels its dim 1):

* ``batch``: X S(0), W and B replicated -> Y S(0);
* ``out-channels`` (group = 1): X replicated, W S(1), B S(0) -> Y S(1);
* ``in-channels`` (group = 1): X S(1), W S(0), B read as P -> Y P;
* ``groups`` (group divisible by D): X S(1), W S(0), B S(0) -> Y S(1), the node run with ``group`` =
  group/D (W's dim 0 holds the groups' input channels in group order, Y's channels the groups' outputs).

Pooling (MaxPool, AveragePool, LpPool and their Global forms) works per image and per channel: batch
S(0) -> S(0) and channel S(1) -> S(1); average pools are linear, so P -> P too.

BatchNormalization (inference: Y = scale·(X − mean)/√(var + ε) + B per channel): batch S(0) with its
four 1-D parameters replicated, or channel S(1) with the parameters S(0).

Every sharded algorithm divides the op's compute by D.
"""

from __future__ import annotations

from onnxpart.tile.onnx.catalog import P, R, Algorithm, S

POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
LINEAR_POOLS = {"AveragePool", "GlobalAveragePool"}


def conv_algorithms(n_inputs: int, group: int, p: int, transposed: bool = False) -> list[Algorithm]:
    """Conv, or ConvTranspose when ``transposed`` (W's output channels on dim 1, its input channels on
    dim 0), with ``n_inputs`` 2 (X, W) or 3 (X, W, B) and ``group`` (module docstring)."""
    bias = n_inputs == 3
    w_out, w_in = (1, 0) if transposed else (0, 1)
    algs = [Algorithm("replicated", (R, R) + (R,) * bias, R, 1),
            Algorithm("batch", (S(0), R) + (R,) * bias, S(0), p)]
    if group == 1:
        algs.append(Algorithm("out-channels", (R, S(w_out)) + (S(0),) * bias, S(1), p))
        algs.append(Algorithm("in-channels", (S(1), S(w_in)) + (P,) * bias, P, p))
    elif group % p == 0:
        algs.append(Algorithm("groups", (S(1), S(0)) + (S(0),) * bias, S(1), p))
    return algs


def pool_algorithms(op_type: str, p: int) -> list[Algorithm]:
    """Pooling (module docstring): per image and per channel; P for the linear average pools."""
    algs = [Algorithm("replicated", (R,), R, 1), Algorithm("batch", (S(0),), S(0), p),
            Algorithm("channels", (S(1),), S(1), p)]
    if op_type in LINEAR_POOLS:
        algs.append(Algorithm("partial", (P,), P, 1))
    return algs


def batchnorm_algorithms(p: int) -> list[Algorithm]:
    """BatchNormalization inference, inputs X, scale, B, mean, var (module docstring)."""
    return [Algorithm("replicated", (R,) * 5, R, 1), Algorithm("batch", (S(0),) + (R,) * 4, S(0), p),
            Algorithm("channels", (S(1),) + (S(0),) * 4, S(1), p)]
