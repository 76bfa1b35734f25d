"""The time-limit property over its whole grid (issue 40): every cell of ``tests/limit_grid.py`` on every
shape of ``tests/limit_graphs.py`` at each size, each command a child process (peak RSS from ``os.wait4``),
against load + solve ≤ 1.1·T + 5 s and peak RSS ≤ 1.5 GB. ``tests/test_time_limits.py`` checks a subset
of the same grid in ``make test``. Writes the ``limits`` section of BENCHMARKS.md.

    .venv/bin/python scripts/bench_limits.py                                # 2,000 and 20,000 ops, T = 5 s
    .venv/bin/python scripts/bench_limits.py --ops 20000 --shapes chain --no-write
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, machine_line, publish  # noqa: E402
from bench_scale import CLI, run_child  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests import limit_graphs, limit_grid  # noqa: E402

MIB = 1 << 20


def run_cell(model: Path, shape: str, n: int, setting: tuple, workers: tuple, args, work: Path) -> dict:
    command, options = setting
    out = work / "out"
    argv = limit_grid.argv(command, options, workers, model, out, args.time_limit)
    row = {"shape": shape, "ops": n, "cell": limit_grid.label(command, options, workers),
           "load": os.getloadavg()[0], **run_child([str(CLI), *argv], work / "cell.log", args.timeout)}
    try:
        result = json.loads((work / "cell.out").read_text())
    except (OSError, ValueError):
        result = {}
    seconds = result.get("seconds") or {}
    row["seconds"] = seconds
    row["gap"] = (result.get("certificate") or {}).get("gap")
    judge(row, args.time_limit)
    shutil.rmtree(out, ignore_errors=True)
    print(line(row), flush=True)
    return row


def judge(row: dict, time_limit: float) -> None:
    """``within``: load + solve ≤ 1.1·T + 5 s; a run that prints no result (exit 4, a proven infeasible
    budget, with its one line) is judged by its whole wall time, start-up included; ``rss_ok``: ≤ 1.5 GB."""
    seconds = row["seconds"]
    spent = seconds["load"] + seconds["solve"] if seconds else row["wall_s"] if row["exit"] == 4 else math.inf
    row["within"] = spent <= limit_grid.limit(time_limit)
    row["rss_ok"] = row["peak_rss_bytes"] <= limit_grid.RSS_LIMIT


def line(r: dict) -> str:
    s = r["seconds"]
    code = f"{r['exit']}" + (" (timeout)" if r["timed_out"] else "")
    if r["exit"] not in (0, 3) and r["stderr"]:
        code += ": " + r["stderr"].replace("|", "/")[:90]
    split = f"{s['load']:.1f} + {s['solve']:.1f}" if s else f"({r['wall_s']:.1f} wall)" if r["exit"] == 4 else "—"
    verdict = "yes" if r["within"] and r["rss_ok"] else "**no**"
    gap = "—" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
    return (f"| {r['shape']} | {r['ops']:,} | `{r['cell']}` | {code} | {r['wall_s']:.1f} | {split} | "
            f"{r['peak_rss_bytes'] / MIB:,.0f} | {gap} | {verdict} | {r['load']:.1f} |")


def markdown(rows: list[dict], command: str, time_limit: float) -> str:
    bound = limit_grid.limit(time_limit)
    held = sum(r["within"] and r["rss_ok"] for r in rows)
    return "\n".join([
        "## Limits: `--time-limit` and memory over the whole grid (issue 40)",
        "",
        f"Machine: {machine_line()}. Run {datetime.datetime.now().isoformat(timespec='minutes')}. "
        f"Command: `{command}`.",
        f"Every cell is a child process with `--time-limit {time_limit:g}`; the property is load + solve ≤ "
        f"1.1·T + 5 s = {bound:g} s (the `--json` result's `seconds`) and peak RSS ≤ 1.5 GB (`ru_maxrss` with "
        "its workers). Exit 4 is an answer (a proven infeasible budget, or the smallest budget reached), judged "
        "by its whole wall time, start-up included. Graphs: `tests/limit_graphs.py`; "
        "cells: `tests/limit_grid.py`; `load` is the 1-minute load average when the cell started.",
        "",
        f"**{held} of {len(rows)} cells hold the property.**",
        "",
        "| graph | ops | cell | exit | wall (s) | load + solve (s) | peak RSS (MiB) | gap | holds | load |",
        "|---|---:|---|---|---:|---:|---:|---:|---|---:|",
        *[line(r) for r in rows],
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="2000,20000", help="op counts, comma-separated")
    ap.add_argument("--shapes", default=",".join(limit_graphs.SHAPES), help="graph shapes, comma-separated")
    ap.add_argument("--commands", default="partition,remat,schedule,tile", help="commands, comma-separated")
    ap.add_argument("--time-limit", type=float, default=5.0, help="--time-limit of every cell")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per cell (killed after)")
    ap.add_argument("--no-write", action="store_true", help="print the table instead of writing BENCHMARKS.md")
    ap.add_argument("--json", type=Path, help="also dump the raw rows here")
    ap.add_argument("--render", type=Path, help="judge and print the rows of an earlier --json dump, running nothing")
    args = ap.parse_args()
    command = shlex.join([".venv/bin/python", "scripts/bench_limits.py", *sys.argv[1:]])
    if args.render:
        rows = json.loads(args.render.read_text())
        for row in rows:
            judge(row, args.time_limit)
        publish("limits", markdown(rows, f"{command} (rows of a run with the same options)", args.time_limit),
                args.no_write)
        return
    commands = args.commands.split(",")
    rows = []
    work = Path(tempfile.mkdtemp(prefix="onnxpart_limits_", dir="/tmp"))
    try:
        for n in (int(n) for n in args.ops.split(",")):
            for shape in args.shapes.split(","):
                model = limit_graphs.build(shape, n, work / f"{shape}_{n}.onnx")
                for setting in limit_grid.SETTINGS:
                    if setting[0] in commands:
                        rows += [run_cell(model, shape, n, setting, workers, args, work)
                                 for workers in limit_grid.WORKERS]
                model.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    publish("limits", markdown(rows, command, args.time_limit), args.no_write)


if __name__ == "__main__":
    main()
