"""onnxruntime sessions that follow the file: the one place onnxpart runs models.

onnxruntime reorders nodes and merges duplicates unless told otherwise; for profiling (nodes must map
1:1 to the file) and for running rematerialized models (the file's order *is* the plan) sessions are
made with graph optimizations off and ``ExecutionOrder.PRIORITY_BASED``, which keeps the file's order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx

log = logging.getLogger(__name__)


def session_options(*, keep_order: bool = True, profile: bool = False, threads: int = 0,
                    memory_pattern: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if keep_order:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_mem_pattern = memory_pattern
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if profile:
        options.enable_profiling = True
    return options


def make_session(model: onnx.ModelProto, **options):
    """An onnxruntime CPU session for an in-memory model (see :func:`session_options`)."""
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), sess_options=session_options(**options),
                                providers=["CPUExecutionProvider"])


_NUMPY_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def random_inputs(session, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of ``session``: standard normal floats; integers and bools are
    zeros (always valid as indices, lengths and masks)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in arg.shape]
        dtype = _NUMPY_TYPES.get(arg.type)
        if dtype is None:
            raise ValueError(f"input {arg.name!r} has type {arg.type}, which onnxpart cannot generate")
        if np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[arg.name] = np.zeros(shape, dtype=dtype)
    return feeds


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], **options) -> dict[str, np.ndarray]:
    """Run ``model`` on ``feeds`` (only the inputs it declares are passed) and name its outputs."""
    session = make_session(model, **options)
    wanted = {arg.name for arg in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, values))


def max_abs_error(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray]) -> float:
    """Largest absolute difference over the outputs both share (inf if a shape differs)."""
    worst = 0.0
    for name, ref in reference.items():
        got = candidate[name]
        if ref.shape != got.shape:
            return float("inf")
        if ref.size:
            diff = np.abs(ref.astype(np.float64) - got.astype(np.float64))
            worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0)
    return worst
