"""Tiling (``onnxpart tile``), after "Matrix Tiling as Constrained Hypergraph Labeling" (CHLP): one strategy,
two problems, each a sibling package with the same modules (``model``, ``heuristics``, ``exact``, ``emit``,
``check``):

* :mod:`onnxpart.tile.onnx` — sharding layouts for an ONNX model on a device mesh (tensors as vertices, ops as
  hyperedges, collectives as the retiling cost), with :mod:`~onnxpart.tile.onnx.verify` running the plan;
* :mod:`onnxpart.tile.program` — the paper's matrix programs (matrices, expressions, row/col/block tilings).

:func:`solve` is the one entry: it sends each problem to its package's ``solve``. What both share to run
their methods (registry, time budget, certificate) is :mod:`onnxpart.tile.methods`.
"""

from __future__ import annotations

from onnxpart.board import Board
from onnxpart.tile import onnx, program
from onnxpart.tile.onnx.model import LayoutInstance


def solve(problem: LayoutInstance | program.Instance | program.Program,
          options: onnx.LayoutOptions | program.ProgramOptions | None = None,
          board: Board | None = None) -> onnx.LayoutSolution | program.ProgramSolution:
    """Solve ``problem``: a layout instance (:func:`onnxpart.tile.onnx.solve`), or a CHLP instance or matrix
    program (:func:`onnxpart.tile.program.solve`); ``options`` default to that problem's."""
    if isinstance(problem, LayoutInstance):
        return onnx.solve(problem, options or onnx.LayoutOptions(), board)
    return program.solve(problem, options or program.ProgramOptions(), board)
