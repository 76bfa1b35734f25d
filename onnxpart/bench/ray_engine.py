"""``--engine ray``: the stages as Ray actors (Moritz et al., OSDI 2018: an actor is a stateful worker whose
method calls run one at a time, in order). One actor per stage holds its onnxruntime session; a micro-batch
is a chain of method calls, each taking the previous call's object reference, so Ray moves each stage's
outputs to the next actor and different micro-batches run on different actors at once — the pipeline.

The rows are those of the local engine (:mod:`onnxpart.bench.stages`): each stage timed inside its actor on the
previous stages' real outputs, the pipeline's period (the mean completion interval of ``micro_batches`` inputs
sent at once) and latency (one input at a time), each actor's busy time per input while they stream, and one actor
holding every stage. Without ``--address`` a fresh
local Ray is started (as many CPUs as this process may use) and stopped, with a private token
(:func:`onnxpart.sweep.engine_ray._private_token`); with one, the folder must be at the same path on the nodes
(a shared filesystem), as for ``sweep --shared-fs``. Each actor asks for one CPU where the cluster has one per
actor (none otherwise, so that every stage still gets an actor).
"""

from __future__ import annotations

import logging
import time

from onnxpart.bench.chain import check_io
from onnxpart.bench.sessions import Settings, free_cores, graph_feeds, make_session
from onnxpart.bench.timing import Timing, stream_period, time_calls
from onnxpart.errors import UserError


class StageActor:
    """The files of one worker in onnxruntime (made as a Ray actor by :func:`ray_stages`)."""

    def __init__(self, paths: list[str], settings: Settings, threads: int, forward: list[str]):
        self.sessions = [make_session(path, settings, threads=threads) for path in paths]
        self.forward = set(forward)
        self.busy: list[float] = []

    def run(self, values: dict) -> dict:
        """Every file in order on ``values``; -> what later stages read and the model's outputs."""
        start = time.perf_counter()
        values = dict(values)
        for session in self.sessions:
            names = [o.name for o in session.get_outputs()]
            values.update(zip(names, session.run(names, {a.name: values[a.name] for a in session.get_inputs()})))
        self.busy.append(time.perf_counter() - start)
        return {k: v for k, v in values.items() if k in self.forward}

    def busy_times(self, last: int) -> list[float]:
        """The seconds the last ``last`` calls of :meth:`run` took."""
        return self.busy[-last:]

    def time(self, values: dict, warmup: int, runs: int, min_seconds: float) -> Timing:
        """The first file alone on ``values``, warm-up then ``runs`` timed runs (and at least ``min_seconds``)."""
        session = self.sessions[0]
        feeds = {a.name: values[a.name] for a in session.get_inputs()}
        return time_calls(lambda: session.run(None, feeds), warmup, runs, min_seconds)


def ray_stages(folder, units, options):
    """(stage timings, period, latency, one-actor period, layout) with actors (module docstring)."""
    ray = _connect(options.address)
    try:
        return _measure(ray, folder, units, options)
    finally:
        ray.shutdown()


def _measure(ray, folder, units, options):
    settings = options.settings
    paths = [str(folder.file(u.file)) for u in units]
    reads_after = [set().union(*(u.inputs for u in units[i + 1:])) for i in range(len(units))]
    outputs = set().union(*(u.outputs for u in units)) - set().union(*(u.inputs for u in units))
    cpus = ray.cluster_resources().get("CPU", 0)
    actor = ray.remote(num_cpus=1 if cpus >= len(units) else 0)(StageActor)
    threads = settings.threads or 1
    stages = [actor.remote([p], settings, threads, sorted(reads_after[i] | outputs | set(units[i].outputs)))
              for i, p in enumerate(paths)]
    feeds, timings, values = {}, [], {}
    for unit, path, stage in zip(units, paths, stages):
        session = make_session(path, settings)
        check_io(session, unit)
        fresh = graph_feeds(session, settings, values, unit.file)
        feeds.update(fresh)
        values.update(fresh)
        timings.append(ray.get(stage.time.remote(values, options.warmup, options.runs, options.min_time)))
        values.update(ray.get(stage.run.remote(values)))
    period, latency = _pipeline(ray, stages, feeds, options)
    streamed = max(options.micro_batches, 2)
    busy = [Timing.of(times) for times in ray.get([stage.busy_times.remote(streamed) for stage in stages])]
    for stage in stages:
        ray.kill(stage)
    one = actor.remote(paths, settings, threads, sorted(outputs))
    serial, _ = _pipeline(ray, [one], feeds, options)
    layout = f"{len(stages)} Ray actors, {threads} threads each ({int(cpus)} CPUs in the cluster)"
    return timings, period, latency, serial, layout, busy


def _pipeline(ray, actors, feeds: dict, options) -> tuple[Timing, Timing]:
    """(period, latency) of micro-batches chained through ``actors``."""
    source = ray.put(feeds)

    def send():
        ref = source
        for actor in actors:
            ref = actor.run.remote(ref)
        return ref

    for _ in range(options.warmup):
        ray.get(send())
    latency = []
    for _ in range(options.runs):
        start = time.perf_counter()
        ray.get(send())
        latency.append(time.perf_counter() - start)
    pending, done = [send() for _ in range(max(options.micro_batches, 2))], []
    while pending:
        finished, pending = ray.wait(pending, num_returns=1)
        ray.get(finished)
        done.append(time.perf_counter())
    return Timing.of([stream_period(done)]), Timing.of(latency)


def _connect(address):
    """Ray, connected to ``address`` or to a fresh local Ray."""
    from onnxpart.sweep.engine_ray import _check_answers, _import_ray, _private_token

    ray = _import_ray()
    try:
        if address:
            if address != "auto":
                _check_answers(address)
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            _private_token()
            ray.init(num_cpus=len(free_cores()), include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot reach the Ray cluster at {address or 'a local Ray'}: "
                        f"{str(exc).splitlines()[0]}") from None
    return ray
