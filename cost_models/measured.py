"""Measured cost model: per-node kernel times from onnxruntime's profiler on this machine.

The model runs with graph optimizations off so every profiled kernel is exactly one node of the file
(onnxpart.runtime). After warm-up runs, ``runs`` profiled runs give each node a median time; an op's
work is the sum over its nodes and over the weight generators folded into it (``Op.const_nodes``: a light
model's ``ConstantOfShape`` weights, a run-time ``Transpose`` of a tied embedding). Those run on every call
in this mode, and every file onnxpart emits carries them with the op that owns their weight, so a stage
pays them; onnxruntime's own optimizations (ORT_ENABLE_ALL) fold them once when the session loads.

The profiler is not free, and what a kernel record holds is not all a run pays (a node's launch, the run's
own set-up): the profiled kernels of shufflenet's 203 small ops summed to 9.7–11.3 ms where the same session
ran in 8.4–9.3 ms with the profiler off; on the other light models the two were within 4 %. So after the
profiled runs the session runs again with the profiler ended, as many times, and every op's kernel time is
scaled by one factor so that the ops sum to that end-to-end median: what the model takes as every emitted
file runs it (``measured.end_to_end``; ``kernel_total`` keeps the profiled sum).

How it profiles (:class:`Profiling`): ``threads`` is onnxruntime's intra-op thread count (0: its default, one
per core): profile with the threads each worker will have (one per core of a pipeline's stage) and the stage
times are that worker's. The runs go on past ``runs`` until ``min_seconds`` have passed (up to
:data:`MAX_RUNS`, whose kernel records the profiler holds): a shared machine's speed moves by 20–50 % from one
half-second to the next, and a fast model's few runs would all fall in one spell. ``beside`` busy neighbours
run the model on other cores meanwhile (:mod:`onnxpart.neighbours`): the times a pipeline's stage has beside
the other stages, which share the cache and the memory bandwidth with it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from onnxpart import neighbours, runtime
from onnxpart.bench.timing import Timing, time_calls
from onnxpart.graph import OpGraph

log = logging.getLogger(__name__)

#: the most profiled runs ``min_seconds`` adds (the profiler keeps every kernel's record of every run)
MAX_RUNS = 200


@dataclass(frozen=True)
class Profiling:
    """How the profile is taken (module docstring): at least ``runs`` runs and ``min_seconds`` after
    ``warmup`` runs, ``threads`` intra-op threads, ``beside`` busy neighbours."""

    runs: int = 5
    threads: int = 0
    min_seconds: float = 0.0
    beside: int = 0
    warmup: int = 2

    def describe(self) -> dict:
        """What a costs file records of it (``measured``)."""
        return {"runs": self.runs, "threads": self.threads, "min_time_s": self.min_seconds, "beside": self.beside}


@dataclass(frozen=True)
class MeasuredRun:
    graph: OpGraph
    end_to_end: float  # median wall-clock seconds of session.run, the profiler off: what the ops' work sums to
    kernel_total: float  # sum of the profiled kernel medians of the ops' nodes, before the scale


def measured_costs(graph: OpGraph, loaded, profiling: Profiling = Profiling(), seed: int = 0) -> MeasuredRun:
    """Profile the model ``loaded`` (an :class:`onnxpart.onnx_io.LoadedModel`) in onnxruntime (CPU) at its
    costed dims as ``profiling`` says and put median per-node times on ``graph``'s ops, scaled to sum to the
    model's time with the profiler off (module docstring)."""
    from onnxpart.verify import input_shapes

    threads = profiling.threads
    with runtime.user_model(loaded.path), \
            runtime.profiling_session(loaded.model, loaded.folder, threads=threads) as (session, profile):
        feeds = runtime.random_inputs(session, seed, shapes=input_shapes(loaded, loaded.dims))

        def neighbour():
            return functools.partial(runtime.make_session(loaded.model, loaded.folder, threads=threads).run, None,
                                     feeds)

        def timed() -> Timing:
            return time_calls(functools.partial(session.run, None, feeds), profiling.warmup, profiling.runs,
                              profiling.min_seconds, MAX_RUNS)

        with neighbours.beside(profiling.beside, threads, neighbour):
            profiled = timed().runs
            events = profile()
            end_to_end = timed().median
    median = runtime.kernel_medians(events, profiled)
    missing = [name for op in graph.ops for name in op.onnx_nodes if name not in median]
    if missing:
        log.warning("onnxruntime reported no kernel time for %d nodes (e.g. %s); they count as 0",
                    len(missing), missing[0])
    kernels = [sum(median.get(name, 0.0) for name in op.onnx_nodes + op.const_nodes) for op in graph.ops]
    scale = end_to_end / sum(kernels) if sum(kernels) > 0 else 1.0
    costed = graph.with_costs([k * scale for k in kernels], cost_model="measured", device="this-machine-cpu",
                              bandwidth=graph.bandwidth)
    return MeasuredRun(costed, end_to_end, sum(kernels))

