"""``--engine ray``: the stages as Ray actors (Moritz et al., OSDI 2018: an actor is a stateful worker whose
method calls run one at a time, in order). One actor per stage holds its onnxruntime session; a micro-batch
is a chain of method calls, each taking the previous call's object reference, so Ray moves each stage's
outputs to the next actor and different micro-batches run on different actors at once — the pipeline.

The rows are those of the local engine (:mod:`onnxpart.bench.stages`): each stage timed inside its actor on the
previous stages' real outputs, the pipeline's period (the mean completion interval of ``micro_batches`` inputs
sent at once) and latency (one input at a time), measured in turns for the speed-up, each actor's busy time per
input while they stream, and one actor holding every stage. Without ``--address`` a fresh
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
from onnxpart.bench.timing import Streamed, Timing, in_turns, time_calls
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
    """(stage timings, the pipeline's :class:`~onnxpart.bench.timing.Streamed`, one actor's period, layout) with
    actors (module docstring)."""
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
    pipe = _pipeline(ray, stages, feeds, options)
    for stage in stages:
        ray.kill(stage)
    one = actor.remote(paths, settings, threads, sorted(outputs))
    serial = _pipeline(ray, [one], feeds, options).period
    layout = f"{len(stages)} Ray actors, {threads} threads each ({int(cpus)} CPUs in the cluster)"
    return timings, pipe, serial, layout


def _pipeline(ray, actors, feeds: dict, options) -> Streamed:
    """Micro-batches chained through ``actors``: streams and single inputs in turns
    (:func:`onnxpart.bench.timing.in_turns`), with each actor's busy time per streamed input."""
    source = ray.put(feeds)
    busy: list[tuple[float, ...]] = []

    def send():
        ref = source
        for actor in actors:
            ref = actor.run.remote(ref)
        return ref

    def one() -> float:
        start = time.perf_counter()
        ray.get(send())
        return time.perf_counter() - start

    def stream(count: int) -> list[float]:
        pending, done = [send() for _ in range(count)], []
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            ray.get(finished)
            done.append(time.perf_counter())
        busy.extend(zip(*ray.get([actor.busy_times.remote(count) for actor in actors])))
        return done

    for _ in range(options.warmup):
        one()
    turns = in_turns(stream, one, max(options.micro_batches, 2), options.runs, options.min_time)
    return Streamed.of(turns, busy)


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
