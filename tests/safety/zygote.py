"""A "zygote" for the command-line tests: one process that has imported onnxpart's command line and the
libraries it loads (onnx, onnxruntime, numpy, the solvers …) once, and forks a child per command. The
child is a real separate process running the real :func:`onnxpart.cli.app.main` with its own argv,
working folder, environment, stdin (``/dev/null``), stdout and stderr (files) and exit code, and ends like
a Python process does (non-daemon threads joined, ``atexit`` handlers run); only the start-up — about a
second of imports per command — is shared. A test that needs a true start-up (signals, the console
script, an environment that changes imports) runs ``python -m onnxpart.cli.app`` instead.

Each child leads a process group of its own, so that a command killed on its time limit takes the
solver processes it started with it.

Protocol (one JSON object per line): the harness writes ``{"args", "cwd", "env", "stdout", "stderr",
"timeout"}`` on the zygote's stdin; the zygote answers ``{"code"}``, or ``{"timeout": true}`` after
killing a child that ran past ``timeout`` seconds. Its first line says it is ready, with whatever the
imports printed on stderr (``preamble``: a command started afresh would print it too).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import redirect_stderr

#: what the commands import when they run: loaded once here, before any fork
PRELOAD = ("onnx", "onnxruntime", "numpy", "highspy", "networkx", "pydantic", "yaml", "ortools.sat.python.cp_model",
           "multiprocessing.popen_fork", "multiprocessing.queues", "multiprocessing.synchronize", "rich.logging",
           "pydantic.type_adapter", "matplotlib.backends.backend_agg")
#: every module of these packages too (imports of the library's own are lazy: each command pays for the
#: strategy it runs, 0.1-0.4 s a fork, hundreds of forks in the suite)
PACKAGES = ("onnxpart", "cli")
#: the libraries' private modules the commands load on first use (skipped where a version lacks them)
PRIVATE = ("rich._emoji_codes", "typer._click.decorators")


def preload() -> str:
    """Import :data:`PRELOAD`, :data:`PACKAGES`, :data:`PRIVATE`, matplotlib's Agg backend and Pillow's
    image plugins; -> what the imports printed on stderr."""
    import importlib
    import pkgutil

    printed = io.StringIO()
    with redirect_stderr(printed):
        for name in PRELOAD:
            importlib.import_module(name)
        for package in map(importlib.import_module, PACKAGES):
            for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
                importlib.import_module(module.name)
        for name in PRIVATE:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        import PIL.Image

        PIL.Image.init()
    return printed.getvalue()


def child(request: dict) -> None:
    """In the forked child: become the command's process, run it, exit with its code (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own process group: a timeout ends the solver processes it started too
        os.chdir(request["cwd"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(path, flags, 0o600), fd)
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from onnxpart.cli import app

        sys.argv = [app.__file__, *request["args"]]
        code = run(app.main)
        shutdown = getattr(threading, "_shutdown", None)  # what the interpreter does at exit
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the zygote
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def run(main) -> int:
    """``main()`` with the exit code the interpreter would give it (a traceback and 1 when it raises)."""
    try:
        main()
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 1


def wait(pid: int, timeout: float) -> dict:
    """The child's exit code, or kill it once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"code": os.waitstatus_to_exitcode(status)}
        if time.monotonic() >= deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # killed before it made its group
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(0.005)


def serve() -> None:
    """Answer requests on stdin until it closes."""
    answer = sys.stdout
    answer.write(json.dumps({"ready": True, "preamble": preload()}) + "\n")
    answer.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(request)
        answer.write(json.dumps(wait(pid, request["timeout"])) + "\n")
        answer.flush()


if __name__ == "__main__":
    serve()
