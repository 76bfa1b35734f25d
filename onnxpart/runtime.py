"""onnxruntime sessions that follow the file: the one place onnxpart runs models.

onnxruntime reorders nodes and merges duplicates unless told otherwise; for profiling (nodes must map
1:1 to the file) and for running rematerialized models (the file's order *is* the plan) sessions are
made with graph optimizations off and ``ExecutionOrder.PRIORITY_BASED``, which keeps the file's order.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from onnxpart.errors import UserError

log = logging.getLogger(__name__)

#: onnxruntime's message prefix: error code and name, then the C++ file, line and function signature
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (\S+:\d+ ([^()]*\([^()]*\)( const)? )?)?")


#: The settings that make onnxruntime run a file in its own order (the one place they are written; remat
#: stores them in remat.onnx's metadata as they are, with the memory-pattern planner off).
KEEP_ORDER = {
    "graph_optimization_level": "ORT_DISABLE_ALL",
    "execution_order": "PRIORITY_BASED",
    "execution_mode": "ORT_SEQUENTIAL",
}


def session_options(*, keep_order: bool = True, threads: int = 0, memory_pattern: bool = True,
                    profile_prefix: str | None = None):
    """onnxruntime session options; ``profile_prefix`` turns the profiler on, writing there
    (:func:`profiling_session` gives it a private folder)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: every failure reaches Python, which reports it on one line
    if keep_order:
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, KEEP_ORDER["graph_optimization_level"])
        options.execution_order = getattr(ort.ExecutionOrder, KEEP_ORDER["execution_order"])
        options.execution_mode = getattr(ort.ExecutionMode, KEEP_ORDER["execution_mode"])
    options.enable_mem_pattern = memory_pattern
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


def make_session(model: onnx.ModelProto | str | os.PathLike, folder: str | os.PathLike | None = None, **options):
    """An onnxruntime CPU session (see :func:`session_options`) for a model file, or for an in-memory
    model whose external data lives in ``folder`` (read by onnxruntime, never by onnxpart). A file
    written with ``--weights reference`` reads its weights from the folder it names
    (:func:`onnxpart.data_files.data_folder`): onnxruntime refuses external data outside a file's own folder."""
    import onnxruntime as ort

    from onnxpart.data_files import data_folder

    opts = session_options(**options)
    if isinstance(model, (str, os.PathLike)):
        folder = data_folder(model)
        if folder is None:
            return ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
        model = onnx.load(str(model), load_external_data=False)
    if folder is not None:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def profiling_session(model: onnx.ModelProto | str | os.PathLike, folder: str | os.PathLike | None = None,
                      **options) -> Iterator[tuple[Any, Callable[[], list]]]:
    """:func:`make_session` with onnxruntime's profiler on, its profile written into a private temporary
    folder removed on leaving (onnxruntime's default is the current folder: never written there) ->
    ``(session, events)``, ``events()`` ending the profile and returning its records."""
    with tempfile.TemporaryDirectory(prefix="onnxpart-ort-") as scratch:
        session = make_session(model, folder, profile_prefix=os.path.join(scratch, "profile"), **options)

        def events() -> list:
            with open(session.end_profiling()) as handle:
                return json.load(handle)

        yield session, events


def kernel_medians(events: list, runs: int) -> dict[str, float]:
    """{node name: median seconds of its last ``runs`` kernel events} from a :func:`profiling_session`'s
    records (the warm-up runs are profiled too, so only the last ``runs`` count)."""
    import statistics

    samples: dict[str, list[float]] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            samples.setdefault(event["name"][: -len("_kernel_time")], []).append(event["dur"] * 1e-6)
    return {node: statistics.median(times[-runs:]) for node, times in samples.items()}


def ort_reason(exc: BaseException) -> str:
    """onnxruntime's error message on one line, without its code and C++ source location."""
    text = _ORT_PREFIX.sub("", " ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " …"


def is_ort_error(exc: BaseException) -> bool:
    """True for the exceptions onnxruntime raises (Fail, InvalidGraph, InvalidArgument, NotImplemented…)."""
    return type(exc).__module__.startswith("onnxruntime")


@contextlib.contextmanager
def user_model(path: str | os.PathLike) -> Iterator[None]:
    """Inside: onnxruntime loads or runs the user's model at ``path`` (never an emitted file): its refusal, or
    running out of memory, is a fault of that model on this machine (exit 2, one line), not onnxpart's bug."""
    try:
        yield
    except MemoryError:
        raise UserError(f"onnxruntime ran out of memory running {os.path.basename(path)} on this machine") from None
    except Exception as exc:
        if not is_ort_error(exc):
            raise
        raise UserError(f"onnxruntime cannot run {os.path.basename(path)}: {ort_reason(exc)}") from None


@functools.lru_cache(maxsize=None)
def unsupported_versions(ir_version: int, opsets: tuple[tuple[str, int], ...]) -> str | None:
    """Why onnxruntime refuses models of ``ir_version`` importing ``opsets`` (``(domain, version)`` pairs),
    asked with a model of no node at the same versions; None when it takes them."""
    import onnxruntime as ort

    value = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    probe = onnx.helper.make_model(onnx.helper.make_graph([], "probe", [value], [value]),
                                   opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets])
    probe.ir_version = ir_version
    try:
        make_session(probe)
    except Exception as exc:  # noqa: BLE001 - only onnxruntime's own refusals are answers
        if not is_ort_error(exc):
            raise
        shown = ", ".join(f"{domain or 'ai.onnx'} {version}" for domain, version in opsets)
        return f"onnxruntime {ort.__version__} refuses IR version {ir_version} with opset {shown}: {ort_reason(exc)}"
    return None


_NUMPY_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def random_inputs(session, seed: int = 0, shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of ``session``: standard normal floats; integers and bools are
    zeros (always valid as indices, lengths and masks). An input named in ``shapes`` has that shape; any
    other unknown dim is 1. Inputs that together exceed this machine's memory are refused (exit 2) before
    anything is allocated."""
    wanted = {}
    for arg in session.get_inputs():
        shape = list((shapes or {}).get(arg.name) or [d if isinstance(d, int) and d >= 0 else 1 for d in arg.shape])
        dtype = _NUMPY_TYPES.get(arg.type)
        if dtype is None:
            raise UserError(f"graph input {arg.name!r} has type {arg.type}: onnxpart cannot generate such inputs "
                            "to run the model")
        wanted[arg.name] = (shape, np.dtype(dtype))
    _refuse_oversized(wanted)
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (shape, dtype) in wanted.items():
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype=dtype)
    return feeds


def _refuse_oversized(wanted: Mapping[str, tuple[list[int], np.dtype]]) -> None:
    """Refuse inputs whose making needs more than the machine's physical memory (a float input is drawn in
    float64, then cast), naming the largest."""
    from onnxpart.units import format_bytes

    sizes = {name: math.prod(shape) * dtype.itemsize for name, (shape, dtype) in wanted.items()}
    making = sum(size + (8 * size // dtype.itemsize if np.issubdtype(dtype, np.floating) else 0)
                 for size, (_, dtype) in zip(sizes.values(), wanted.values()))
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if making > memory:
        name = max(sizes, key=sizes.__getitem__)
        shape, dtype = wanted[name]
        raise UserError(f"graph input {name!r} of shape {shape} has {math.prod(shape):,} {dtype.name} elements "
                        f"({format_bytes(sizes[name])}); making the inputs needs {format_bytes(making)}, more than "
                        f"this machine's {format_bytes(memory)} of memory, so onnxruntime cannot run the model here")


def run(model, feeds: Mapping[str, np.ndarray], folder: str | os.PathLike | None = None,
        **options) -> dict[str, np.ndarray]:
    """Run ``model`` (a proto or a file) on ``feeds`` (only the inputs it declares are passed) and name
    its outputs."""
    return run_session(make_session(model, folder, **options), feeds)


def run_session(session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run an existing session on ``feeds`` (only the inputs it declares are passed); outputs by name."""
    wanted = {arg.name for arg in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, values))


@dataclass(frozen=True)
class Mismatch:
    """How far ``candidate`` outputs are from ``reference``: the worst absolute error, the worst error
    relative to each output's scale (its largest magnitude) and the output that has it, and whether every
    output is within its tolerance."""

    max_abs_error: float
    max_rel_error: float
    worst_output: str | None
    ok: bool = True

    def to_dict(self) -> dict:
        return {"max_abs_error": self.max_abs_error, "max_rel_error": self.max_rel_error,
                "worst_output": self.worst_output, "ok": self.ok}


def allowed_error(dtype: np.dtype, tolerance: float) -> float:
    """The relative error an output of ``dtype`` may have: ``tolerance`` (set for float32), at least ten
    units in the last place of a lower-precision float (float16 sums round at ~1e-3), and none for
    integers and bools."""
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    return max(tolerance, 10 * float(np.finfo(dtype).eps))


def compare(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
            tolerance: float = 1e-4) -> Mismatch:
    """Per output: the max abs difference, and that over the output's scale ``max |reference|`` (exact
    equality needed when the reference is all zeros), checked against :func:`allowed_error`. A shape,
    NaN-pattern, infinity or missing-output difference is an infinite error."""
    worst_abs, worst_rel, worst, ok = 0.0, -1.0, None, True
    for name, ref in reference.items():
        got = candidate.get(name)
        if got is None or ref.shape != got.shape or not np.array_equal(_nan_mask(ref), _nan_mask(got)):
            return Mismatch(float("inf"), float("inf"), name, False)
        if not ref.size:
            continue
        a, b = ref.astype(np.float64), got.astype(np.float64)
        finite = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
            return Mismatch(float("inf"), float("inf"), name, False)
        diff = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
        scale = float(np.max(np.abs(a[finite]), initial=0.0))
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        ok = ok and rel <= allowed_error(ref.dtype, tolerance)
        worst_abs = max(worst_abs, diff)
        if rel > worst_rel:
            worst_rel, worst = rel, name
    return Mismatch(worst_abs, max(worst_rel, 0.0), worst, ok)


def _nan_mask(values: np.ndarray) -> np.ndarray:
    return np.isnan(values) if np.issubdtype(values.dtype, np.floating) else np.zeros(values.shape, bool)


def max_abs_error(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray]) -> float:
    """Largest absolute difference over the outputs both share (inf if a shape differs)."""
    return compare(reference, candidate).max_abs_error
