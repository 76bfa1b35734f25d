"""The machine every bench number was measured on: CPU model, cores (and those this process may use), the
OS, onnxruntime's version and providers, the load average when the run started, and the date — recorded
with every row, since a measurement means nothing without them."""

from __future__ import annotations

import datetime
import os
import platform


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` says where that is not there."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict:
    """bench.json's ``machine``."""
    import onnxruntime as ort

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "idle_cores": round(idle_cores(), 2),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def idle_cores() -> float:
    """Cores this process may use less the 1-minute load average: how many are free for a pipeline."""
    return len(os.sched_getaffinity(0)) - os.getloadavg()[0]
