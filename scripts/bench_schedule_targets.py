"""Measure `onnxpart schedule`'s certified LB/UB against issue 29 part 5's targets and write the
"schedule-targets" section of BENCHMARKS.md: latency LB/UB >= 0.90 on the onnx light (torchvision-like)
models, the transformer exports and the 1-/2-channel RWNN stacks; throughput LB/UB >= 0.85 on the stacks.

Each row is one run of the command line as a user runs it (`--json`, the default methods unless
`--method` is given), on the thesis's CPU + T4 + A100 (fixtures/systems/cpu_t4_a100.yaml, analytic
costs), with the 1-minute load average before and after it. Models: the onnx wheel's light models
(uncoarsened, the command's default); the GPT-2-like export of tests/export_like.py (`tied_lm_head`,
vocab 512, hidden 256, 12 layers, sequence 128) and its KV-cache decoder step (`kv_cache_decoder`, the same
sizes, 4 heads, 128 past positions) and, where `--exports DIR` holds them, the
`NAME-legacy-static.onnx` files of scripts/export_real_models.py; the RWNN stacks of
scripts/bench_schedule.py (10 ER(0.2) modules of 10 nodes, the same seeds, coarsened as there;
throughput: a batch of 128 in the thesis's slices B/4, B/2, 3B/4, B).

    python scripts/bench_schedule_targets.py --time-limit 60               # writes BENCHMARKS.md
    python scripts/bench_schedule_targets.py --only 'inception|1-ch' --no-write
    python scripts/bench_schedule_targets.py --from-json a.json b.json  # the table of saved --json rows
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
import yaml  # noqa: E402

from bench_common import ROOT, cli_json, machine_line, publish  # noqa: E402
from bench_schedule import LIGHT, SYSTEM, rwnn_model  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's tests, not an installed onnxpart's

from tests.export_like import kv_cache_decoder, tied_lm_head  # noqa: E402

TARGET = {"latency": 0.90, "throughput": 0.85}
LIGHT_MODELS = ("inception_v1", "inception_v2", "resnet50", "squeezenet", "densenet121", "shufflenet",
                "bvlc_alexnet", "vgg19", "zfnet512")
#: scripts/bench_schedule.py's stacks (label, channels, variant); latency's target is on the first three.
STACKS = (("1-ch", 1, "sd"), ("sd, 2-ch", 2, "sd"), ("wd, 2-ch", 2, "wd"), ("sd, 3-ch", 3, "sd"),
          ("sd, 4-ch", 4, "sd"), ("wd, 3-ch", 3, "wd"), ("wd, 4-ch", 4, "wd"))
EXPORTS = ("bert", "distilbert", "gpt2", "llama", "llama-kv", "t5-encoder", "vit")
BATCH = 128  # the thesis's throughput batch (Section 4.4)


@dataclass
class Case:
    label: str
    model: Path
    objective: str
    options: list[str] = field(default_factory=list)


def thesis_system(folder: Path) -> Path:
    """The system file with every device's batch sizes B/4, B/2, 3B/4, B (scripts/bench_schedule.py)."""
    data = yaml.safe_load(SYSTEM.read_text())
    for device in data["devices"]:
        device["batch_sizes"] = [BATCH * q // 4 for q in (1, 2, 3, 4)]
    path = folder / "cpu_t4_a100_b128.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cases(folder: Path, exports: Path | None) -> list[Case]:
    """Every row's model file (built into ``folder``), objective and options."""
    out = [Case(name, LIGHT / f"light_{name}.onnx", "latency") for name in LIGHT_MODELS]
    gpt = folder / "gpt2_like.onnx"
    onnx.save(tied_lm_head(vocab=512, hidden=256, layers=12), gpt)
    out.append(Case("gpt2-like (12 layers)", gpt, "latency", ["--dim", "sequence=128", "--dim", "batch=1"]))
    decoder = folder / "kv_cache_decoder.onnx"
    onnx.save(kv_cache_decoder(hidden=256, heads=4, vocab=512, layers=12), decoder)
    out.append(Case("llama-like KV-cache decoder (12 layers)", decoder, "latency",
                    [f"--dim={d}" for d in ("batch=1", "sequence=128", "past_sequence_length=128",
                                            "total_sequence_length=256")]))
    for name in EXPORTS:
        path = exports / f"{name}-legacy-static.onnx" if exports is not None else None
        if path is not None and path.exists():
            out.append(Case(f"{name} (legacy static export)", path, "latency"))
    batched = ["--coarsen", "--objective", "throughput", "--batch", str(BATCH), "--system", str(thesis_system(folder))]
    for label, channels, variant in STACKS:
        path = folder / f"{label.replace(', ', '_')}.onnx"
        onnx.save(rwnn_model("er", 10, 10, channels, variant, seed=channels * 7 + (variant == "wd")), path)
        if channels <= 2:
            out.append(Case(label, path, "latency", ["--coarsen"]))
        out.append(Case(label, path, "throughput", batched))
    return out


def run_case(case: Case, folder: Path, time_limit: float, methods: str | None) -> dict:
    """One command run; -> the row: ops, UB, LB and its method, LB/UB, the answer's method, load before and
    after (or the command's error line, e.g. a batch no device's memory holds)."""
    system = [] if "--system" in case.options else ["--system", str(SYSTEM)]
    chosen = ["--method", methods] if methods else []
    row = {"label": case.label, "objective": case.objective, "load": [os.getloadavg()[0]]}
    try:
        result = cli_json("schedule", str(case.model), *system, *case.options, *chosen, "--time-limit",
                          str(time_limit), "-o", str(folder / "out"), "--force", "--json")
    except RuntimeError as err:
        return {**row, "error": str(err).rsplit("error:", 1)[-1].strip(), "load": row["load"] + [os.getloadavg()[0]]}
    cert = result["certificate"]
    best = max((b for b in cert["lower_bounds"] if b["value"] is not None), key=lambda b: b["value"])
    return {**row, "ops": len({op["name"] for op in result["manifest"]["ops"]}),  # throughput: one per slice
            "ub": cert["upper_bound"], "lb": cert["best_lower_bound"], "lb_by": best["method"],
            "ratio": cert["best_lower_bound"] / cert["upper_bound"], "method": result["method"],
            "methods": cert["details"]["options"]["methods"], "seconds": result["seconds"],
            "load": row["load"] + [os.getloadavg()[0]]}


def render(rows: list[dict], args) -> str:
    """The targets table (model, objective, ops, UB, LB (method), LB/UB, target, met?)."""
    command = f"python scripts/bench_schedule_targets.py {' '.join(sys.argv[1:])}".strip()
    out = ["## schedule: issue 29 part 5's targets (certified LB/UB)\n",
           f"{machine_line()}; command: `{command}`; {datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC. "
           "Each row is one `onnxpart schedule --json` run on CPU + T4 + A100 (fixtures/systems/cpu_t4_a100.yaml, "
           "analytic costs) with the default methods unless the row says otherwise; latency UB/LB in ms, "
           f"throughput in inputs/s for a batch of {BATCH} (UB: the schedule's; LB column: the proven "
           "ceiling, batch / the bound on the batch makespan). Load: the 1-minute load average before / after "
           "the run.\n",
           "| model | objective | ops | UB | LB (method) | LB/UB | target | met? | answer | load |",
           "|---|---|---:|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        target = TARGET[r["objective"]]
        load = " / ".join(f"{x:.2f}" for x in r["load"])
        if "error" in r:
            out.append(f"| {r['label']} | {r['objective']} | | | | — | {target:.2f} | not measurable | "
                       f"{r['error']} | {load} |")
            continue
        ub, lb = ((r["ub"] * 1e3, r["lb"] * 1e3) if r["objective"] == "latency" else
                  (BATCH / r["ub"], BATCH / r["lb"] if r["lb"] > 0 else float("inf")))
        out.append(f"| {r['label']} | {r['objective']} | {r['ops'] or ''} | {ub:.4g} | {lb:.4g} ({r['lb_by']}) | "
                   f"{r['ratio']:.3f} | {target:.2f} | {'yes' if r['ratio'] >= target - 5e-4 else '**no**'} | "
                   f"{r['method']} | {load} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per run (the issue's: 60)")
    ap.add_argument("--method", help="--method for every run (default: the command's per-objective default)")
    ap.add_argument("--only", help="regular expression: run only the rows whose 'label objective' matches")
    ap.add_argument("--exports", type=Path, default=Path("/work/exports"),
                    help="folder of scripts/export_real_models.py's files (rows for those present)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--from-json", type=Path, nargs="+", help="render these --json files' rows (the later "
                    "file's row wins for a model and objective) instead of running")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch BENCHMARKS.md")
    args = ap.parse_args()
    if args.from_json:
        saved = {(r["label"], r["objective"]): r for path in args.from_json for r in json.loads(path.read_text())}
        publish("schedule-targets", render(list(saved.values()), args), args.no_write)
        return
    folder = Path(tempfile.mkdtemp(prefix="bench_schedule_targets_"))
    rows = []
    for case in cases(folder, args.exports if args.exports.is_dir() else None):
        if args.only and not re.search(args.only, f"{case.label} {case.objective}"):
            continue
        rows.append(run_case(case, folder, args.time_limit, args.method))
        print(json.dumps(rows[-1]), flush=True)
        if args.json:  # after every row: the rows outlive a later failure
            args.json.write_text(json.dumps(rows, indent=1))
    publish("schedule-targets", render(rows, args), args.no_write)


if __name__ == "__main__":
    main()
