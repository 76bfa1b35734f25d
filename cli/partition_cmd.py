"""`onnxpart partition`: k pipeline stages with the smallest bottleneck, runnable stage models, and a
certificate with proven lower bounds. The algorithms live in onnxpart.partition; this module parses
options, shows progress and prints the result."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (CheckCertificateOpt, ExternalDataOpt, FRACTION, FreezeDimsOpt, GENERATIONS,
                                 IDEAL_LIMIT, OutputOpt, POPULATION, Quantity, RANDOM_ORDERS, STAGES, TimeLimitOpt,
                                 VerifyOpt, VerifyTolOpt, certificate_line, check_folder, console, enforce_gap,
                                 err_console, gap_limit, handle_errors, print_closing, print_json, progress_bar,
                                 run_clock, verify_written, write_outputs)
from onnxpart.cli.option_groups import ModelSource, OutputMode, Search, takes_option_groups
from onnxpart.cli.weights import WeightsOpt, weights_policy
from onnxpart.errors import UserError
from onnxpart.partition import IDEAL_LIMIT as PARTITION_IDEAL_LIMIT
from onnxpart.partition import REGISTRY
from onnxpart.units import format_bytes, format_seconds, parse_bandwidth, parse_bytes

BOUNDS_HELP = REGISTRY.help("Lower bounds to prove, comma-separated (or none):")


@handle_errors
@takes_option_groups
def partition(
    model: Path = typer.Argument(..., help="ONNX model, or a JSON graph: costs.json, dnn-partitioning or networkx node-link."),
    stages: Annotated[int, typer.Option("-k", "--stages", help="Number of pipeline stages k (1 to 1024; empty "
                                        "stages are allowed)."), STAGES] = ...,
    output: OutputOpt = None,
    bounds: str = typer.Option("simple,bottleneck,exact", "--bounds", help=BOUNDS_HELP),
    time_limit: TimeLimitOpt = 60.0,
    search: Search = Search(),
    source: ModelSource = ModelSource(),
    freeze_dims: FreezeDimsOpt = False,
    external_data_threshold: ExternalDataOpt = None,
    weights: WeightsOpt = "copy",
    bandwidth: Annotated[Optional[str], typer.Option("--bandwidth", help="Inter-stage bandwidth (e.g. 25GB/s); default: the device's interconnect."), Quantity(parse_bandwidth)] = None,
    stage_memory: Annotated[Optional[str], typer.Option("--stage-memory", help="Fast memory per stage for parameters (e.g. 40MiB); the excess streams at the bandwidth (Eq. 2). Off by default."), Quantity(parse_bytes)] = None,
    verify: VerifyOpt = False,
    verify_tol: VerifyTolOpt = 1e-4,
    check_certificate: CheckCertificateOpt = None,
    population: Annotated[int, typer.Option("--population", help="BRKGA population size."), POPULATION] = 100,
    generations: Annotated[int, typer.Option("--generations", help="BRKGA generations (0: no BRKGA)."), GENERATIONS] = 100,
    elite: Annotated[float, typer.Option("--elite", help="BRKGA elite fraction."), FRACTION] = 0.2,
    mutants: Annotated[float, typer.Option("--mutants", help="BRKGA mutant fraction."), FRACTION] = 0.15,
    rho: Annotated[float, typer.Option("--rho", help="BRKGA probability of inheriting the elite parent's gene."), FRACTION] = 0.7,
    random_orders: Annotated[int, typer.Option("--random-orders", help="Random priority vectors tried before BRKGA (random-T)."), RANDOM_ORDERS] = 100,
    mla: bool = typer.Option(True, "--mla/--no-mla", help="Seed the search with an mla-weighted order."),
    ideal_limit: Annotated[int, typer.Option("--ideal-limit", help="Use the exact ideal DP when the DAG has at most this many ideals (0: never)."), IDEAL_LIMIT] = PARTITION_IDEAL_LIMIT,
    mode: OutputMode = OutputMode(),
) -> None:
    """Split a model into k pipeline stages minimizing the bottleneck stage (MTPP), with proven lower bounds."""
    from onnxpart.files import OutputDir
    from onnxpart.output_guard import run_reads
    from onnxpart.partition import Options, solve
    from onnxpart.partition.orders import BrkgaOptions
    from onnxpart.readers import check_format

    methods = tuple(m for m in REGISTRY.parse(bounds, "--bounds", extra=("none",), what="bound") if m != "none")
    limit = gap_limit(search.max_gap)
    check_format(source.graph_format)
    if output is None and check_certificate is None:
        raise UserError("pass --output/-o DIR (or --check-certificate DIR)")

    inst, graph, loaded = _load(model, source, bandwidth=bandwidth, stage_memory=stage_memory)
    model_sha = loaded.sha256 if loaded is not None else graph.model_sha256
    if check_certificate is not None:
        _check(inst, graph, check_certificate, model_sha, loaded is not None, mode.as_json)
        return
    _warn(inst, graph, stages)
    if verify and loaded is None:
        raise UserError("--verify needs an ONNX model (graph-only input has nothing to run)")
    out = OutputDir(output, force=mode.force, clean=mode.clean, reads=run_reads(model, loaded, costs=source.costs,
                                                                                  device=source.device))
    policy = weights_policy(loaded, external_data_threshold, weights, output, mode.as_json)
    options = Options(k=stages, time_limit=time_limit, seed=search.seed, bounds=methods, workers=search.workers,
                      brkga=BrkgaOptions(population=population, generations=generations, elite=elite,
                                         mutants=mutants, rho=rho),
                      random_orders=random_orders, mla=mla, ideal_limit=ideal_limit)
    with progress_bar(time_limit, lambda value, _: format_seconds(value), disable=mode.as_json) as on_progress:
        solution = solve(inst, dataclasses.replace(options, progress=on_progress),
                         seconds=run_clock.solve_seconds(time_limit))
    summary = _write(out, solution, graph, loaded, model, model_sha, options, policy,
                     dict(verify=verify, seed=search.seed, tolerance=verify_tol, freeze=freeze_dims))
    if mode.as_json:
        print_json(summary)
    else:
        _print(summary)
    enforce_gap(summary["certificate"], limit, output)


def _load(model: Path, source: ModelSource, *, bandwidth, stage_memory):
    """-> (Instance, OpGraph, LoadedModel or None for graph-only input)."""
    from onnxpart.partition.model import from_graph

    bw = parse_bandwidth(bandwidth, "--bandwidth") if bandwidth is not None else None
    memory = parse_bytes(stage_memory, "--stage-memory") if stage_memory is not None else None
    loaded = source.load(model)
    return from_graph(loaded.graph, bandwidth=bw, stage_memory=memory), loaded.graph, loaded.model


def _warn(inst, graph, stages: int) -> None:
    """Notes on stderr: more stages than ops; ops that need more than --stage-memory by themselves."""
    if stages > inst.n:
        err_console.print(f"[yellow]note:[/] k = {stages} exceeds the {inst.n} ops: at least "
                          f"{stages - inst.n} stages will be empty (allowed)", highlight=False)
    if inst.stage_memory is not None:
        _warn_memory(graph, inst.stage_memory)


def _warn_memory(graph, memory: float) -> None:
    """Warn about ops whose parameters and tensors alone exceed the stage memory."""
    heavy = []
    for op in graph.ops:
        tensors = sum(graph.tensors[n].bytes for n in op.inputs + op.outputs if n in graph.tensors)
        total = op.param_bytes + tensors
        if total > memory:
            heavy.append((total, op.name))
    if heavy:
        heavy.sort(reverse=True)
        shown = ", ".join(f"{name} ({format_bytes(size)})" for size, name in heavy[:5])
        more = f" and {len(heavy) - 5} more" if len(heavy) > 5 else ""
        err_console.print(f"[yellow]warning:[/] {len(heavy)} ops need more than --stage-memory "
                          f"{format_bytes(memory)} by themselves (parameters + tensors): {shown}{more}; their "
                          "stages will stream the excess", highlight=False)


def _write(out, solution, graph, loaded, model_path: Path, model_sha, options, policy, check: dict) -> dict:
    """Stages, annotated model, manifest and certificate into ``out`` (:func:`write_outputs`); with
    ``check["verify"]`` the written stages are run against the original first, and a mismatch leaves
    nothing written."""
    from onnxpart.partition import emit

    recorded = {"k": options.k, "time_limit": options.time_limit, "seed": options.seed,
                "bounds": list(options.bounds), "bandwidth": solution.instance.bandwidth,
                "stage_memory": solution.instance.stage_memory}
    return write_outputs(
        out, "manifest.json", lambda written: emit.manifest(solution, graph, str(model_path), model_sha,
                                                            *(written or (None, None))),
        emit.certificate(solution, model_sha, recorded),
        models=lambda out: ({}, None) if loaded is None else _write_models(out, solution, graph, loaded, policy,
                                                                           check["freeze"]),
        verify=(lambda out, manifest: verify_written(out, loaded, manifest["stages"], check, "stages").to_dict())
        if check["verify"] else None)


def _write_models(out, solution, graph, loaded, policy, freeze: bool) -> tuple[dict[int, str], dict[int, list[str]]]:
    """``stage_i.onnx`` (+ ``.data``) per non-empty stage and ``annotated.onnx``; -> ({stage: file}, {stage:
    its inputs held as constants}: with ``freeze``, shapes an earlier stage computes from frozen dims)."""
    import functools

    from onnxpart.partition import emit
    from onnxpart.writer import write_annotated, write_model

    files, constants = {}, {}
    declare = functools.partial(loaded.value_info, freeze=freeze)
    io = emit.stage_io(graph, solution.assignment, solution.k)
    for index, stage in emit.stage_models(loaded.model, graph, solution, declare, loaded.types if freeze else None):
        files[index] = emit.stage_file(index)
        held = {init.name for init in stage.graph.initializer}
        constants[index] = [name for name in io[index][0] if name in held]
        write_model(stage, out.path(files[index]), policy)
    annotated = emit.annotated_model(loaded.model, graph, solution)
    write_annotated(annotated, out.path("annotated.onnx"), policy)
    return files, constants


def _print(summary: dict) -> None:
    manifest, cert = summary["manifest"], summary["certificate"]
    table = Table(title=f"{manifest['graph']}: {manifest['k']} stages ({manifest['method']})", title_justify="left")
    for column in ("stage", "ops", "work", "in", "out", "overflow", "cost", ""):
        table.add_column(column, justify="left" if column in ("", "stage") else "right")
    empty = []
    for stage in manifest["stages"]:
        if not stage["ops"]:
            empty.append(stage["index"])
            continue
        mark = "◀" if stage["index"] == manifest["bottleneck_stage"] else ""
        table.add_row(str(stage["index"]), str(len(stage["ops"])), format_seconds(stage["work"]),
                      format_seconds(stage["io_in"]), format_seconds(stage["io_out"]),
                      format_seconds(stage["overflow"]) if stage["overflow"] else "-",
                      format_seconds(stage["cost"]), mark)
    console.print(table)
    if empty:
        console.print(f"empty stages: {', '.join(map(str, empty))} (more stages do not help this graph)", highlight=False)
    print_closing(summary, _certificate_line(cert), "stages")


def _certificate_line(cert: dict) -> str:
    return certificate_line(cert, "bottleneck", format_seconds)


def _check(inst, graph, folder: Path, model_sha, onnx_input: bool, as_json: bool) -> None:
    from onnxpart.partition.check import check_certificate

    def check(manifest, cert):
        return check_certificate(inst, graph, manifest, cert, model_sha, str(folder / "manifest.json"), onnx_input)

    check_folder(folder, "manifest.json", check, lambda facts: (
        f"certificate ok: every stage recomputed from the manifest's op lists, bottleneck "
        f"{format_seconds(facts['upper_bound'])}; simple bound {format_seconds(facts['simple_bound'])} re-checked"),
        as_json, problem="mtpp")
