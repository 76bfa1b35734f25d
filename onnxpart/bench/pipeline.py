"""The real pipeline on this machine: one worker process per stage, micro-batches streamed stage to stage
through queues (GPipe-style pipelining without the backward pass: Huang et al., NeurIPS 2019, Sec. 2.2).

Each worker is pinned to its own cores (``os.sched_setaffinity``; the free cores split evenly, one per
worker at least, where there are as many as workers — otherwise the workers share them and the summary
says so), runs its stages' files in onnxruntime with as many intra-op threads as it has cores (or
``--threads``), and forwards what later stages read of what the stages make. The model's own inputs (the same
seeded ones for every micro-batch) are each worker's from the start, and its outputs stay in the worker that
makes them: what travels between processes is what one stage hands on, the traffic the manifest prices, not
a client's requests and answers through this harness's pipes (pickled, several MB a micro-batch for a
decoder's logits and KV cache: more than its stages' compute). Measured:

* **period**: ``micro_batches`` inputs put in at once; the mean interval between completions at the end of
  the pipeline, first to last (results come out in bunches, where the median interval is not the rate),
  median and spread over the streams; throughput = 1 / period;
* **latency**: one input at a time through the empty pipeline (put to received);
* **speed-up**: streams and as many single inputs in turns, until ``runs`` single inputs and ``min_seconds``
  (:func:`onnxpart.bench.timing.in_turns`); each round's single inputs' median over its stream's period, the
  pipeline's gain measured a few milliseconds apart, which a shared machine's drift does not move;
* **one worker**: the same stages in one worker (the first worker's cores and threads), one after another:
  the throughput a pipeline must beat;
* **each worker's busy time** per micro-batch while streaming (its files' runs, timed inside it): against the
  stage's time alone, what running beside the other workers costs it (shared caches and memory bandwidth).

Workers are forked inside :func:`onnxpart.interrupts.forking`, bound to their parent
(:func:`onnxpart.children.bound_to_parent`: SIGTERM ends them, Ctrl-C is the parent's, Linux ends them with it),
and are terminated, then killed (:func:`onnxpart.children.end`), when the pipeline's ``with`` block ends for any
reason: nothing is left running after an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from onnxpart import children, interrupts
from onnxpart.bench.sessions import Settings, free_cores
from onnxpart.bench.timing import Streamed, in_turns


@dataclass(frozen=True)
class Worker:
    """One worker's job: ``files`` (with the tensors each reads) run in order, ``forward`` the tensors it
    passes on, on ``cores`` with ``threads`` intra-op threads; the model inputs it reads come with the feeds
    it is started with."""

    files: tuple[tuple[str, tuple[str, ...]], ...]
    forward: frozenset[str]
    cores: tuple[int, ...]
    threads: int


def plan_workers(stages: Sequence[tuple[str, Sequence[str], Sequence[str]]], groups: Sequence[Sequence[int]],
                 settings: Settings) -> tuple[list[Worker], bool]:
    """Workers for ``groups`` of stage indices (each group one worker), stages given as (file, reads,
    makes): the cores split evenly among them when there are enough (else shared, not pinned)."""
    cores = free_cores()
    pinned = len(cores) >= len(groups)
    share = len(cores) // len(groups) if pinned else len(cores)
    reads_after = [set().union(*(stages[j][1] for j in range(i + 1, len(stages)))) for i in range(len(stages))]
    made = set().union(*(s[2] for s in stages))
    workers = []
    for w, group in enumerate(groups):
        mine = tuple(cores[w * share:(w + 1) * share]) if pinned else tuple(cores)
        forward = frozenset(reads_after[group[-1]] & made)
        workers.append(Worker(tuple((stages[i][0], tuple(stages[i][1])) for i in group), forward, mine,
                              settings.threads or (len(mine) if pinned else 1)))
    return workers, pinned


def run_pipeline(workers: list[Worker], settings: Settings, feeds: dict, warmup: int, runs: int,
                 micro_batches: int, min_seconds: float = 0.0) -> Streamed:
    """The period, latency, speed-up and each worker's busy time while streaming of ``workers`` chained by
    queues (module docstring): streams of ``micro_batches`` and as many single inputs, in turns
    (:func:`onnxpart.bench.timing.in_turns`), until ``runs`` single inputs and ``min_seconds``."""
    with Pipeline(workers, settings, feeds) as pipe:
        for _ in range(warmup):
            pipe.one()
        busy: list[tuple[float, ...]] = []

        def stream(count: int) -> list[float]:
            done, stream_busy = pipe.stream(count)
            busy.extend(stream_busy)
            return done

        turns = in_turns(stream, pipe.one, max(micro_batches, 2), runs, min_seconds)
    return Streamed.of(turns, busy)


class Pipeline:
    """Started worker processes, the queues between them and a control queue (each worker's ``ready`` or
    its error); ``with`` ends every worker however the block ends."""

    def __init__(self, workers: list[Worker], settings: Settings, feeds: dict):
        context = multiprocessing.get_context("fork")
        self.queues = [context.Queue() for _ in range(len(workers) + 1)]
        self.control = context.Queue()
        self.processes = [context.Process(target=_work, args=(worker, settings, feeds, self.queues[i],
                                                              self.queues[i + 1], self.control, os.getpid()),
                                          daemon=True, name=f"onnxpart-bench-{i}")
                          for i, worker in enumerate(workers)]

    def __enter__(self) -> "Pipeline":
        try:
            for process in self.processes:
                with interrupts.forking():
                    process.start()
            ready = 0
            while ready < len(self.processes):  # each worker says it has built its sessions
                ready += self._wait(self.control) == ("ready",)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        children.end(self.processes)
        for q in (*self.queues, self.control):
            q.cancel_join_thread()
            q.close()

    def one(self) -> float:
        """Seconds from putting one input in to receiving its result."""
        start = time.perf_counter()
        self._put([0])
        self._wait(self.queues[-1])
        return time.perf_counter() - start

    def stream(self, count: int) -> tuple[list[float], list[tuple[float, ...]]]:
        """Put ``count`` inputs in at once; (the time each result came out, each one's busy seconds per
        worker)."""
        self._put(range(count))
        done, busy = [], []
        for _ in range(count):
            busy.append(self._wait(self.queues[-1])[2])
            done.append(time.perf_counter())
        return done, busy

    def _put(self, indices) -> None:
        """Put the inputs ``indices`` in, with Ctrl-C and SIGTERM held until they are in: an interrupt raised
        inside ``Queue.put`` can leave the queue's buffer lock held, and closing the queue then waits on it
        forever (a signal during the stream hung the command once in about ten)."""
        with interrupts.deferred():
            for index in indices:
                self.queues[0].put((index, {}, ()))

    def _wait(self, source):
        """The next message on ``source``; a worker's error (on the control queue) or death is an error."""
        return children.receive(source, self.control, self.processes, "pipeline worker")


def _work(worker: Worker, settings: Settings, feeds: dict, inbox, outbox, control, parent: int) -> None:
    """A worker's loop: build the sessions, say so, then run every input through its files."""
    children.bound_to_parent(parent)
    try:
        _serve(worker, settings, feeds, inbox, outbox, control)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        children.report(control, exc)


def _serve(worker: Worker, settings: Settings, feeds: dict, inbox, outbox, control) -> None:
    from onnxpart.bench.sessions import make_session

    if worker.cores:
        os.sched_setaffinity(0, worker.cores)
    sessions = [make_session(path, settings, threads=worker.threads) for path, _ in worker.files]
    sessions = [(session, [arg.name for arg in session.get_inputs()]) for session in sessions]
    own = {name: feeds[name] for _, reads in sessions for name in reads if name in feeds}
    control.put(("ready",))
    while True:
        index, received, busy = inbox.get()
        start = time.perf_counter()
        values = {**own, **received}
        for session, reads in sessions:
            names = [o.name for o in session.get_outputs()]
            values.update(zip(names, session.run(names, {name: values[name] for name in reads})))
        outbox.put((index, {k: v for k, v in values.items() if k in worker.forward},
                    (*busy, time.perf_counter() - start)))
