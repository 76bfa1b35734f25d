"""A piece: a run of one device's work that ``onnxpart schedule`` writes as one runnable ONNX file
(latency: :mod:`onnxpart.schedule.latency.pieces`; throughput, on a slice of the batch:
:mod:`onnxpart.schedule.throughput.pieces`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    index: int
    device: int
    ops: tuple[int, ...]  # in execution order
    inputs: tuple[int, int] | None = None  # throughput: the batch slice [lo, hi) it computes
