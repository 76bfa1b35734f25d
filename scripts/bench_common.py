"""Shared by the bench_*.py scripts: the machine line and writing one section of BENCHMARKS.md."""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{datetime.date.today().isoformat()}")


def publish(name: str, markdown: str, print_only: bool) -> None:
    """Print ``markdown`` (``print_only``) or write it as section ``name`` of BENCHMARKS.md."""
    if print_only:
        print(markdown)
    else:
        write_section(name, markdown)
        print(f"wrote the {name} section of {ROOT / 'BENCHMARKS.md'}")


def write_section(name: str, markdown: str) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in BENCHMARKS.md."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text:
        text = text.rstrip() + f"\n\n{start}\n{end}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: f"{start}\n{markdown.strip()}\n{end}", text)
    path.write_text(text)


def cli_json(*args: str) -> dict | None:
    """Run this environment's ``onnxpart`` command line (no colours); -> its ``--json`` output when asked for
    one; a RuntimeError naming the command and its error line when it fails."""
    import json
    import subprocess
    import sys

    command = [str(Path(sys.executable).parent / "onnxpart"), *args]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return json.loads(done.stdout) if "--json" in args else None
