"""LLM scale (issue 30) for every strategy: wall time, peak RSS and gap of the CLI at 2,000 to 20,000 ops,
and on the Llama-3-70B-shaped export.

* Op counts: ``tests/scale_graphs.py``'s random DAG (costs.json, no weights) at each size; ``partition -k 8``,
  ``-k 16`` and ``-k 64``, ``remat --budget 95%`` and ``80%``, ``schedule`` on CPU + T4 + A100 and ``tile --mesh
  2x4``, each with ``--time-limit T``.
* 70B: ``scripts/make_llama70b.py`` (141 GB of sparse external data, planned at batch 1, sequence 128):
  ``partition -k 8`` (with ``--verify``, which says it is skipped), ``-k 16``, ``-k 80`` at ``--time-limit
  60``; ``-k 8`` again at sequence 2048 with ``--freeze-dims`` (static stage files), and ``remat`` on its
  stage 1 with ``--budget 80%`` and ``--budget min``; ``schedule`` on a host and 8 A100s
  (``fixtures/systems/host_8xa100.yaml``) and ``tile --mesh 2x4``, at ``--time-limit 60``.
* The issue's quality row: ``partition -k 64 --time-limit 60`` on a 9,900-op transformer (300 pre-LN blocks,
  d = 256, MLP 1024; ``scripts/make_fixtures.transformer_block``), 0.95 GB of weights in the file.

Each command is a child process (``bench_scale.run_child``: peak RSS from ``os.wait4``, its workers
included); the 1-minute load average is recorded beside each row, since the machine is shared. Writes the
``scale-llm`` section of BENCHMARKS.md.

    .venv/bin/python scripts/bench_scale_llm.py                       # everything into BENCHMARKS.md
    .venv/bin/python scripts/bench_scale_llm.py --ops 2000 --no-70b --no-write
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, machine_line, publish  # noqa: E402
from bench_scale import CLI, fmt_bytes, run_child, written  # noqa: E402
from make_llama70b import DIMS, Shape, build  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests import scale_graphs  # noqa: E402

MIB = 1 << 20
SYSTEMS = ROOT / "fixtures" / "systems"
#: each strategy's arguments on the op-count graphs
STRATEGY_ARGS = (("partition", ["-k", "8"]), ("partition", ["-k", "16"]), ("partition", ["-k", "64"]),
                 ("remat", ["--budget", "95%"]), ("remat", ["--budget", "80%"]),
                 ("schedule", ["--system", str(SYSTEMS / "cpu_t4_a100.yaml")]), ("tile", ["--mesh", "2x4"]))
#: schedule's and tile's arguments on the 70B-shaped export (the issue's 8 A100s and a CPU host; a 2x4 mesh)
LLAMA_ARGS = (("schedule", ["--system", str(SYSTEMS / "host_8xa100.yaml")]), ("tile", ["--mesh", "2x4"]))


def op_rows(work: Path, sizes: list[int], limit: float, timeout: float) -> list[dict]:
    rows = []
    for n in sizes:
        graph = scale_graphs.write(scale_graphs.random_dag(n), work / f"dag_{n}.json")
        for command, args in STRATEGY_ARGS:
            out = work / f"out_{command}_{n}"
            rows.append(run(f"random DAG, {n:,} ops", command, [str(graph), *args, "--time-limit", str(limit),
                                                                "-o", str(out), "--json"], work, out, timeout))
    return rows


def llama_rows(work: Path, timeout: float) -> list[dict]:
    info = build(work / "llama70b", Shape())
    model = info["path"]
    dims = [f"{name}={value}" for name, value in DIMS.items()]
    rows = []
    for k in (8, 16, 80):
        out = work / f"llama_k{k}"
        argv = [model, "-k", str(k), "--time-limit", "60", "-o", str(out), "--json", *_dims(dims)]
        rows.append(run(f"Llama-3-70B shape, k = {k}", "partition", argv + ["--verify"] * (k == 8), work, out,
                        timeout))
    for command, args in LLAMA_ARGS:
        out = work / f"llama_{command}"
        argv = [model, *args, "--time-limit", "60", "-o", str(out), "--json", *_dims(dims)]
        rows.append(run(f"Llama-3-70B shape, {command}", command, argv, work, out, timeout))
    # remat's stage: static dims (--freeze-dims), at a sequence where activations matter
    out = work / "llama_k8_2048"
    argv = [model, "-k", "8", "--time-limit", "60", "-o", str(out), "--json", "--freeze-dims",
            *_dims(["batch=1", "sequence=2048"])]
    rows.append(run("Llama-3-70B shape at sequence 2048, k = 8, --freeze-dims", "partition", argv, work, out, timeout,
                    keep=True))
    for budget in ("80%", "min"):
        remat_out = work / f"llama_remat_{budget.rstrip('%')}"
        argv = [str(out / "stage_1.onnx"), "--budget", budget, "--time-limit", "60", "-o", str(remat_out), "--json"]
        rows.append(run("Llama-3-70B shape, stage 1 of 8 at sequence 2048", "remat", argv, work, remat_out, timeout))
    return rows


def transformer_row(work: Path, timeout: float) -> dict:
    """partition -k 64 on the 9,900-op transformer, whose weights (0.95 GB) are in the file."""
    model = work / "transformer_300.onnx"
    # built in a child: a process's peak RSS carries over to the children it starts, so the model's
    # 0.95 GB proto must not be in this one
    subprocess.run([sys.executable, "-c", "import sys, onnx; sys.path.insert(0, sys.argv[1]); "
                    "from make_fixtures import transformer_block; "
                    "onnx.save(transformer_block(dim=256, hidden=1024, layers=300), sys.argv[2])",
                    str(Path(__file__).resolve().parent), str(model)], check=True)
    out = work / "transformer_k64"
    argv = [str(model), "-k", "64", "--time-limit", "60", "-o", str(out), "--json"]
    row = run("transformer, 300 layers (9,900 ops, 0.95 GB weights), k = 64", "partition", argv, work, out, timeout)
    model.unlink()
    return row


def _dims(dims: list[str]) -> list[str]:
    return [arg for dim in dims for arg in ("--dim", dim)]


def run(what: str, command: str, argv: list[str], work: Path, out: Path, timeout: float, keep: bool = False) -> dict:
    """One CLI run as a child: the row, with the JSON result's seconds, answer and gap when it succeeded."""
    load = os.getloadavg()[0]
    row = {"what": what, "command": command, "argv": argv, "load": load,
           **run_child([str(CLI), command, *argv], work / f"{out.name}.log", timeout)}
    row["written_bytes"], row["allocated_bytes"] = written(out)
    result = _result(work / f"{out.name}.out")
    if result is not None:
        cert = result["certificate"]
        row.update(seconds=result["seconds"], gap=cert.get("gap"), ops=_ops(result),
                   verify=(result.get("verify") or {}).get("skipped"))
    print(line(row), flush=True)
    if out.exists() and not keep:
        shutil.rmtree(out)
    return row


def _result(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ops(result: dict) -> int | None:
    stages = (result.get("manifest") or {}).get("stages")
    return sum(len(s["ops"]) for s in stages) if stages else None


def line(r: dict) -> str:
    code = f"{r['exit']}" + (" (timeout)" if r["timed_out"] else "")
    if r["exit"] != 0 and r["stderr"]:
        code += f": {r['stderr'].replace('|', '/')[:110]}"
    seconds = r.get("seconds") or {}
    split = "/".join(f"{seconds.get(p, 0):.1f}" for p in ("load", "solve", "write")) if seconds else "—"
    gap = "—" if r.get("gap") is None else f"{100 * r['gap']:.2f}%"
    notes = r.get("verify") or ""
    return (f"| {r['what']} | {r['command']} {_options(r['argv'])} | {code} | {r['wall_s']:.1f} | {split} | "
            f"{r['peak_rss_bytes'] / MIB:,.0f} | {gap} | {fmt_bytes(r['written_bytes'])} / "
            f"{fmt_bytes(r['allocated_bytes'])} | {r['load']:.1f} | {notes} |")


def _options(argv: list[str]) -> str:
    flags = {"--verify", "--freeze-dims"}
    keep = {"-k", "--budget", "--time-limit", "--mesh", "--system", *flags}
    shown = [a if a in flags else f"{a} {Path(argv[i + 1]).name if a == '--system' else argv[i + 1]}"
             for i, a in enumerate(argv) if a in keep]
    return "`" + " ".join(shown) + "`"


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "## Scale: LLM-sized graphs, every strategy (issue 30)",
        "",
        f"Machine: {machine_line()} (shared: the `load` column is the 1-minute load average when the row "
        f"started). Run {datetime.datetime.now().isoformat(timespec='minutes')}. Command: `{command}`.",
        "Each command is a child process; peak RSS is its `ru_maxrss` with its bound workers; `seconds` is the "
        "JSON result's load / solve / write; `gap` = 1 − LB/UB of the certificate; `written / allocated` = "
        "the output's file sizes / its `st_blocks × 512` (sparse external data allocates nothing). Targets: "
        "load + solve ≤ 1.1·T + 5 s, peak RSS ≤ 1.5 GB without weights (≤ 1.5 GB + the largest tensor with).",
        "",
        "| graph | command | exit | wall (s) | seconds load/solve/write | peak RSS (MiB) | gap | written / allocated "
        "| load | verify |",
        "|---|---|---|---:|---|---:|---:|---|---:|---|",
    ]
    return "\n".join(lines + [line(r) for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="2000,5000,10000,20000", help="op counts, comma-separated")
    ap.add_argument("--time-limit", type=float, default=10.0, help="--time-limit of the op-count rows")
    ap.add_argument("--no-70b", action="store_true", help="skip the Llama-3-70B-shaped rows")
    ap.add_argument("--no-transformer", action="store_true", help="skip the 9,900-op transformer row")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command (killed after)")
    ap.add_argument("--no-write", action="store_true", help="print the table instead of writing BENCHMARKS.md")
    ap.add_argument("--json", type=Path, help="also dump the raw rows here")
    ap.add_argument("--section", default="scale-llm",
                    help="the BENCHMARKS.md section to write (another keeps the full run's rows)")
    args = ap.parse_args()
    command = shlex.join([".venv/bin/python", "scripts/bench_scale_llm.py", *sys.argv[1:]])
    work = Path(tempfile.mkdtemp(prefix="onnxpart_scale_llm_", dir="/tmp"))
    try:
        rows = op_rows(work, [int(n) for n in args.ops.split(",") if n.strip()], args.time_limit, args.timeout)
        if not args.no_transformer:
            rows.append(transformer_row(work, args.timeout))
        if not args.no_70b:
            rows += llama_rows(work, args.timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    publish(args.section, markdown(rows, command), args.no_write)


if __name__ == "__main__":
    main()
