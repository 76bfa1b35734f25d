"""The Ray engine (``--engine ray``; ``pip install onnxpart[cluster]``): each job is a Ray task with
``num_cpus`` = its workers and the custom resources its grid names (``resources: {a100: 1}`` runs it only
on a node that has that device), running the same child process as the local engine on a worker node.

Models reach the workers one of two ways:

* ``shared_fs``: the models, the files the options name and the sweep's folder are at the same paths on
  every node (a shared filesystem); jobs write straight into the sweep's folder.
* otherwise the Ray object store: each model's files (the model and its external data, at most
  :data:`MAX_OBJECT_BYTES`) are put once and written to a temporary folder on the worker; the job's folder
  comes back to the driver as bytes. A larger model is refused before any job starts (never pickled): it
  must be on a shared filesystem. Files the options name (a system file) are read at their path on the
  worker, so keep them where every node has them.

A node lost mid-sweep: Ray reruns its tasks elsewhere (``max_retries``). Ctrl-C cancels every task
(``ray.cancel(force=True)``: the worker and, through ``PR_SET_PDEATHSIG``, its command end).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
from pathlib import Path
from typing import Any, Optional

from onnxpart.errors import UserError
from onnxpart.sweep.engine_local import Finished, Started
from onnxpart.sweep.folder import SweepFolder, clear_job
from onnxpart.sweep.grid import Job
from onnxpart.sweep.job import Outcome, run_command
from onnxpart.sweep.models import model_files

#: Largest model (all its files) sent through the object store; larger ones need --shared-fs.
MAX_OBJECT_BYTES = 1 << 30
#: Times Ray reruns a job whose worker or node died.
MAX_RETRIES = 3


class RayEngine:
    """Jobs as Ray tasks on the cluster at ``address`` (None: a fresh local Ray with ``local_cpus``)."""

    def __init__(self, jobs: list[Job], address: Optional[str], *, shared_fs: bool, slots: Optional[int],
                 local_cpus: int):
        self.ray = _import_ray()
        self.shared_fs = shared_fs
        self.slots = slots or max(1, len(jobs))
        self.payloads = {} if shared_fs else _payloads(jobs)
        self._connect(address, local_cpus)
        try:
            _check_fits(self.ray, jobs, address)
        except BaseException:
            self.close()
            raise

    def _connect(self, address: Optional[str], local_cpus: int) -> None:
        where = address or "a local Ray"
        if address and address != "auto":
            _check_answers(address)
        try:
            if address:
                self.ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                _private_token()
                self.ray.init(num_cpus=local_cpus, include_dashboard=False, log_to_driver=False,
                              logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"cannot reach the Ray cluster at {where}: {str(exc).splitlines()[0]}") from None

    def close(self) -> None:
        self.ray.shutdown()

    def run(self, jobs: list[Job], folder: SweepFolder, started: Started,
            finished: Finished) -> None:
        """Submit ``jobs`` (at most ``slots`` in flight); ``finished(job, outcome, node)`` as each ends."""
        ray = self.ray
        task = ray.remote(_run_on_worker)
        refs = {path: ray.put(files) for path, files in self.payloads.items()}
        pending, in_flight = list(reversed(jobs)), {}
        try:
            while pending or in_flight:
                while pending and len(in_flight) < self.slots:
                    job = pending.pop()
                    folder.clear(job.name)
                    model = str(job.model_path) if self.shared_fs else refs[job.model_path]
                    target = str(folder.job_dir(job.name).resolve()) if self.shared_fs else None
                    ref = task.options(num_cpus=job.workers, resources=job.resources or None,
                                       max_retries=MAX_RETRIES, retry_exceptions=False).remote(
                        job.strategy, model, job.model_path.name, list(job.argv), target, job.timeout)
                    in_flight[ref] = job
                    started(job)
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.25)
                for ref in ready:
                    job = in_flight.pop(ref)
                    outcome, node = self._result(ref)
                    if outcome.files:
                        _unpack(outcome.files, folder.job_dir(job.name))
                    finished(job, outcome, node)
        except KeyboardInterrupt:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            raise

    def _result(self, ref: Any) -> tuple[Outcome, str]:
        """A task's (outcome, node); a task Ray itself gave up on is a failed job saying why."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.OutOfMemoryError:
            return Outcome("killed", 137, "Ray's memory monitor killed the job (out of memory)", None, 0.0, 0), "?"
        except ray.exceptions.RayError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return Outcome("failed", 1, f"Ray: {type(exc).__name__}: {first}"[:300], None, 0.0, 0), "?"


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("--engine ray needs Ray: pip install onnxpart[cluster]") from None
    return ray


def _check_answers(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that refuses a TCP connection is an error at once, not after
    Ray's minute of retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"cannot read the Ray address {address!r}: use auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _check_fits(ray: Any, jobs: list[Job], address: Optional[str]) -> None:
    """Every job must fit on some alive node (its CPUs and custom resources), or it would wait forever."""
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    for job in jobs:
        needs = {"CPU": float(job.workers), **job.resources}
        if not any(all(node.get(name, 0) >= amount for name, amount in needs.items()) for node in nodes):
            offered = sorted({name for node in nodes for name in node if not name.startswith("node:")})
            raise UserError(f"no node of the Ray cluster at {address or 'this machine'} has "
                            f"{', '.join(f'{n}={a:g}' for n, a in needs.items())} for job {job.name} "
                            f"(its nodes offer {', '.join(offered)})")


def _payloads(jobs: list[Job]) -> dict[Path, dict[str, bytes]]:
    """Each model's files by name relative to its folder, for the object store; a model over
    :data:`MAX_OBJECT_BYTES` is refused."""
    from onnxpart.units import format_bytes

    payloads = {}
    for job in jobs:
        if job.model_path in payloads:
            continue
        files = model_files(job.model_path)
        size = sum(path.stat().st_size for path in files)
        if size > MAX_OBJECT_BYTES:
            raise UserError(f"model {job.model} is {format_bytes(size)}, too large for Ray's object store "
                            f"(at most {format_bytes(MAX_OBJECT_BYTES)}): put the models and -o on a filesystem "
                            "every node mounts at the same path and pass --shared-fs")
        payloads[job.model_path] = {str(p.relative_to(job.model_path.parent)): p.read_bytes() for p in files}
    return payloads


def _run_on_worker(strategy: str, model: Any, model_name: str, argv: list[str], folder: Optional[str],
                   timeout: float) -> tuple[Outcome, str]:
    """The Ray task: the job's command on this node. With a shared filesystem it writes the job's
    ``folder``; otherwise ``model`` is the model's files, written to a temporary folder, and the job's
    folder comes back in ``Outcome.files``. -> (outcome, the Ray node id)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    if folder is not None:
        clear_job(Path(folder).parent, Path(folder).name)  # an attempt on a node that was lost
        return run_command(strategy, Path(model), argv, Path(folder), timeout), node
    with tempfile.TemporaryDirectory(prefix="onnxpart-sweep-") as tmp:
        for name, data in model.items():
            path = Path(tmp, "model", name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        out = Path(tmp, "out")
        outcome = run_command(strategy, Path(tmp, "model", model_name), argv, out, timeout)
        if out.is_dir():
            outcome.files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        return outcome, node


def _unpack(files: dict[str, bytes], target: Path) -> None:
    """A job's folder from the worker, committed atomically like a command's own output."""
    from onnxpart.files import OutputDir, atomic_write_bytes

    with OutputDir(target, force=True) as out:
        for name, data in files.items():
            path = out.path(name)
            os.makedirs(path.parent, exist_ok=True)
            atomic_write_bytes(path, data)


def _private_token() -> None:
    """A fresh token for the local Ray this run starts and stops, in the environment its processes inherit,
    unless the user gave one: Ray's token authentication otherwise writes ``~/.ray/auth_token``, which
    fails with a read-only or missing home (issue 40), and the token would outlive the run."""
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # 256 bits, as Ray's own generator
