"""What the sweep tests share: the tiny grid, reading a sweep folder, rows without their timings, and the
processes still working for a sweep folder."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from tests.conftest import FIXTURES

DIAMOND = FIXTURES / "diamond.onnx"
BLOCK = FIXTURES / "transformer_block.onnx"

#: 6 jobs, about 2 s each here: partition k = 1..2 on two models, and remat at 95% (the diamond's
#: 95% is below what any sequence needs: a job that fails with exit 4, infeasible).
TINY = [str(DIAMOND), str(BLOCK), "--partition", "k=1,2", "--remat", "budget=95%", "--time-limit", "1"]

#: Row fields that say how and where a job ran, not what it found.
PLACEMENT = ("seconds", "peak_rss_bytes", "node")


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def csv_rows(folder: Path) -> list[dict]:
    with open(folder / "results.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def results(folder: Path) -> list[dict]:
    """results.jsonl without the fields that differ from run to run (timings, node)."""
    return [{k: v for k, v in row.items() if k not in PLACEMENT} for row in rows(folder)]


def records(folder: Path) -> dict[str, int]:
    """Each finished job's record file and its modification time (ns): unchanged means not rerun."""
    return {p.name: p.stat().st_mtime_ns for p in sorted((folder / "jobs").glob("*.json"))}


def processes_writing_to(folder: Path) -> dict[int, str]:
    """Live processes whose arguments name ``folder`` (the sweep, jobs running for it), by pid."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in text:
            found[int(proc.name)] = text
    return found
