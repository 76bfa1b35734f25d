"""``--verify``: emitted models, run in onnxruntime, reproduce the original model's outputs.

Every strategy's emitted files are checked the same way: seeded random inputs, the original model run
once (onnxruntime reads its external data; onnxpart never does), the emitted parts run in order on the
same inputs, and each output compared by its max abs error and its error relative to the output's
scale. A model with dynamic dims is checked at the dims it was costed at *and* at twice each of them
(doubling keeps linear relations such as ``total = past + sequence`` true), which proves the emitted
parts kept their dims dynamic; if the original itself does not run at the doubled dims, that check is
skipped with a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxpart import runtime
from onnxpart.errors import UserError

#: default --verify-tol: error relative to each output's scale; float32 kernels differ in summation order
DEFAULT_TOLERANCE = 1e-4


class VerificationError(UserError):
    """Emitted models that do not reproduce the original: exit 1, naming the output."""

    exit_code = 1


#: --verify runs a model only when its weights take at most this share of the memory available
RUNNABLE_SHARE = 0.5


@dataclass
class VerifyReport:
    seed: int
    tolerance: float
    sizes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why nothing was run (a model too big for this machine)

    @property
    def ok(self) -> bool:
        return all(size["ok"] for size in self.sizes)

    @property
    def max_abs_error(self) -> float:
        return max((size["max_abs_error"] for size in self.sizes), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((size["max_rel_error"] for size in self.sizes), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "max_abs_error": self.max_abs_error, "max_rel_error": self.max_rel_error,
                "tolerance": self.tolerance, "seed": self.seed, "sizes": self.sizes, "notes": self.notes,
                "skipped": self.skipped}

    def raise_if_failed(self) -> None:
        bad = next((size for size in self.sizes if not size["ok"]), None)
        if bad is not None:
            raise VerificationError(
                f"--verify failed: output {bad['worst_output']!r} differs from the original's at dims "
                f"{bad['dims'] or 'as given'} (max abs error {bad['max_abs_error']:.3g}, relative "
                f"{bad['max_rel_error']:.3g}, over --verify-tol {self.tolerance:g} or its dtype's precision); "
                "nothing was written")


def too_big_to_run(model: onnx.ModelProto) -> str | None:
    """Why ``model`` cannot run in onnxruntime here — its weights (inline and external) over
    :data:`RUNNABLE_SHARE` of the memory this machine has available — or None when it can. Running it
    anyway would take the machine down (a 70B model's 141 GB on a 24 GB machine)."""
    from onnxpart.units import format_bytes
    from onnxpart.writer import weight_bytes

    weights = weight_bytes(model)
    available = _available_memory()
    if available is None or weights <= RUNNABLE_SHARE * available:
        return None
    return (f"skipped: the model's {format_bytes(weights)} of weights do not fit the {format_bytes(available)} "
            "of memory available here; run --verify on a machine where they do")


def _available_memory() -> int | None:
    """Bytes of memory available to a new process (Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_dims(loaded, freeze: bool = False) -> list[dict[str, int]]:
    """The dims to verify at: those costed, and twice each when the model has dynamic dims the emitted
    files keep (not with ``freeze``, ``--freeze-dims``: those files take the costed dims only)."""
    sizes = [dict(loaded.dims)]
    if loaded.dynamic and not freeze and any(loaded.dims.values()):
        sizes.append({name: 2 * value for name, value in loaded.dims.items()})
    return sizes


def input_shapes(loaded, dims: Mapping[str, int]) -> dict[str, list[int]]:
    """Each graph input's shape at ``dims``: fixed dims as they are, named dims from ``dims``, unnamed
    unknown dims as costed."""
    weights = {init.name for init in loaded.model.graph.initializer}
    shapes = {}
    for vi in loaded.model.graph.input:
        if vi.name in weights:
            continue
        costed = loaded.types[vi.name].dims
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else
                           dims.get(d.dim_param, costed[axis]) if d.HasField("dim_param") else costed[axis]
                           for axis, d in enumerate(vi.type.tensor_type.shape.dim)]
    return shapes


def verify_parts(loaded, parts: Sequence[tuple[Path, Sequence[str]]], seed: int = 0,
                 tolerance: float = DEFAULT_TOLERANCE, freeze: bool = False) -> VerifyReport:
    """Run ``parts`` (file, the tensors it reads) in order against the original at every :func:`check_dims`
    (each model is loaded into onnxruntime once, for all the sizes)."""
    report = VerifyReport(seed=seed, tolerance=tolerance)
    with runtime.user_model(loaded.path):
        original = runtime.make_session(loaded.model, loaded.folder)
    sessions = [(path, runtime.make_session(path), reads) for path, reads in parts]
    for dims in check_dims(loaded, freeze):
        feeds, reference = reference_run(original, loaded, dims, seed, report)
        if reference is None:
            continue
        values = dict(feeds)
        for path, session, reads in sessions:
            missing = [name for name in reads if name not in values]
            if missing:
                raise RuntimeError(f"{path.name} needs {missing[:3]}, which no earlier part produced")
            values.update(runtime.run_session(session, {name: values[name] for name in reads}))
        add_size(report, dims, runtime.compare(reference, values, tolerance))
    return report


def reference_run(session, loaded, dims: Mapping[str, int], seed: int,
                  report: VerifyReport) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Seeded feeds at ``dims`` and the original's outputs on them (``session``: the original in
    onnxruntime); None, with a note, when the original itself cannot run at doubled dims. At the costed
    dims, the original failing is the model's fault (:func:`onnxpart.runtime.user_model`: exit 2)."""
    feeds = runtime.random_inputs(session, seed, shapes=input_shapes(loaded, dims))
    if dims == dict(loaded.dims):
        with runtime.user_model(loaded.path):
            return feeds, runtime.run_session(session, feeds)
    try:
        return feeds, runtime.run_session(session, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        report.notes.append(f"the original model does not run at dims {dims} ({str(exc).splitlines()[0][:120]}); "
                            "the check at a second size was skipped")
        return feeds, None


def add_size(report: VerifyReport, dims: Mapping[str, int], mismatch: runtime.Mismatch) -> None:
    report.sizes.append({"dims": dict(dims), **mismatch.to_dict()})
