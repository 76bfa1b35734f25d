"""`onnxpart bench`: run an output folder's files on this machine and measure them against the manifest's
prediction. The measuring lives in onnxpart.bench; this module parses options, writes the files and prints
the table."""

from __future__ import annotations

import contextlib
import json

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (BESIDE, CleanOpt, DimOpt, ForceOpt, InputShapeOpt, JsonOpt, MIN_TIME, MIN_TIME_DEFAULT,
                                 RUNS, SeedOpt, WORKERS, console, err_console, handle_errors, print_json)
from onnxpart.errors import UserError
from onnxpart.units import Range, format_bytes, format_seconds

WARMUP = Range(0, 1000, integer=True)
MICRO_BATCHES = Range(2, 100_000, integer=True)
MAX_OPS = Range(1, 1_000_000, integer=True)


@handle_errors
def bench(
    folder: Path = typer.Argument(..., help="An output folder of partition, plan, schedule, remat or tile."),
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Folder to write bench.json and "
                                                   "bench.png into (atomically; never the folder benched).")] = None,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per unit (median and spread)."), RUNS] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs before the timed ones."), WARMUP] = 3,
    min_time: Annotated[float, typer.Option("--min-time", help="Seconds to keep timing past --runs: the stages "
                                            "(pieces, remat's two models) in rounds, and the pipeline's stream, "
                                            "each for at least this long."), MIN_TIME] = MIN_TIME_DEFAULT,
    beside: Annotated[int, typer.Option("--beside", help="Time the stages (pieces, remat's models) while N copies "
                                        "of the original model run on other cores, as annotate --cost measured "
                                        "--beside N profiled them (needs --threads)."), BESIDE] = 0,
    threads: Annotated[int, typer.Option("--threads", help="onnxruntime intra-op threads per session (0: its "
                                         "default, as annotate --cost measured; pipeline workers: their cores). "
                                         "Use the threads the costs were measured with (annotate --threads)."),
                       WORKERS] = 0,
    provider: str = typer.Option("CPU", "--provider", help="onnxruntime execution provider (CPU, CUDA, …)."),
    optimize: bool = typer.Option(False, "--optimize", help="Run with onnxruntime's graph optimizations on "
                                  "(default off, in file order, as the measured cost model profiles)."),
    micro_batches: Annotated[int, typer.Option("--micro-batches", help="Inputs streamed through the pipeline "
                                               "to measure its period."), MICRO_BATCHES] = 32,
    engine: str = typer.Option("local", "--engine", help="Pipeline workers: local (processes pinned to cores) "
                               "or ray (Ray actors)."),
    address: Optional[str] = typer.Option(None, "--address", help="--engine ray: a Ray cluster (auto, HOST:PORT); "
                                          "default a local Ray started and stopped."),
    model: Optional[Path] = typer.Option(None, "--model", help="The model the folder was made from, where the "
                                         "manifest's recorded path is not right."),
    max_ops: Annotated[int, typer.Option("--max-ops", help="tile folders: time the N ops predicted slowest "
                                         "(each on every device)."), MAX_OPS] = 400,
    dim: DimOpt = None,
    input_shape: InputShapeOpt = None,
    seed: SeedOpt = 0,
    calibrate: Optional[Path] = typer.Option(None, "--calibrate", help="Write an onnxpart.costs/1 file scaled "
                                             "to the measured stages (partition/plan folders)."),
    costs: Optional[Path] = typer.Option(None, "--costs", help="--calibrate: the costs file the folder was "
                                         "planned with (default: the analytic model on the manifest's device)."),
    force: ForceOpt = False,
    clean: CleanOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run an output folder's files in onnxruntime and measure them against the manifest's prediction."""
    from onnxpart import bench as bench_lib
    from onnxpart.bench.sessions import Settings, check_provider
    from onnxpart.files import write_json
    from onnxpart.onnx_io import parse_dims, parse_input_shapes

    if engine not in bench_lib.ENGINES:
        raise UserError(f"--engine {engine}: use local or ray")
    settings = Settings(check_provider(provider), threads, optimize, seed, parse_dims(dim or []),
                        {k: list(v) for k, v in parse_input_shapes(input_shape or []).items()})
    out = _guard(folder, output, calibrate, [model, costs], force, clean)
    if calibrate is not None:
        _precheck(folder, costs)
    options = bench_lib.Options(runs, warmup, settings, micro_batches, engine, address, model, max_ops, min_time,
                                beside)
    with err_console.status(f"running {folder} in onnxruntime…") if not as_json else contextlib.nullcontext():
        result = bench_lib.bench(folder, options)
        calibrated = _calibrate(result, costs, options) if calibrate is not None else None
    _write(out, result)
    if calibrated is not None:
        write_json(calibrate, calibrated)
    if as_json:
        print_json(result.document)
    else:
        _print(result, out, calibrate)


def _guard(folder: Path, output: Optional[Path], calibrate: Optional[Path], others: list, force: bool,
           clean: bool):
    """Check the outputs before anything runs (README, "Output folders"): never over a file bench reads
    (the folder's files, the model, the costs), an existing one only with --force; --force replaces an
    earlier bench folder (it holds bench.json) like any folder onnxpart wrote. -> the OutputDir, or None."""
    from onnxpart.costs_io import SCHEMA as COSTS_SCHEMA
    from onnxpart.files import OutputDir
    from onnxpart.output_guard import check_file

    reads = [p for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    reads += [Path(p) for p in others if p is not None]
    if calibrate is not None:
        check_file(calibrate, reads, force, clean, COSTS_SCHEMA)
    if output is None:
        return None
    return OutputDir(output, force=force, clean=clean or _earlier_bench(output), reads=reads)


def _precheck(folder: Path, costs: Optional[Path]) -> None:
    """--calibrate's refusals before the runs (:func:`onnxpart.bench.calibrate.check_source`)."""
    from onnxpart.bench.calibrate import check_source
    from onnxpart.bench.folder import detect

    kind, _, manifest = detect(folder)
    check_source(kind, manifest, costs)


def _earlier_bench(output: Path) -> bool:
    """True for a folder an earlier ``onnxpart bench`` wrote (its bench.json carries the bench schema)."""
    from onnxpart.bench.report import SCHEMA

    try:
        return json.loads((output / "bench.json").read_bytes()).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def _calibrate(result, costs: Optional[Path], options) -> dict:
    """``--calibrate``: the fit (kept in bench.json's ``calibration``) -> the calibrated costs document."""
    from onnxpart.bench.calibrate import calibrate

    fit, document = calibrate(result, costs, options)
    result.document["calibration"] = fit
    return document


def _write(out, result) -> None:
    """bench.json and bench.png into the output folder, committed whole."""
    from onnxpart.bench.plot import plot
    from onnxpart.files import write_json

    if out is None:
        return
    with out:
        write_json(out.path("bench.json"), result.document)
        title = f"{result.folder.kind} {result.folder.manifest.get('graph', '')}: predicted vs measured"
        plot(out.path("bench.png"), result.rows, title)


def _print(result, out, calibrate: Optional[Path]) -> None:
    """The rows as a table, the summary line, what was written."""
    doc = result.document
    table = Table(title=f"{doc['command']} {doc['graph'] or ''} on {doc['machine']['cpu']} "
                        f"({doc['settings']['provider']}, {doc['engine']})", title_justify="left")
    for column in ("unit", "kind", "predicted", "measured", "IQR/median", "error", "note"):
        table.add_column(column, justify="left" if column in ("unit", "kind", "note") else "right")
    for row in result.rows:
        fmt = format_bytes if row.quantity == "bytes" else (lambda v: f"{v:.3f}") if row.quantity == "ratio" \
            else format_seconds
        spread = "" if row.spread is None or not row.spread.median else \
            f"{(row.spread.q3 - row.spread.q1) / row.spread.median:.0%}"
        table.add_row(row.unit, row.kind, "-" if row.predicted is None else fmt(row.predicted),
                      "-" if row.measured is None else fmt(row.measured), spread,
                      "-" if row.error is None else f"{row.error:+.1%}", row.note)
    console.print(table)
    for line in _summary_lines(result.summary):
        console.print(line, highlight=False)
    if doc.get("calibration"):
        fit = doc["calibration"]
        console.print(f"calibrated: {fit['model']} fit on {fit['units']} units, residual {fit['residual']:.1%}; "
                      f"wrote {calibrate}", highlight=False)
    if out is not None:
        console.print(f"wrote {out.target}", highlight=False)


def _summary_lines(summary: dict) -> list[str]:
    lines = []
    if summary.get("bottleneck_ratio") is not None:
        right = "right" if summary["bottleneck_stage_right"] else "WRONG"
        lines.append(f"bottleneck measured / predicted {summary['bottleneck_ratio']:.2f} (stage "
                     f"{summary['bottleneck_stage_measured']}; predicted {summary['bottleneck_stage_predicted']}: "
                     f"{right}); worst stage error {summary['worst_stage_error']:.0%}")
    if summary.get("throughput_measured"):
        lines.append(f"pipeline {summary['throughput_measured']:.1f} inputs/s measured, "
                     f"{summary['throughput_predicted']:.1f} predicted; one worker "
                     f"{summary['throughput_one_worker']:.1f} inputs/s (× {summary['speed_up_over_one_worker']:.2f})")
    if summary.get("ops_timed") is not None:
        lines.append(_tile_line(summary))
    if summary.get("pipeline_layout"):
        lines.append(f"pipeline workers: {summary['pipeline_layout']}")
    return lines


def _tile_line(summary: dict) -> str:
    """A tile folder's summary: the shards' sum against the prediction, what was not timed."""
    ratio = "-" if summary["compute_ratio"] is None else f"{summary['compute_ratio']:.2f}"
    worst = "-" if summary["worst_op_error"] is None else f"{summary['worst_op_error']:.0%}"
    moves = summary["reshardings_not_timed"]
    return (f"{summary['ops_timed']} of {summary['ops']} ops timed on each of {summary['devices']} virtual devices: "
            f"sharded compute measured / predicted {ratio}, worst op error {worst}; each shard is one "
            f"session.run ({format_seconds(summary['call_overhead_s'])} for an empty one); {moves['count']} "
            f"reshardings ({format_seconds(moves['predicted_s'])} predicted) not timed: {moves['why']}")
