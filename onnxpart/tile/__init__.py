"""Tiling (``onnxpart tile``), after "Matrix Tiling as Constrained Hypergraph Labeling" (CHLP): one strategy,
two problems, each a sibling package with the same modules (``model``, ``heuristics``, ``exact``, ``emit``,
``check``):

* :mod:`onnxpart.tile.onnx` — sharding layouts for an ONNX model on a device mesh (tensors as vertices, ops as
  hyperedges, collectives as the retiling cost), with :mod:`~onnxpart.tile.onnx.verify` running the plan;
* :mod:`onnxpart.tile.program` — the paper's matrix programs (matrices, expressions, row/col/block tilings).

:func:`solve` is the one entry: it sends each problem to its package's ``solve``; :func:`certificate` is the
certificate both write. Each package runs its methods on the strategy base (:mod:`onnxpart.strategy`: its
``REGISTRY``, one ``Budget``, ``run_methods``), and imports no solver until a method runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxpart.board import Board
from onnxpart.certificate import Certificate, instance_hash

if TYPE_CHECKING:
    from onnxpart.tile import onnx, program


def solve(problem, options: onnx.LayoutOptions | program.ProgramOptions | None = None, board: Board | None = None,
          seconds: float | None = None) -> onnx.LayoutSolution | program.ProgramSolution:
    """Solve ``problem`` within ``seconds`` (default the options' ``time_limit``): a layout instance
    (:func:`onnxpart.tile.onnx.solve`), or a CHLP instance or matrix program (:func:`onnxpart.tile.program.solve`);
    ``options`` default to that problem's."""
    from onnxpart.tile import onnx, program
    from onnxpart.tile.onnx.model import LayoutInstance

    if isinstance(problem, LayoutInstance):
        return onnx.solve(problem, options or onnx.LayoutOptions(), board, seconds)
    return program.solve(problem, options or program.ProgramOptions(), board, seconds)


def certificate(solution: Any, sha: str | None, digest: list, objective: str, options: dict[str, Any]) -> Certificate:
    """The certificate (problem ``tile``) of a solution with ``cost``, ``method``, ``results`` and
    ``lower_bounds``: the instance hash of ``sha`` and ``digest``, and every method's result."""
    return Certificate(problem="tile", instance_sha256=instance_hash(sha, digest), objective=objective,
                       upper_bound=float(solution.cost), lower_bounds=list(solution.lower_bounds),
                       details={"method": solution.method, "options": options,
                                "results": [{"method": r.method, "cost": r.value, "status": r.status,
                                             "seconds": r.seconds, "note": r.note} for r in solution.results]})
