"""tile folders: each virtual device's shard of every op, timed alone, against plan.json's per-op
``compute_seconds`` (what one device pays for its part of the op: :mod:`onnxpart.tile.onnx.compute`).

The shards are the programs ``tile --verify`` runs (:mod:`onnxpart.tile.onnx.verify`), run by its own
code: the original model runs once whole at the costed dims for the reference values; per op, each input
is laid out as the plan stores it and converted into the layout the op's algorithm reads (the priced
resharding steps, as data movement), then every device runs its one-op program — the same node on its
local shards, or the op's local rule (Reshape's local shape, Gather's own rows, …). Bench times each of
those calls: ``--warmup`` untimed, ``--runs`` timed, the median. They run as verify's sessions do: CPU,
graph optimizations off, onnxruntime's default threads (the measured cost model's settings), which is
why ``--provider``, ``--threads`` and ``--optimize`` are refused for a tile folder.

Rows: one ``shard`` row per op (measured: the slowest device's median — the step waits for it; every
device's median in ``devices``); ``tile-compute`` (Σ over the timed ops, against Σ of their predictions);
``original`` (the model whole on one device, against ``one_device_s``) and, when every op was timed,
``tile-compute-speed-up`` (a ratio: one device over Σ shards, measured and predicted). Only the
:data:`MAX_OPS` ops predicted slowest are timed (``--max-ops``); the others are rows with a note. The
reshardings are not timed: the devices are virtual (collectives run as numpy copies) and this machine has
one device, so a real multi-device run is not made here. Every shard is its own ``session.run`` call: the
summary's ``call_overhead_s`` (an Identity of one float, timed the same way) is in every row.
"""

from __future__ import annotations

import logging

import numpy as np

from onnxpart.bench.folder import model_file, read_schema
from onnxpart.bench.report import Row
from onnxpart.bench.tile_plan import Rebuilt, TilePlan, rebuild
from onnxpart.bench.timing import Timing, time_calls
from onnxpart.errors import UserError

log = logging.getLogger(__name__)

#: ops timed per tile folder by default (those predicted slowest): the reference run and D shard runs per
#: op stay within minutes on a big model
MAX_OPS = 400


def bench_tile(folder, options) -> tuple[list[Row], dict]:
    """Rows and summary of a tile folder (module docstring)."""
    _check_settings(options.settings)
    read = read_schema(TilePlan, folder.manifest, folder.path / "plan.json")
    model = model_file(folder.model_path, folder.model_sha256, options.model, needed=True)
    built = rebuild(model, read, options.settings)
    timed = _slowest(read, options.max_ops)
    shards = time_shards(built, timed, options.settings.seed, options.warmup, options.runs)
    rows = [_op_row(entry, shards.get(entry.name), len(timed)) for entry in read.ops]
    whole = _time_original(model, options)
    rows += _totals(read, rows, whole, len(timed) == len(read.ops))
    return rows, _summary(read, rows, whole, _call_overhead(options.warmup, options.runs))


def _check_settings(settings) -> None:
    """The shards run as tile --verify runs them (module docstring): refuse the options that would not hold."""
    if settings.provider != "CPUExecutionProvider" or settings.threads or settings.optimize:
        raise UserError("--provider, --threads and --optimize do not apply to a tile folder: its shards run as "
                        "tile --verify runs them (CPU, graph optimizations off, onnxruntime's default threads)")


def _slowest(read: TilePlan, cap: int) -> set[str]:
    """The names of the ``cap`` ops predicted slowest (all of them when there are no more)."""
    ranked = sorted(read.ops, key=lambda entry: -entry.compute_seconds)
    return {entry.name for entry in ranked[:cap]}


def time_shards(built: Rebuilt, names: set[str], seed: int, warmup: int, runs: int) -> dict[str, list[Timing]]:
    """{op: the Timing of each device's shard, device order} for the ops in ``names`` (module docstring)."""
    from onnxpart.tile.onnx import exchange
    from onnxpart.tile.onnx.verify import VirtualDevices, convert
    from onnxpart.verify import VerifyReport

    inst, plan = built.inst, built.plan
    devices = VirtualDevices(inst, built.graph, built.loaded)
    reference = devices.reference(seed, VerifyReport(seed=seed, tolerance=0.0))
    devices.sessions = cache = TimedSessions(warmup, runs)
    out = {}
    for op in inst.ops:
        if op.name not in names:
            continue
        choice = op.choices[plan.algorithms[op.name]]
        local = [convert(inst, t, exchange.lay_out(reference[t], plan.layouts[t], inst.mesh.shape), plan.layouts[t],
                         want) for t, want in zip(op.inputs, choice.inputs)]
        cache.timings.clear()
        devices.run(op, choice, local, reference)
        out[op.name] = list(cache.timings)
        log.info("%s (%s %s): %s", op.name, op.op_type, choice.name, [t.median for t in out[op.name]])
    return out


class TimedSessions(dict):
    """Stands in for the session cache of tile's virtual devices: each session stored there is wrapped so
    that every run of it — one device's shard of one op — is timed, the Timings kept in call order."""

    def __init__(self, warmup: int, runs: int):
        super().__init__()
        self.warmup, self.runs = warmup, runs
        self.timings: list[Timing] = []

    def __setitem__(self, key, session) -> None:
        super().__setitem__(key, _TimedSession(session, self))


class _TimedSession:
    """An onnxruntime session whose ``run`` is timed (warm-up, timed runs) before it answers."""

    def __init__(self, session, cache: TimedSessions):
        self.session, self.cache = session, cache

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feeds):
        self.cache.timings.append(time_calls(lambda: self.session.run(names, feeds), self.cache.warmup,
                                             self.cache.runs))
        return self.session.run(names, feeds)


def _op_row(entry, timings, timed: int) -> Row:
    """An op's row: the slowest device's median against plan.json's ``compute_seconds``."""
    extra = {"op_type": entry.op_type, "algorithm": entry.algorithm}
    what = f"{entry.op_type} {entry.algorithm}"
    if timings is None:
        return Row(entry.name, "shard", entry.compute_seconds, None, note=f"{what}; not timed (only the {timed} ops "
                   "predicted slowest are: --max-ops)", extra=extra)
    slowest = max(timings, key=lambda t: t.median)
    return Row(entry.name, "shard", entry.compute_seconds, slowest.median, slowest, note=what,
               extra={**extra, "devices": [t.median for t in timings]})


def _time_original(model, options) -> Timing:
    """The model whole on one device, as bench runs every file (:mod:`onnxpart.bench.sessions`)."""
    from onnxpart.bench.sessions import graph_feeds, make_session

    session = make_session(model, options.settings)
    feeds = graph_feeds(session, options.settings, {}, model.name)
    return time_calls(lambda: session.run(None, feeds), options.warmup, options.runs)


def _totals(read: TilePlan, rows: list[Row], whole: Timing, every_op: bool) -> list[Row]:
    """The sum over the timed ops, the original on one device and (every op timed) the compute speed-up."""
    timed = [r for r in rows if r.measured is not None]
    predicted, measured = sum(r.predicted for r in timed), sum(r.measured for r in timed)
    note = "" if every_op else f"{len(timed)} of {len(rows)} ops"
    out = [Row("sharded compute", "tile-compute", predicted, measured, note=note or "reshardings not timed"),
           Row("one device", "original", read.totals.one_device_s, whole.median, whole, file=read.model,
               note="one session.run of the whole model, weight generators included (the shards read theirs)")]
    if every_op and measured > 0 and read.totals.compute_s > 0:
        out.append(Row("compute speed-up", "tile-compute-speed-up", read.totals.one_device_s / read.totals.compute_s,
                       whole.median / measured, quantity="ratio"))
    return out


def _summary(read: TilePlan, rows: list[Row], whole: Timing, overhead: float) -> dict:
    shards = [r for r in rows if r.kind == "shard" and r.error is not None]
    errors = sorted(abs(r.error) for r in shards)
    compute = next(r for r in rows if r.kind == "tile-compute")
    return {"devices": int(np.prod(read.mesh.shape)), "mesh": list(read.mesh.shape), "ops": len(read.ops),
            "ops_timed": len(shards), "compute_predicted": compute.predicted, "compute_measured": compute.measured,
            "compute_ratio": compute.measured / compute.predicted if compute.predicted else None,
            "median_op_error": errors[len(errors) // 2] if errors else None,
            "worst_op_error": errors[-1] if errors else None,
            "one_device_predicted": read.totals.one_device_s, "one_device_measured": whole.median,
            "call_overhead_s": overhead,
            "reshardings_not_timed": {"count": read.totals.reshardings, "predicted_s": read.totals.resharding_s,
                                      "why": "virtual devices on one machine: a real multi-device run needs "
                                             "the devices"}}


def _call_overhead(warmup: int, runs: int) -> float:
    """The median seconds of one ``session.run`` of an Identity of one float (verify's session settings):
    what every shard row carries besides its op."""
    from onnx import TensorProto, helper

    from onnxpart import runtime

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "call",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    session = runtime.make_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"x": np.zeros(1, np.float32)}
    return time_calls(lambda: session.run(["y"], feeds), warmup, max(runs, 20)).median
