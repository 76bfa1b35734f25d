"""Every node's kernel time inside a folder's stages, for ``--calibrate``: the stage files run in order, each
on the previous stages' real outputs (as :mod:`onnxpart.bench.chain` runs them), with onnxruntime's profiler
on — the profile ``annotate --cost measured`` takes of the whole model (CPU, graph optimizations off, the
file's order), taken here of the files benched.

A stage's wall time alone is one number per stage; its nodes' kernel times are one per node, which is what
fitting a scale per op type needs (a k-stage folder gives k walls, and an op type that only one stage holds
cannot be told apart from the others by walls alone).
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxpart import runtime
from onnxpart.bench.folder import Folder, Unit
from onnxpart.bench.sessions import Settings, graph_feeds


def stage_kernels(folder: Folder, units: Sequence[Unit], settings: Settings, warmup: int,
                  runs: int) -> dict[str, float]:
    """{ONNX node name: median kernel seconds over ``runs`` profiled runs after ``warmup``} over every stage
    file of ``units``, run in order on seeded model inputs at the costed dims."""
    values: dict = {}
    medians: dict[str, float] = {}
    for unit in units:
        path = folder.file(unit.file)
        with runtime.user_model(path), \
                runtime.profiling_session(str(path), None, threads=settings.threads) as (session, events):
            values.update(graph_feeds(session, settings, values, unit.file))
            feeds = {arg.name: values[arg.name] for arg in session.get_inputs()}
            names = [o.name for o in session.get_outputs()]
            for _ in range(warmup):
                session.run(names, feeds)
            for _ in range(runs):
                out = session.run(names, feeds)
            values.update(zip(names, out))
            medians.update(runtime.kernel_medians(events(), runs))
    return medians
