"""Models far over 2 GiB: peak RSS, wall time and bytes written of the CLI on sparse synthetic transformers.

For each size, scripts/make_big_model.py builds a transformer-like model whose ``model.onnx.data`` is a
sparse file (zeros, no disk), then each command runs as a child process (peak RSS from ``os.wait4``):
``inspect``; ``annotate --cost analytic``; ``partition -k 8 --bounds simple --time-limit 20`` (with
emission); ``remat --budget 90% --time-limit 20``. A failure or timeout is a row, not a crash. Writes
the ``scale`` section of BENCHMARKS.md.

    .venv/bin/python scripts/bench_scale.py                          # 1, 2.5, 8, 20 GiB into BENCHMARKS.md
    .venv/bin/python scripts/bench_scale.py --sizes 1 --no-write     # quick look, table on stdout
    .venv/bin/python scripts/bench_scale.py --sizes 2.5,20 --dtype float16 --json /tmp/scale.json --keep
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, machine_line, publish  # noqa: E402
from make_big_model import build  # noqa: E402

CLI = ROOT / ".venv" / "bin" / "onnxpart"
MIB, MB = 1 << 20, 1e6
PLAN_RSS = 500 * MB            # planning (inspect, annotate): peak RSS at every size
EMIT_RSS_MARGIN = 500 * MB     # emission (partition, remat): largest tensor + this
PARTITION_20G_WALL = 180.0     # 20 GiB partition with emission, seconds


def commands(model: Path, work: Path) -> list[tuple[str, list[str], Path | None]]:
    """(label, argv, output path whose bytes count) for one model."""
    m = str(model)
    return [
        ("inspect", [m], None),
        ("annotate", [m, "--cost", "analytic", "-o", str(work / "costs.json"), "--force"], work / "costs.json"),
        ("partition", [m, "-k", "8", "-o", str(work / "out_part"), "--force", "--time-limit", "20",
                       "--bounds", "simple"], work / "out_part"),
        ("remat", [m, "--budget", "90%", "-o", str(work / "out_remat"), "--force", "--time-limit", "20"],
         work / "out_remat"),
    ]


def run_child(argv: list[str], log: Path, timeout: float) -> dict:
    """Run one child; wall time, peak RSS (its ``ru_maxrss``, KiB, includes its own children), exit code."""
    with open(log.with_suffix(".out"), "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=log.parent)  # cwd: stray temp files land in the work dir
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: only what we started
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: the child is in its own session and would outlive us
            kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)  # negative: killed by that signal (-9: timeout or OOM)
    proc.returncode = code  # reaped by wait4; tells Popen not to wait again
    error = first_error_line(log.with_suffix(".err"))
    if code < 0 and not timed_out.is_set():
        error = f"killed by {signal.Signals(-code).name}{' (out of memory?)' if code == -9 else ''}; {error}"
    return {"exit": code, "timed_out": timed_out.is_set(), "wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "stderr": error}


def first_error_line(path: Path) -> str:
    """The error a failed child printed: a traceback's exception (rich or plain), else the first stderr line."""
    lines = [ln.strip(" │╭╮╰╯─\t") for ln in path.read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    if any(ln.startswith("Traceback") for ln in lines):
        for i in range(len(lines) - 1, -1, -1):
            if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", lines[i]):
                return " ".join(lines[i:])[:200]
    return lines[0][:200] if lines else ""


def written(path: Path | None) -> tuple[int | None, int | None]:
    """(sum of file sizes, allocated bytes ``st_blocks*512``) under ``path`` (a file or a folder)."""
    if path is None or not path.exists():
        return None, None
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    size = blocks = 0
    for p in files:
        st = p.stat()
        size, blocks = size + st.st_size, blocks + st.st_blocks * 512
    return size, blocks


def bench_size(size: float, work: Path, args) -> list[dict]:
    mdir = work / f"model_{size:g}g"
    t0 = time.perf_counter()
    info = build(mdir, size, dtype=args.dtype, mlp_kind=args.mlp, dynamic_batch=args.dynamic_batch)
    print(f"{size:g} GiB: built in {time.perf_counter() - t0:.1f} s: {describe(info)}", flush=True)
    free = shutil.disk_usage(work).free
    if free < 3 * info["data_bytes"]:
        print(f"  warning: {free / (1 << 30):.0f} GiB free under {work}; dense outputs may need ~{3 * size:g} GiB",
              flush=True)
    # a symbolic batch must be resolved to plan (the CLI says so); the flag tests that the loader keeps it
    extra = ["--input-shape", f"x=1x{info['seq']}x{info['hidden']}"] if args.dynamic_batch else []
    rows = []
    for label, argv, out in commands(Path(info["path"]), work):
        row = {"size_gib": size, "command": label, "argv": [str(CLI), label, *argv, *extra], **info}
        row.update(run_child(row["argv"], work / f"{size:g}g_{label}", args.timeout))
        row["written_bytes"], row["allocated_bytes"] = written(out)
        row["mb_per_s"] = row["written_bytes"] / MB / row["wall_s"] if row["written_bytes"] else None
        row["target"], row["met"] = target(row)
        rows.append(row)
        print("  " + table_line(row), flush=True)
        if out is not None and out.exists() and not args.keep:
            shutil.rmtree(out) if out.is_dir() else out.unlink()  # bound the disk a dense emission takes
    if not args.keep:
        shutil.rmtree(mdir)
    return rows


def describe(info: dict) -> str:
    parts = [f"{info['layers']} attention+{info['mlp']} blocks"]
    parts += [f"{info['attention_only_blocks']} attention-only"] * bool(info["attention_only_blocks"])
    parts += [f"LM head V={info['head_vocab']}"] * bool(info["head_vocab"])
    return (" + ".join(parts) + f", {info['data_bytes'] / (1 << 30):.2f} GiB data, "
            f"largest tensor {info['largest_tensor_bytes'] / MIB:.0f} MiB")


def target(row: dict) -> tuple[str, bool | None]:
    """The issue's target for this row and whether it was met (``None``: no target)."""
    rss, ok = row["peak_rss_bytes"], row["exit"] == 0
    if row["command"] in ("inspect", "annotate"):
        return "RSS ≤ 500 MB", ok and rss <= PLAN_RSS
    limit = row["largest_tensor_bytes"] + EMIT_RSS_MARGIN
    text, met = f"RSS ≤ {limit / MB:.0f} MB", ok and rss <= limit
    if row["command"] == "partition" and row["size_gib"] == 20:
        text, met = text + f", ≤ {PARTITION_20G_WALL:.0f} s", met and row["wall_s"] <= PARTITION_20G_WALL
    return text, met


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n} B"


def table_line(r: dict) -> str:
    code = f"{r['exit']}" + (" (timeout)" if r["timed_out"] else "")
    if r["exit"] != 0 and r["stderr"]:
        code += f": {r['stderr'].replace('|', '/')[:100]}"
    mbs = "—" if r["mb_per_s"] is None else f"{r['mb_per_s']:,.{0 if r['mb_per_s'] >= 10 else 2}f}"
    met = {True: "✓", False: "✗", None: ""}[r["met"]]
    return (f"| {r['size_gib']:g} GiB | {r['command']} | {code} | {r['wall_s']:.1f} | "
            f"{r['peak_rss_bytes'] / MIB:,.0f} | {fmt_bytes(r['written_bytes'])} | {fmt_bytes(r['allocated_bytes'])} | "
            f"{mbs} | {r['largest_tensor_bytes'] / MIB:.0f} | {r['target']} {met} |")


def markdown(rows: list[dict], command: str, args) -> str:
    lines = [
        "## Scale: models far over 2 GiB (sparse synthetic transformers)",
        "",
        f"Machine: {machine_line()}. Run {datetime.datetime.now().isoformat(timespec='minutes')}. "
        f"Command: `{command}`.",
        f"Models: scripts/make_big_model.py, h = 4096, s = 128, {args.dtype}, attention + {args.mlp} MLP blocks "
        "(the largest tensor is an h×4h MLP weight), weights in one sparse `model.onnx.data`; "
        + "; ".join(f"{r['size_gib']:g} GiB = {describe(r)}" for r in rows if r["command"] == "inspect") + ". "
        "Each command is a child process: peak RSS is its `ru_maxrss`; `written` = sum of the output's file "
        "sizes, `allocated` = its `st_blocks × 512` (sparse outputs allocate less); MB/s = written / wall.",
        "",
        "Targets: planning (inspect, annotate) peak RSS ≤ 500 MB at every size; emission (partition, remat) "
        "peak RSS ≤ largest tensor + 500 MB; the 20 GiB partition with emission ≤ 3 minutes (MB = 10⁶ bytes).",
        "",
        "| size | command | exit | wall (s) | peak RSS (MiB) | written | allocated | MB/s "
        "| largest tensor (MiB) | target |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [table_line(r) for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,2.5,8,20", help="model sizes in GiB, comma-separated")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    ap.add_argument("--mlp", choices=("swiglu", "gelu", "relu"), default="swiglu",
                    help="MLP of each block; swiglu is the one where remat --budget 90%% is feasible")
    ap.add_argument("--dynamic-batch", action="store_true",
                    help='input x is ["batch", 128, 4096]; commands get --input-shape x=1x128x4096')
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command (killed after)")
    ap.add_argument("--work", type=Path, help="work folder (default: a new temp dir under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep models, outputs and logs")
    ap.add_argument("--no-write", action="store_true", help="print the table instead of writing BENCHMARKS.md")
    ap.add_argument("--json", type=Path, help="also dump the raw rows here")
    args = ap.parse_args()
    command = shlex.join([".venv/bin/python", "scripts/bench_scale.py", *sys.argv[1:]])
    work = (args.work or Path(tempfile.mkdtemp(prefix="onnxpart_scale_", dir="/tmp"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for size in (float(s) for s in args.sizes.split(",") if s.strip()):
            rows += bench_size(size, work, args)
    finally:
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        if args.keep:
            print(f"kept {work}")
        elif args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    publish("scale", markdown(rows, command, args), args.no_write)


if __name__ == "__main__":
    main()
