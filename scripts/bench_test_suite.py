"""`.ci/run` from a fresh clone (issue 27: under 5 minutes on 2 cores): the whole set-up and suite as CI
runs it (``make test`` with TMPDIR and HOME new empty folders, issue 40), its wall and CPU seconds, and the
test files that take longest (summed test time, both workers).

The clone is of this repository's HEAD (commit what you measure), in a temporary folder beside which the
shared benchmark folder is linked, as on the machine CI uses.

    .venv/bin/python scripts/bench_test_suite.py               # one run, writes the test-suite section
    .venv/bin/python scripts/bench_test_suite.py --no-write    # print it instead
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, SHARED, machine_line, publish  # noqa: E402

#: A line of pytest's ``--durations=0`` report: seconds, phase, test id.
DURATION = re.compile(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"(\d+) passed.* in ([0-9.]+)s")


def fresh_clone(work: Path) -> tuple[Path, str]:
    """-> (the clone of HEAD in ``work``, its short commit)."""
    clone = work / "proj"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if SHARED.is_dir():
        (work / "shared").symlink_to(SHARED)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    return clone, commit


def run_make_test(clone: Path) -> dict:
    """``.ci/run`` in ``clone`` with every test's duration reported: wall and CPU seconds, its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True,
                          env={**os.environ, "PYTEST_ADDOPTS": "--durations=0"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(code=proc.returncode, wall=wall, cpu=cpu, output=proc.stdout + proc.stderr)


def by_file(output: str) -> dict[str, float]:
    """Summed test seconds (setup, call and teardown) per test file."""
    seconds: dict[str, float] = defaultdict(float)
    for line in output.splitlines():
        match = DURATION.match(line)
        if match:
            seconds[match.group(3).split("::")[0]] += float(match.group(1))
    return dict(seconds)


def markdown(run: dict, commit: str, load: tuple[float, float], top: int) -> str:
    summary = SUMMARY.search(run["output"])
    passed, pytest_wall = (summary.group(1), float(summary.group(2))) if summary else ("?", float("nan"))
    files = sorted(by_file(run["output"]).items(), key=lambda item: -item[1])
    lines = ["## make test from a fresh clone (issue 27: under 5 minutes on 2 cores)", "",
             f"Machine: {machine_line()}; load average {load[0]:.1f} before, {load[1]:.1f} after. "
             f"Command: `.venv/bin/python scripts/bench_test_suite.py` (clone of {commit}, then `.ci/run`: "
             "`make test` with TMPDIR and HOME new empty folders: venv, install with empty caches, `pytest -n 2`).",
             "",
             "| commit | exit | tests passed | .ci/run wall (s) | pytest wall (s) | CPU (s) |",
             "|---|---:|---:|---:|---:|---:|",
             f"| {commit} | {run['code']} | {passed} | {run['wall']:.0f} | {pytest_wall:.0f} | {run['cpu']:.0f} |", "",
             f"The {top} longest test files (summed test seconds over both workers; "
             f"all files: {sum(s for _, s in files):.0f} s):", "",
             "| file | seconds |", "|---|---:|"]
    lines += [f"| `{name}` | {seconds:.1f} |" for name, seconds in files[:top]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=8, help="how many of the longest test files to list")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_test_suite_"))
    try:
        clone, commit = fresh_clone(work)
        load_before = os.getloadavg()[0]
        run = run_make_test(clone)
        load_after = os.getloadavg()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if run["code"] != 0:
        log = Path(tempfile.gettempdir()) / "bench_test_suite.log"
        log.write_text(run["output"])
        sys.exit(f".ci/run failed (exit {run['code']}; its whole output: {log}):\n{run['output'][-3000:]}")
    publish("test-suite", markdown(run, commit, (load_before, load_after), args.top), args.no_write)


if __name__ == "__main__":
    main()
