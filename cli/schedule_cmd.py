"""`onnxpart schedule`: map every op onto one device of a heterogeneous system and order it, minimizing
latency (or, for a batch, maximizing throughput), with a certified lower bound and runnable
device-contiguous pieces. The algorithms live in onnxpart.schedule; this module parses options, shows
progress and prints the result."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (CheckCertificateOpt, ExternalDataOpt, FreezeDimsOpt, ITERATIONS, MAX_PIECES, OutputOpt,
                                 TimeLimitOpt, VerifyOpt, VerifyTolOpt, certificate_line, check_folder, choose, console,
                                 enforce_gap, gap_limit, handle_errors, print_closing, print_json, progress_bar,
                                 run_clock, verify_written, write_outputs)
from onnxpart.cli.option_groups import ModelSource, OutputMode, Search, takes_option_groups
from onnxpart.cli.weights import WeightsOpt, weights_policy
from onnxpart.errors import UserError
from onnxpart.units import BATCH, format_bytes, format_seconds

#: The registry's methods (:data:`onnxpart.schedule.common.methods.CATALOGUE`), written out: importing the
#: solvers to build it would slow every command's start; tests/schedule/common/test_registry.py keeps it in step.
METHOD_HELP = ("Methods to run (comma-separated): heft, cpop, met, greedy, sa, ea (baselines), lagrange (the load "
               "LP dual's memory-aware mapping), exact/cpsat (CP-SAT), milp (HiGHS), split (MILP-SPLIT). Default, "
               "per --objective: latency met,greedy,heft,cpop,lagrange,split; throughput met,greedy,heft,cpop,sa,ea,cpsat.")


@handle_errors
@takes_option_groups
def schedule(
    model: Path = typer.Argument(..., help="ONNX model, or a JSON graph: costs.json, dnn-partitioning or networkx node-link."),
    system: Path = typer.Option(..., "--system", help="System file (YAML/JSON): devices and links."),
    output: OutputOpt = None,
    method: Optional[str] = typer.Option(None, "--method", help=METHOD_HELP, show_default=False),
    compare: bool = typer.Option(False, "--compare", help="Run every method on this instance and print one table."),
    objective: str = typer.Option("latency", "--objective", help="latency (one input's makespan) or throughput (inputs per second for a batch split over the devices' batch sizes; pieces compute a slice of the batch)."),
    batch: Annotated[int, typer.Option("--batch", help="Throughput: inputs per batch (L), split into slices over the devices."), BATCH] = 1,
    max_pieces: Annotated[Optional[int], typer.Option("--max-pieces", help="At most N device-contiguous pieces: merge the cheapest boundaries (exit 4 if no merge is feasible)."), MAX_PIECES] = None,
    iterations: Annotated[int, typer.Option("--iterations", help="SA / EA fitness evaluations."), ITERATIONS] = 2000,
    time_limit: TimeLimitOpt = 10.0,
    search: Search = Search(),
    source: ModelSource = ModelSource(),
    freeze_dims: FreezeDimsOpt = False,
    external_data_threshold: ExternalDataOpt = None,
    weights: WeightsOpt = "copy",
    verify: VerifyOpt = False,
    verify_tol: VerifyTolOpt = 1e-4,
    check_certificate: CheckCertificateOpt = None,
    mode: OutputMode = OutputMode(),
) -> None:
    """Map and order ops on heterogeneous devices minimizing latency (thesis MILP, CP-SAT, MILP-SPLIT,
    six baselines), with proven lower bounds and runnable per-device pieces; or maximize a batch's
    throughput, with pieces per slice of the batch."""
    from onnxpart.readers import check_format
    from onnxpart.schedule import METHODS, OBJECTIVES, Options

    methods = METHODS if compare else _methods(method) if method is not None else None  # None: the objective's
    limit = gap_limit(search.max_gap)
    check_format(source.graph_format)
    if output is None and check_certificate is None:
        raise UserError("pass --output/-o DIR (or --check-certificate DIR)")
    _check_objective(objective, batch)
    inst, graph, loaded = _load(model, system, source)
    model_sha = loaded.sha256 if loaded is not None else graph.model_sha256
    if check_certificate is not None:
        _check(inst, graph, check_certificate, model_sha, loaded, freeze_dims, mode.as_json)
        return
    if verify and loaded is None:
        raise UserError("--verify needs an ONNX model (graph-only input has nothing to run)")
    package = OBJECTIVES[objective]
    axis = package.emit.pieces_axis(loaded, freeze_dims)

    from onnxpart.files import OutputDir
    from onnxpart.output_guard import run_reads

    out = OutputDir(output, force=mode.force, clean=mode.clean,
                    reads=run_reads(model, loaded, costs=source.costs, device=source.device, system=inst.system))
    policy = weights_policy(loaded, external_data_threshold, weights, output, mode.as_json)
    options = Options(methods=methods, objective=objective, batch=batch,  # the solve gets what loading left
                      time_limit=run_clock.solve_seconds(time_limit), seed=search.seed, iterations=iterations,
                      workers=search.workers)
    solution, sched = _solve(package, inst, options, max_pieces, mode.as_json)

    check = dict(verify=verify, seed=search.seed, tolerance=verify_tol, freeze=freeze_dims, axis=axis)
    recorded = {"methods": list(options.methods), "time_limit": time_limit, "seed": search.seed, "iterations": iterations,
                "max_pieces": max_pieces, "system": str(system), "objective": objective, "batch": batch}
    run_clock.mark_writing()
    summary = _write(package, out, solution, sched, graph, loaded, (str(model), model_sha), recorded, policy, check)
    if mode.as_json:
        print_json(summary)
    else:
        _print(summary, compare)
    enforce_gap(summary["certificate"], limit, output)


def _check_objective(objective: str, batch: int) -> None:
    """An unknown objective, or ``--batch`` without throughput, refused before any work."""
    if objective not in ("latency", "throughput"):
        raise UserError(f"unknown --objective {objective!r}: use latency or throughput")
    if objective == "latency" and batch != 1:
        raise UserError("--batch is for --objective throughput")


def _methods(text: str) -> tuple[str, ...]:
    from onnxpart.schedule import METHODS

    return choose(text, "--method", METHODS)


def _load(model: Path, system_path: Path, source: ModelSource):
    """-> (Instance, OpGraph, LoadedModel or None for graph-only input). The system file is read first,
    so a bad one is reported before any costing."""
    from onnxpart.schedule import from_graph, load_system
    from onnxpart.schedule.system.costs import recorded_cost_fn, table_cost_fn

    system = load_system(str(system_path))
    loaded = source.load(model)
    graph = loaded.graph
    cost_fn = table_cost_fn(graph, system) or (recorded_cost_fn(graph, system) if loaded.model is None else None)
    return from_graph(graph, system, cost_fn), graph, loaded.model


def _solve(package, inst, options, max_pieces: Optional[int], quiet: bool):
    """Solve with the live bar; -> (Solution, the schedule to write: the objective package's
    ``pieces.emitted_schedule``, merged to --max-pieces when given)."""
    from onnxpart.board import Board
    from onnxpart.schedule import solve

    with progress_bar(options.time_limit, lambda value, _: format_seconds(value), disable=quiet) as on_progress:
        solution = solve(inst, options, Board(on_progress))
    return solution, package.pieces.emitted_schedule(inst, solution.schedule, max_pieces)


def _write(package, out, solution, sched, graph, loaded, source: tuple[str, Optional[str]], recorded: dict, policy,
           check: dict) -> dict:
    """Pieces, annotated model, Gantt chart (ONNX input only), manifest and certificate into ``out`` by the
    one write sequence (:func:`onnxpart.cli.common.write_outputs`), each made by the objective's
    ``package.emit``; with ``check["verify"]`` the pieces are run against the original first, and a
    mismatch writes nothing."""
    inst, emit = solution.instance, package.emit
    parts = package.pieces.checked_pieces(inst, sched)

    def models(out) -> dict[int, str]:
        annotated = emit.annotated_model(loaded, graph, inst, sched, check["axis"])
        return _write_models(out, inst, parts, emit.piece_models, annotated, graph, loaded, policy, check["freeze"])

    def manifest(files: Optional[dict[int, str]]) -> dict:
        return emit.manifest(solution, sched, parts, graph, source[0], source[1], files or {}, check["axis"])

    def verify(out, payload: dict) -> dict:
        return verify_written(out, loaded, payload["pieces"], check, "pieces",
                              emit.piece_runner(check["axis"], sched)).to_dict()

    def gantt(out, payload: dict) -> None:
        _write_gantt(out, payload, emit.gantt_title(graph, sched))

    onnx = loaded is not None
    return write_outputs(out, "manifest.json", manifest, emit.certificate(solution, sched, source[1], recorded),
                         models=models if onnx else None, verify=verify if check["verify"] else None,
                         extras=gantt if onnx else None, **emit.summary(sched), method=solution.method,
                         pieces=len(parts))


def _write_gantt(out, manifest: dict, title: str) -> None:
    """``gantt.png`` drawn from the manifest's ``ops[]`` and ``transfers[]`` (:func:`gantt_png`)."""
    from onnxpart.files import atomic_write_bytes
    from onnxpart.schedule.common.gantt import gantt_png

    devices = [d["name"] for d in manifest["system"]["devices"]]
    atomic_write_bytes(out.path("gantt.png"), gantt_png(devices, manifest["ops"], manifest["transfers"], title))


def _write_models(out, inst, parts, make, annotated, graph, loaded, policy, freeze: bool) -> dict[int, str]:
    """The pieces (:func:`_write_pieces`, each model from ``make``) and the ``annotated`` model as
    ``annotated.onnx`` (weights kept as the input stored them, :func:`onnxpart.writer.write_annotated`),
    for either objective; -> {piece: file}."""
    from onnxpart.writer import write_annotated

    files = _write_pieces(out, inst, parts, make, graph, loaded, policy, freeze)
    write_annotated(annotated, out.path("annotated.onnx"), policy)
    return files


def _write_pieces(out, inst, parts, make, graph, loaded, policy, freeze: bool) -> dict[int, str]:
    """One file per piece (:func:`onnxpart.schedule.common.emit.piece_file`, ``.data`` beside it by
    ``policy``), its model from ``make`` (latency's or throughput's ``piece_models``); -> {piece: file}."""
    import functools

    from onnxpart.schedule.common.emit import piece_file
    from onnxpart.writer import write_model

    files = {}
    declare = functools.partial(loaded.value_info, freeze=freeze)
    for index, piece in make(loaded.model, graph, parts, inst, declare).items():
        files[index] = piece_file(parts[index], inst)
        write_model(piece, out.path(files[index]), policy)
    return files


def _print(summary: dict, compare: bool) -> None:
    manifest, cert = summary["manifest"], summary["certificate"]
    if compare:
        console.print(_methods_table(cert["details"]["methods"]))
    console.print(_device_table(manifest))
    for r in cert["details"]["methods"]:
        if r["method"] == "split" and r["note"]:  # a fallback, an early stop or wall-clock stops: say so
            console.print(f"split: {r['note']}", highlight=False)
    print_closing(summary, _certificate_line(cert), "pieces")


def _device_table(manifest: dict) -> Table:
    """Per device: ops, pieces (the runtime sessions it launches), busy time, busy share of the (batch)
    makespan, memory peak (3.7), capacity."""
    count = len(manifest["pieces"])
    batch = f"batch of {manifest['batch']}, " if "batch" in manifest else ""
    title = f"{manifest['graph']}: {batch}{count} piece{'s' if count != 1 else ''} ({manifest['method']})"
    table = Table(title=title, title_justify="left")
    for column in ("device", "ops", "pieces", "busy", "busy %", "memory peak", "capacity"):
        table.add_column(column, justify="left" if column == "device" else "right")
    span = manifest["makespan"]
    per_device = Counter(piece["device"] for piece in manifest["pieces"])
    for d in manifest["devices"]:  # memory peak: the static model's resident bytes (3.7), its peak
        table.add_row(d["name"], str(d["ops"]), str(per_device[d["name"]]), format_seconds(d["busy"]),
                      f"{d['busy'] / span:.0%}" if span > 0 else "-", format_bytes(d["memory"]),
                      format_bytes(d["capacity"]) if d["capacity"] is not None else "-")
    return table


def _methods_table(methods: list[dict]) -> Table:
    """--compare: every method's makespan, status, proven bound and seconds on this instance."""
    table = Table(title="methods", title_justify="left")
    for column in ("method", "makespan", "status", "bound", "seconds", "note"):
        table.add_column(column, justify="left" if column in ("method", "status", "note") else "right")
    for r in methods:
        table.add_row(r["method"], format_seconds(r["makespan"]) if r["makespan"] is not None else "-", r["status"],
                      format_seconds(r["bound"]) if r["bound"] is not None else "-", f"{r['seconds']:.2f}",
                      r["note"] or "")
    return table


def _certificate_line(cert: dict) -> str:
    """Latency: ``makespan UB, proven ≥ LB``. Throughput: the batch makespan's line, then the throughput
    and its proven ceiling ``batch / LB``."""
    details = cert["details"]
    if "throughput" not in details:
        return certificate_line(cert, "makespan", format_seconds)
    ceiling = details["throughput_ceiling"]
    return (certificate_line(cert, f"batch of {details['batch']} in", format_seconds)
            + f"; throughput {_rate(details['throughput'])} inputs/s"
            + (f", proven ≤ {_rate(ceiling)}" if ceiling is not None else ""))


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _check(inst, graph, folder: Path, model_sha, loaded, freeze: bool, as_json: bool) -> None:
    """The folder's manifest says its objective; that objective's ``check`` re-simulates (latency) or
    validates slice by slice (throughput) and recomputes every field (:mod:`onnxpart.schedule.latency.check`,
    :mod:`onnxpart.schedule.throughput.check`)."""
    from onnxpart.schedule import OBJECTIVES

    where = str(folder / "manifest.json")

    def package(manifest):
        return OBJECTIVES["throughput" if isinstance(manifest, dict) and manifest.get("objective") == "throughput"
                          else "latency"]

    def check(manifest, cert):
        chosen = package(manifest)
        axis = lambda: chosen.emit.pieces_axis(loaded, freeze)  # noqa: E731  (only for ONNX input)
        checked = chosen.check.check_certificate(inst, graph, manifest, cert, model_sha, where, loaded is not None,
                                                 axis)
        return checked.problems, {"upper_bound": checked.upper_bound, "objective": manifest["objective"]}

    def ok_line(facts: dict) -> str:
        return OBJECTIVES[facts["objective"]].check.ok_line(facts["upper_bound"])

    check_folder(folder, "manifest.json", check, ok_line, as_json, problem="schedule")
