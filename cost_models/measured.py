"""Measured cost model: per-node kernel times from onnxruntime's profiler on this machine.

The model runs with graph optimizations off so every profiled kernel is exactly one node of the file
(onnxpart.runtime). After warm-up runs, ``runs`` profiled runs give each node a median time; an op's
work is the sum over its nodes and over the weight generators folded into it (``Op.const_nodes``: a light
model's ``ConstantOfShape`` weights, a run-time ``Transpose`` of a tied embedding). Those run on every call
in this mode, and every file onnxpart emits carries them with the op that owns their weight, so a stage
pays them; onnxruntime's own optimizations (ORT_ENABLE_ALL) fold them once when the session loads.
``threads`` is onnxruntime's intra-op thread count (0: its default, one per core): profile with the threads
each worker will have (one per core of a pipeline's stage) and the stage times are that worker's.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

from onnxpart import runtime
from onnxpart.graph import OpGraph

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasuredRun:
    graph: OpGraph
    end_to_end: float  # median wall-clock seconds of session.run
    kernel_total: float  # sum of the medians charged to ops


def measured_costs(graph: OpGraph, loaded, runs: int = 5, warmup: int = 2,
                   seed: int = 0, threads: int = 0) -> MeasuredRun:
    """Profile the model ``loaded`` (an :class:`onnxpart.onnx_io.LoadedModel`) in onnxruntime (CPU) at its
    costed dims and put median per-node times on ``graph``'s ops."""
    from onnxpart.verify import input_shapes

    with runtime.user_model(loaded.path), \
            runtime.profiling_session(loaded.model, loaded.folder, threads=threads) as (session, profile):
        feeds = runtime.random_inputs(session, seed, shapes=input_shapes(loaded, loaded.dims))
        for _ in range(warmup):
            session.run(None, feeds)
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            walls.append(time.perf_counter() - start)
        events = profile()
    median = runtime.kernel_medians(events, runs)
    missing = [name for op in graph.ops for name in op.onnx_nodes if name not in median]
    if missing:
        log.warning("onnxruntime reported no kernel time for %d nodes (e.g. %s); they count as 0",
                    len(missing), missing[0])
    work = [sum(median.get(name, 0.0) for name in op.onnx_nodes + op.const_nodes) for op in graph.ops]
    costed = graph.with_costs(work, cost_model="measured", device="this-machine-cpu",
                              bandwidth=graph.bandwidth)
    return MeasuredRun(costed, statistics.median(walls), sum(work))
