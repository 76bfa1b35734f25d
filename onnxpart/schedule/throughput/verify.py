"""Running throughput pieces on the inputs of a batch, and ``--verify`` for them.

**The batch axis.** The throughput costs take one of the batch's ``L`` inputs to be one run of the model
at its costed shape (:meth:`~onnxpart.schedule.common.instance.Instance.time_batch` scales an op's per-input time
by the slice size, or reads it off a device's measured batch curve), so input ``l`` is what one run of
the model takes. Which axis carries it follows the
usual convention, axis 0 of every graph input (:func:`batch_axis`):

* axis 0 of every graph input is the same symbolic dim ``N`` (``--freeze-dims`` off): input ``l`` is the
  rows ``[l·b, (l+1)·b)`` along ``N``, ``b`` its costed value (``--dim N=b``). A piece computing the
  inputs ``[lo, hi)`` runs **once**, on those inputs' rows of its input tensors concatenated along each
  tensor's batch axis (the one axis the model's symbolic shapes name ``N``), and its outputs are cut
  back into rows. A piece with a tensor that has no such single axis (a reshape that folds ``N`` away, a
  shape tensor) runs once per input instead;
* axis 0 of every graph input is a fixed size (or an unnamed dim), or the dims are frozen: a piece runs
  **once per input** of its slice, each time at the costed shape;
* anything else — a graph input of rank 0, axis 0 named ``N`` on one input and otherwise on another, no
  graph input at all — leaves the batch axis ambiguous: :class:`~onnxpart.errors.UserError` (exit 2).

Between pieces every tensor is kept per input (numpy), so a piece reads its inputs' rows whichever
pieces made them — the manifest's ``transfers[]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnxpart import runtime
from onnxpart.errors import UserError
from onnxpart.verify import VerifyReport, add_size, check_dims, reference_run

ROWS, PER_INPUT = "rows", "per input"  # how a piece runs (a piece entry's ``run``)


@dataclass(frozen=True)
class BatchAxis:
    """``dim``: the symbolic dim on axis 0 of every graph input, None when each input is one run;
    ``rows``: rows per input along it; ``axes``: tensor → its batch axis (the single axis named ``dim``)."""

    dim: str | None
    rows: int = 1
    axes: Mapping[str, int] = field(default_factory=dict)

    def run(self, tensors: Sequence[str]) -> str:
        """How a piece reading and making ``tensors`` runs: on rows, or once per input."""
        return ROWS if self.dim is not None and all(name in self.axes for name in tensors) else PER_INPUT

    def to_dict(self) -> dict[str, Any]:
        return {"axis": 0, "dim": self.dim, "rows_per_input": self.rows if self.dim is not None else None}


def batch_dim(model) -> str | None:
    """The symbolic dim on axis 0 of every graph input of the ONNX ``model``, None when those axes are
    fixed sizes; UserError (exit 2) when there is no one batch axis (module docstring)."""
    rule = ("throughput takes axis 0 of every graph input as the batch (one symbolic dim on all of them, "
            "or fixed sizes, run once per input)")
    weights = {init.name for init in model.graph.initializer}
    firsts = {}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        dims = vi.type.tensor_type.shape.dim
        if not dims:
            raise UserError(f"graph input {vi.name!r} is a scalar, so the batch cannot be sliced: {rule}")
        firsts[vi.name] = dims[0].dim_param if dims[0].HasField("dim_param") else None
    if len(set(firsts.values())) != 1:
        said = ", ".join(f"{name}: {dim or 'fixed'}" for name, dim in firsts.items()) or "none"
        raise UserError(f"the graph inputs' axis 0 ({said}) names no one batch, so the batch cannot be sliced: {rule}")
    return next(iter(firsts.values()))


def batch_axis(loaded, freeze: bool) -> BatchAxis:
    """The batch axis of a model (module docstring); UserError (exit 2) when it is ambiguous."""
    dim = batch_dim(loaded.model)
    if dim is None or freeze:
        return BatchAxis(None)
    axes = {}
    for name, vi in loaded.emit_types.items():
        named = [axis for axis, d in enumerate(vi.type.tensor_type.shape.dim) if d.dim_param == dim]
        if len(named) == 1:
            axes[name] = named[0]
    return BatchAxis(dim, int(loaded.dims[dim]), axes)


def run_pieces(pieces: Sequence[tuple[Any, Mapping[str, Any]]], rows: list[dict[str, np.ndarray]],
               axis: BatchAxis) -> None:
    """Run ``pieces`` (onnxruntime session, manifest entry: ``inputs``, ``slice`` ``[lo, hi)``, ``run``)
    in order; ``rows[l]`` holds input ``l``'s tensors and gets every piece's outputs for it."""
    for session, entry in pieces:
        lo, hi = entry["slice"]
        missing = [name for name in entry["inputs"] for l in range(lo, hi) if name not in rows[l]]
        if missing:
            raise RuntimeError(f"{entry['file']} needs {missing[0]!r}, which no earlier piece made for its inputs")
        if entry["run"] == ROWS:
            feeds = {name: np.concatenate([rows[l][name] for l in range(lo, hi)], axis=axis.axes[name])
                     for name in entry["inputs"]}
            for name, value in runtime.run_session(session, feeds).items():
                for l, part in zip(range(lo, hi), np.split(value, hi - lo, axis=axis.axes[name])):
                    rows[l][name] = part
        else:
            for l in range(lo, hi):
                rows[l].update(runtime.run_session(session, {name: rows[l][name] for name in entry["inputs"]}))


def verify_pieces(loaded, runs: Sequence[tuple[Path, Mapping[str, Any]]], *, axis: BatchAxis, batch: int,
                  seed: int = 0, tolerance: float, freeze: bool = False) -> VerifyReport:
    """``--verify`` for throughput: ``batch`` seeded inputs (input ``l`` from seed ``seed + l``), the
    original run once per input, the pieces (file, manifest entry) run in order by :func:`run_pieces`,
    every model output compared over all inputs (:func:`onnxpart.runtime.compare`) — at each of
    :func:`onnxpart.verify.check_dims`: the costed dims and, for a dynamic model not frozen (``freeze``),
    twice each (latency's rule; on rows, each input is then twice the rows), skipped with a note where the
    original itself does not run there. Each piece is loaded into onnxruntime once, for both sizes."""
    report = VerifyReport(seed=seed, tolerance=tolerance)
    with runtime.user_model(loaded.path):
        original = runtime.make_session(loaded.model, loaded.folder)
    pieces = [(runtime.make_session(path), entry) for path, entry in runs]
    for dims in check_dims(loaded, freeze):
        first = reference_run(original, loaded, dims, seed, report)  # None: the original cannot run there
        if first[1] is None:
            continue
        runs_at = [first] + [reference_run(original, loaded, dims, seed + l, report) for l in range(1, batch)]
        rows = [dict(feed) for feed, _ in runs_at]
        run_pieces(pieces, rows, axis)
        expected = {name: np.stack([out[name] for _, out in runs_at]) for name in first[1]}
        got = {name: np.stack([row[name] for row in rows]) for name in expected if all(name in row for row in rows)}
        add_size(report, dims, runtime.compare(expected, got, tolerance))
    on_rows = sum(1 for _, entry in runs if entry["run"] == ROWS)
    report.notes.append(f"{batch} inputs; " + (f"{on_rows} of {len(runs)} pieces ran once on their inputs' rows "
                                                f"along {axis.dim}, the rest once per input" if axis.dim else
                                                "every piece ran once per input of its slice"))
    return report
