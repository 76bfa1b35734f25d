"""The local engine (the default): the jobs run on this machine, at most ``slots`` at once, each the
strategy command in its own process (:class:`onnxpart.sweep.job.Child`), writing straight into the
sweep's folder. Ctrl-C cancels the running jobs (SIGINT, then SIGKILL) and waits for them to end."""

from __future__ import annotations

import queue
import socket
import threading
from typing import Callable

from onnxpart.sweep.folder import SweepFolder
from onnxpart.sweep.grid import Job
from onnxpart.sweep.job import Child, Outcome

Started = Callable[[Job], None]
Finished = Callable[[Job, Outcome, str], None]


class LocalEngine:
    """``slots`` jobs at once on this machine."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)

    def run(self, jobs: list[Job], folder: SweepFolder, started: Started,
            finished: Finished) -> None:
        """Run ``jobs`` in order; ``finished(job, outcome, node)`` for each as it ends (from this thread)."""
        node = socket.gethostname()
        pending = list(reversed(jobs))
        running: dict[str, Child] = {}
        ended: queue.Queue = queue.Queue()
        try:
            while pending or running:
                while pending and len(running) < self.slots:
                    job = pending.pop()
                    folder.clear(job.name)
                    child = Child(job.strategy, job.model_path, list(job.argv), folder.job_dir(job.name),
                                  folder.jobs)
                    running[job.key] = child
                    threading.Thread(target=lambda j=job, c=child: ended.put((j, c.wait(j.timeout))),
                                     daemon=True).start()
                    started(job)
                job, outcome = _next(ended)
                del running[job.key]
                finished(job, outcome, node)
        except KeyboardInterrupt:
            for child in running.values():
                child.cancel()
            while running:  # jobs that end now still count; the cancelled ones come back "interrupted"
                job, outcome = _next(ended)
                del running[job.key]
                finished(job, outcome, node)
            raise


def _next(ended: queue.Queue):
    """The next ended job; waits in short slices so Ctrl-C is seen at once."""
    while True:
        try:
            return ended.get(timeout=0.25)
        except queue.Empty:
            continue
