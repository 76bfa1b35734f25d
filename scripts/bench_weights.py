"""Benchmark of ``--weights`` (issue 43, item 3): how fast emitted files get their weights, and whether the
LLM-sized commands end near their time limit once writing costs nothing.

Two tables, written as the ``weights`` section of BENCHMARKS.md (``--print``: printed only):

* **copy speed**: dense files of random bytes (``--sizes``, default 2 GiB, which the page cache holds, and
  8 GiB, past the kernel's dirty-page limit), each copied by ``cp``, by ``cp`` then
  ``sync FILE`` (a durable copy, as onnxpart's outputs are: every file is fsynced before its rename), and by
  the two ways ``--weights copy`` writes (``clone_file``: ``annotated.onnx``'s data files; ``write_model``: a
  stage's own ``.data``, the tensor streamed at its offset, then checked by path); median of ``--repeats``
  runs, in rotating order, on the same file system; then ``cp`` and ``clone_file`` on the 70B-shaped export's
  own data file;
* **the 70B-shaped export** (``scripts/make_llama70b.py``: 141 GB of sparse external data, built in
  ``--folder`` unless there): ``tile --mesh 2x4`` and ``partition -k 8`` at ``--time-limit T`` under each
  of ``--modes``, the command's wall time against the target 1.1·T + 30 s, what the output holds on disk,
  and how every emitted ``.onnx`` checks: ``onnx.checker.check_model(path)``, and where onnx refuses by
  design (link: the hard link; reference: data outside the model's folder), onnxpart's in-folder check.

    .venv/bin/python scripts/bench_weights.py                     # ~13 minutes on 2 cores
    .venv/bin/python scripts/bench_weights.py --no-70b --print    # the copy table only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.bench_common import machine_line, publish  # noqa: E402

MIB = 1 << 20
DIMS = ["--dim", "batch=1", "--dim", "sequence=128"]
COMMANDS = {"tile": ["tile", "--mesh", "2x4"], "partition": ["partition", "-k", "8"]}


def dense_source(folder: Path, size: int) -> tuple[Path, onnx.ModelProto]:
    """``folder/src/dense.data``: ``size`` random bytes (made once), and a model whose one fp16 weight is all
    of it (``Identity`` of it is the output)."""
    src = folder / "src"
    src.mkdir(parents=True, exist_ok=True)
    data = src / "dense.data"
    if not data.exists() or data.stat().st_size != size:
        with open(data, "wb") as handle:
            for _ in range(size // (16 * MIB)):
                handle.write(os.urandom(16 * MIB))
    h = onnx.helper
    weight = onnx.TensorProto(name="W", data_type=onnx.TensorProto.FLOAT16, dims=[size // 2])
    weight.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "dense.data"), ("offset", "0"), ("length", str(size))):
        weight.external_data.add(key=key, value=value)
    graph = h.make_graph([h.make_node("Identity", ["W"], ["y"])], "dense", [],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, [size // 2])], [weight])
    return data, h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def copy_rows(folder: Path, size: int, repeats: int) -> list[dict]:
    """Median seconds of each way of copying the dense file (outputs removed after each run)."""
    from onnxpart.data_files import copy_range
    from onnxpart.writer import WeightPolicy, write_model

    data, model = dense_source(folder, size)
    out = folder / "out"
    policy = WeightPolicy(source_dir=data.parent, always_external=True)
    ways = {**_cp_and_clone(data, out),
            "onnxpart's copy alone (copy_range, no fsync)":
                lambda: _engine(copy_range, data, out / "engine.data", size),
            "onnxpart write_model (a stage's .data, checked)": lambda: write_model(model, out / "m.onnx", policy)}
    return timed_ways(ways, out, repeats)


def _cp_and_clone(data: Path, out: Path) -> dict:
    """``cp``, ``cp`` then ``sync``, and onnxpart's ``clone_file`` of ``data`` into ``out``."""
    from onnxpart.data_files import clone_file

    return {"cp": lambda: subprocess.run(["cp", str(data), str(out / "cp.data")], check=True),
            "cp + sync FILE": lambda: (subprocess.run(["cp", str(data), str(out / "cp.data")], check=True),
                                       subprocess.run(["sync", str(out / "cp.data")], check=True)),
            "onnxpart clone_file (annotated.onnx's data)": lambda: clone_file(data, out / data.name)}


def timed_ways(ways: dict, out: Path, repeats: int) -> list[dict]:
    """Median seconds of each of ``ways`` over ``repeats`` runs in rotating order, ``out`` emptied before each."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for run in range(repeats):
        names = list(ways)
        for name in names[run % len(names):] + names[:run % len(names)]:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            start = time.perf_counter()
            ways[name]()
            times[name].append(time.perf_counter() - start)
    shutil.rmtree(out, ignore_errors=True)
    return [{"way": name, "seconds": statistics.median(t), "runs": t} for name, t in times.items()]


def _engine(copy_range, source: Path, target: Path, size: int) -> None:
    """onnxpart's copy loop alone: into a plain file, no temporary name, no fsync (what ``cp`` does)."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        copy_range(src, dst, 0, size)
        dst.truncate()


def copy_table(rows: list[dict], size: int, repeats: int, what: str = "") -> str:
    cp = {r["way"]: r["seconds"] for r in rows}
    what = what or (f"one dense {size / 2**30:g} GiB file of random bytes (no holes)" + (
        "; past the kernel's dirty-page limit (20 % of this machine's 23 GiB), so `cp` too waits for the disk"
        if size > 0.2 * _memory() else "; it fits in the page cache, so `cp` ends before its data is on disk"))
    lines = [f"**Copy speed**: {what}, median of {repeats} runs in rotating order, same ext4 file system (no "
             "reflink: `FICLONE` is refused, so `cp` and onnxpart both copy with `copy_file_range`). onnxpart's copy "
             "alone is the like-for-like row of `cp`; its writers add an `fsync` before the rename (and "
             "`write_model` its `onnx.checker` by path), so theirs is `cp + sync FILE`.",
             "", "| way | seconds (median) | MB/s | vs cp | vs cp + sync | runs (s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['way']} | {r['seconds']:.4g} | {size / r['seconds'] / 1e6:,.0f} | "
                     f"{cp['cp'] / r['seconds']:.0%} | {cp['cp + sync FILE'] / r['seconds']:.0%} | "
                     f"{', '.join(f'{t:.3g}' for t in r['runs'])} |")
    return "\n".join(lines)


def _memory() -> int:
    """This machine's memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def same_file_table(model: Path, repeats: int) -> str:
    """The copy rows on the 70B-shaped export's own data file (what ``--weights copy`` copies there)."""
    data = model.parent / "model.onnx.data"
    rows = timed_ways(_cp_and_clone(data, model.parent.parent / "same_out"), model.parent.parent / "same_out",
                      repeats)
    return copy_table(rows, data.stat().st_size, repeats,
                      f"the 70B-shaped export's own `model.onnx.data` ({data.stat().st_size / 1e9:.1f} GB apparent, "
                      f"{data.stat().st_blocks * 512 / MIB:.1f} MiB allocated: both skip its holes), MB/s of its "
                      "apparent size")


def llama_model(folder: Path) -> Path:
    """The 70B-shaped export in ``folder`` (built there, sparse, when missing)."""
    model = folder / "model.onnx"
    if not model.exists():
        subprocess.run([sys.executable, str(Path(__file__).parent / "make_llama70b.py"), str(folder),
                        "--preset", "llama-70b"], check=True, capture_output=True)
    return model


def llama_row(model: Path, command: str, mode: str, time_limit: float, out: Path) -> dict:
    """One command run (wall seconds, load average at its start), what its output holds, how its files check."""
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]
    argv = [str(Path(sys.executable).parent / "onnxpart"), *COMMANDS[command], str(model), "-o", str(out),
            "--weights", mode, "--time-limit", str(time_limit), *DIMS, "--json"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    wall = time.perf_counter() - start
    row = {"command": command, "mode": mode, "wall": wall, "load": load, "rc": done.returncode,
           "target": 1.1 * time_limit + 30, "error": done.stderr.strip().splitlines()[-1:] if done.returncode else []}
    if done.returncode == 0:
        row.update(_output_facts(out, model.parent, mode))
        result = json.loads(done.stdout)
        row["load_s"] = result["seconds"]["load"]
        row["first_plan_s"] = next((r["seconds"] for r in result.get("results", []) if r["method"] == "local"), None)
    shutil.rmtree(out, ignore_errors=True)
    return row


def _output_facts(out: Path, source: Path, mode: str) -> dict:
    """Bytes on disk (blocks) and apparent, and the checks of every emitted model."""
    from onnxpart.writer import _check_in_folder

    files = [p for p in out.rglob("*") if p.is_file()]
    by_path = in_folder = 0
    models = sorted(out.glob("*.onnx"))
    for path in models:
        try:
            onnx.checker.check_model(str(path))
            by_path += 1
        except Exception:  # noqa: BLE001 - counted: onnx refuses hard links and data outside the folder
            pass
        _check_in_folder(path, source if mode == "reference" else out)
        in_folder += 1
    return {"disk": sum(p.stat().st_blocks * 512 for p in files), "apparent": sum(p.stat().st_size for p in files),
            "models": len(models), "by_path": by_path, "in_folder": in_folder}


def llama_table(rows: list[dict], time_limit: float) -> str:
    lines = [f"**The 70B-shaped export** (`scripts/make_llama70b.py --preset llama-70b`: 80 layers, fp16, 141.1 GB "
             f"of sparse external data; `{' '.join(DIMS)}`), `--time-limit {time_limit:g}`: the command's wall time "
             "(process start to exit, files included) against 1.1·T + 30 s. `checker(path)`: emitted models "
             "`onnx.checker.check_model(path)` accepts; `in-folder`: those passing onnxpart's check of the model "
             "with every reference inside its data folder (what onnx's path form refuses by design for hard-linked "
             "data and for data outside the model's folder). `on disk / apparent`: the output folder's allocated "
             "blocks and file sizes (link's 141 GB are the input's own file under a second name; a copy of the "
             "sparse export keeps its holes, so it allocates no more than reference). `read s`: the command's own "
             "load (the model read and costed, tile's instance built); `first plan s`: tile's first valid plan "
             "(its `local` method) after that, against 1 s per 10,000 ops.", "",
             "| command | --weights | load | wall s | target s | verdict | on disk / apparent | checker(path) | "
             "in-folder | read s | first plan s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {' '.join(COMMANDS[r['command']])} | {r['mode']} | {r['load']:.1f} | {r['wall']:.1f} | " \
               f"{r['target']:.0f} | "
        if r["rc"]:
            lines.append(head + f"exit {r['rc']}: {' '.join(r['error'])[:120]} | | | | | |")
            continue
        verdict = "MET" if r["wall"] <= r["target"] else "**NOT MET**"
        lines.append(head + f"{verdict} | {r['disk'] / MIB:,.1f} MiB / {r['apparent'] / 1e9:,.1f} GB | "
                     f"{r['by_path']}/{r['models']} | {r['in_folder']}/{r['models']} | {r['load_s']:.1f} | "
                     f"{'-' if r['first_plan_s'] is None else format(r['first_plan_s'], '.2f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_weights"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[2 << 30, 8 << 30],
                        help="bytes of each dense copy file (one table each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="reference,link,copy", help="--weights modes of the 70B rows")
    parser.add_argument("--commands", default="tile,partition")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--no-70b", action="store_true")
    parser.add_argument("--print", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M")
    parts = []
    for size in args.sizes:
        parts.append(copy_table(copy_rows(args.folder / "copy", size, args.repeats), size, args.repeats))
        shutil.rmtree(args.folder / "copy", ignore_errors=True)
    if not args.no_70b:
        model = llama_model(args.folder / "llama70b")
        parts.append(same_file_table(model, args.repeats))
        rows = [llama_row(model, command, mode, args.time_limit, args.folder / "out")
                for command in args.commands.split(",") for mode in args.modes.split(",")]
        parts.append(llama_table(rows, args.time_limit))
    header = (f"## --weights: copy speed and the 70B-shaped export's outputs\n\nMachine: {machine_line()} (shared: "
              f"`load` is the 1-minute load average when the row started). Run {started}. Command: "
              f"`.venv/bin/python scripts/bench_weights.py {' '.join(sys.argv[1:])}`.")
    publish("weights", "\n\n".join([header, *parts]), args.print)


if __name__ == "__main__":
    main()
