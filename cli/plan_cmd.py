"""`onnxpart plan`: one certified plan for a model on a cluster — pipeline stages × a device mesh per stage ×
memory that fits. The algorithms live in onnxpart.plan; this module parses the options, solves with a progress
bar, writes through the shared sequence (stage files, manifest.json, certificate.json, plan.png) and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (CheckCertificateOpt, ExternalDataOpt, OutputOpt, TimeLimitOpt, VerifyOpt,
                                 VerifyTolOpt, certificate_line, check_folder, comma_list, console, enforce_gap,
                                 err_console, gap_limit, handle_errors, print_closing, print_json, progress_bar,
                                 run_clock, verify_written, write_outputs)
from onnxpart.cli.option_groups import ModelSource, OutputMode, Search, takes_option_groups
from onnxpart.cli.weights import WeightsOpt, weights_policy
from onnxpart.errors import UserError
from onnxpart.plan import REGISTRY
from onnxpart.units import BATCH, DEVICES, Range, format_bytes, format_seconds, parse_number

#: --units: how many units the model's ops are cut into at most.
UNITS = Range(1, 100_000, integer=True)

ClusterOpt = Annotated[str, typer.Option("--cluster", help="The cluster: NODESxDEVICES:SPEC (e.g. 2x8:a100; links "
                                         "default to the spec's interconnect inside a node, 25 GB/s and 5 µs between "
                                         "nodes) or a YAML/JSON cluster file (README, Plan).")]
ObjectiveOpt = Annotated[str, typer.Option("--objective", help="latency (one input) or throughput (--batch inputs "
                                           "in micro-batches over replicas).")]
BatchOpt = Annotated[int, typer.Option("--batch", help="Inputs in the step (throughput)."), BATCH]
MicroOpt = Annotated[Optional[int], typer.Option("--micro-batches", help="Micro-batches M per replica (must divide "
                                                 "--batch; default: chosen by the search)."), BATCH]
MeshSizesOpt = Annotated[Optional[str], typer.Option("--mesh-sizes", help="Only stage meshes of these device counts, "
                                                     "comma-separated (e.g. 1,2,8; 1: one device per stage, tile "
                                                     "off).")]
UnitsOpt = Annotated[Optional[int], typer.Option("--units", help="Cut the ops into at most this many units; stages are "
                                                 "runs of units [default: 64]."), UNITS]
MethodOpt = Annotated[Optional[str], typer.Option("--method", help=REGISTRY.help("Methods, comma-separated (default "
                                                                                 "all):"))]


@handle_errors
@takes_option_groups
def plan(
    context: typer.Context,
    model: Path = typer.Argument(..., help="ONNX model, or a JSON graph (costs.json, ...): no stage files then."),
    cluster: ClusterOpt = ...,
    output: OutputOpt = None,
    objective: ObjectiveOpt = "latency",
    batch: BatchOpt = 1,
    micro_batches: MicroOpt = None,
    mesh_sizes: MeshSizesOpt = None,
    units: UnitsOpt = None,
    method: MethodOpt = None,
    time_limit: TimeLimitOpt = 60.0,
    search: Search = Search(),
    source: ModelSource = ModelSource(),
    external_data_threshold: ExternalDataOpt = None,
    weights: WeightsOpt = "copy",
    verify: VerifyOpt = False,
    verify_tol: VerifyTolOpt = 1e-4,
    check_certificate: CheckCertificateOpt = None,
    mode: OutputMode = OutputMode(),
) -> None:
    """Split a model over a cluster: pipeline stages, a device mesh per stage with tile's layouts inside,
    replicas, memory that fits — the fastest plan found, every baseline beside it, and a proven lower bound."""
    from onnxpart import plan as planning
    from onnxpart.plan.cluster import read_cluster

    limit = gap_limit(search.max_gap)
    if output is None and check_certificate is None:
        raise UserError("pass --output/-o DIR (or --check-certificate DIR)")
    methods = REGISTRY.names if method is None else REGISTRY.parse(method)
    machines = read_cluster(cluster)
    sizes = _mesh_sizes(mesh_sizes, machines)
    loaded = _load(model, source, cluster, machines, context.get_parameter_source("device").name == "DEFAULT")
    problem = _problem(loaded, machines, objective, batch, micro_batches, sizes, units)
    sha = loaded.model.sha256 if loaded.model is not None else loaded.graph.model_sha256
    if check_certificate is not None:
        _check(problem, check_certificate, sha, mode.as_json)
        return
    if verify and loaded.model is None:
        raise UserError("--verify needs an ONNX model (graph-only input has nothing to run)")
    from onnxpart.files import OutputDir
    from onnxpart.output_guard import run_reads

    out = OutputDir(output, force=mode.force, clean=mode.clean,
                    reads=run_reads(model, loaded.model, costs=source.costs, device=source.device))
    policy = weights_policy(loaded.model, external_data_threshold, weights, output, mode.as_json)
    options = planning.Options(tuple(methods), time_limit, search.seed, search.workers)
    with progress_bar(time_limit, lambda value, _: format_seconds(value), disable=mode.as_json) as on_progress:
        from onnxpart.board import Board

        solution = planning.solve(problem, options, Board(on_progress), run_clock.solve_seconds(time_limit))
    check = {"verify": verify, "seed": search.seed, "tolerance": verify_tol, "freeze": False}
    summary = _write(out, solution, loaded, model, sha, options, policy, check)
    if mode.as_json:
        print_json(summary)
    else:
        _print(summary)
    enforce_gap(summary["certificate"], limit, output)


def _mesh_sizes(text: Optional[str], machines) -> Optional[tuple[int, ...]]:
    """--mesh-sizes: each a device count of a sub-mesh of the cluster (UserError naming the sizes there)."""
    from onnxpart.plan.cluster import sub_meshes

    if text is None:
        return None
    sizes = tuple(parse_number(word, "--mesh-sizes", DEVICES)
                  for word in comma_list(text, "--mesh-sizes", "size", "device counts, e.g. 1,2,8"))
    allowed = sorted({m.size for m in sub_meshes(machines)})
    wrong = [size for size in sizes if size not in allowed]
    if wrong:
        raise UserError(f"--mesh-sizes {text}: {', '.join(map(str, wrong))} is not the size of a sub-mesh of "
                        f"{machines.nodes}x{machines.devices_per_node} (1×d inside a node, or whole nodes): use "
                        f"{', '.join(map(str, allowed))}")
    return sizes


def _load(model: Path, source: ModelSource, text: str, machines, default_device: bool):
    """The model, costed on the cluster's device unless --device is given: the shorthand's spec, or the cluster
    file's spec file; a spec written inline in the cluster file costs the graph with it after loading."""
    import dataclasses

    if not default_device or source.costs is not None or source.cost != "analytic":
        return source.load(model)
    if not Path(text).is_file():
        return dataclasses.replace(source, device=text.split(":", 1)[1].strip()).load(model)
    if len(machines.files) > 1:
        return dataclasses.replace(source, device=str(machines.files[1])).load(model)
    from onnxpart.cost_models import analytic_costs

    loaded = source.load(model)
    return dataclasses.replace(loaded, graph=analytic_costs(loaded.graph, machines.spec))


def _problem(loaded, machines, objective: str, batch: int, micro_batches, sizes, units):
    from onnxpart.onnx_constants import small_constants
    from onnxpart.plan.model import Problem
    from onnxpart.plan.units import MAX_UNITS

    constants = small_constants(loaded.model.model) if loaded.model is not None else {}
    return Problem(loaded.graph, machines, objective, batch, micro_batches, sizes,
                   MAX_UNITS if units is None else units, constants=constants)


def _write(out, solution, loaded, model_path: Path, sha, options, policy, check: dict) -> dict:
    """Stage files, manifest.json, certificate.json and plan.png into ``out`` (:func:`write_outputs`); with
    ``check["verify"]`` the written stages run chained against the original, and each stage's tile plan on its
    virtual devices, first — a mismatch leaves nothing written."""
    from onnxpart.plan import describe_options, emit

    problem = solution.problem
    recorded = {**describe_options(options), "objective": problem.objective, "batch": problem.batch,
                "micro_batches": problem.micro_batches, "max_units": problem.max_units,
                "mesh_sizes": None if problem.mesh_sizes is None else list(problem.mesh_sizes)}
    cert = emit.certificate(solution, sha, recorded)

    def models(folder) -> dict[int, str]:
        return {} if loaded.model is None else _write_models(folder, solution, loaded, policy)

    def verify(folder, manifest: dict) -> dict:
        report = verify_written(folder, loaded.model, manifest["stages"], check, "stages").to_dict()
        if report["skipped"] is None:
            report["stages"] = _verify_stages(solution, loaded, check)
            report["notes"].append(f"each stage's tile plan also ran on its sub-mesh's virtual devices "
                                   f"({len(report['stages'])} stages)")
        return report

    def chart(folder, manifest: dict) -> None:
        from onnxpart.plan.chart import plan_png

        plan_png(folder.path("plan.png"), manifest, f"{problem.graph.name} on {problem.cluster.name}: "
                                                    f"{manifest['shape']} ({manifest['method']})")

    priced = solution.priced
    return write_outputs(out, "manifest.json", lambda files: emit.manifest(solution, str(model_path), sha, files),
                         cert, models=models, verify=verify if check["verify"] else None, extras=chart,
                         method=solution.method, value=solution.value, shape=priced.shape.describe(),
                         one_device=solution.one_device.value, results=cert.details["results"])


def _write_models(folder, solution, loaded, policy) -> dict[int, str]:
    """``stage_i.onnx`` (+ ``.data`` for big weights, by ``policy``: --weights) per stage, annotated with its
    layouts."""
    import functools

    from onnxpart.plan import emit
    from onnxpart.writer import write_model

    files = {}
    for s, stage in emit.stage_models(loaded.model.model, solution, functools.partial(loaded.model.value_info)):
        files[s] = emit.stage_file(s)
        write_model(stage, folder.path(files[s]), policy)
    return files


def _verify_stages(solution, loaded, check: dict) -> list[dict]:
    from onnxpart.plan.verify import verify_stages

    with err_console.status("running each stage's tile plan on its virtual devices in onnxruntime…"):
        return verify_stages(solution, loaded.model, check["seed"], check["tolerance"])


def _check(problem, folder: Path, sha, as_json: bool) -> None:
    from onnxpart.plan.check import check_plan

    def check(manifest, cert):
        value, problems = check_plan(problem, manifest, cert, sha)
        return problems, {"value": value}

    check_folder(folder, "manifest.json", check, lambda facts: (
        f"certificate ok: every stage rebuilt from its recorded layouts and repriced, objective "
        f"{format_seconds(facts['value'])}"), as_json, problem="plan")


def _print(summary: dict) -> None:
    """The comparison (one row per method and one device), the plan's stages, its transfers, the bound."""
    manifest, cert = summary["manifest"], summary["certificate"]
    table = Table(title=f"{manifest['graph']} on {manifest['cluster']['name']}: {manifest['objective']}",
                  title_justify="left")
    for column in ("method", "objective", "shape", "status", "seconds"):
        table.add_column(column, justify="right" if column in ("objective", "seconds") else "left")
    for r in manifest["comparison"]:
        table.add_row(r["method"] + (" ◀" if r["method"] == manifest["method"] else ""),
                      "-" if r["value"] is None else format_seconds(r["value"]), r["shape"],
                      r["status"] + (f": {r['note']}" if r["note"] else ""), f"{r['seconds']:.2f}")
    one = manifest["one_device"]
    table.add_row("one device", format_seconds(one["value_s"]), one["shape"],
                  "fits" if one["fits"] else f"does not fit: {format_bytes(one['missing_bytes'])} short", "")
    console.print(table)
    _print_stages(manifest)
    print_closing(summary, certificate_line(cert, manifest["objective"], format_seconds), "the stages")


def _print_stages(manifest: dict) -> None:
    table = Table(title=f"plan: {manifest['shape']}", title_justify="left")
    for column in ("stage", "ops", "mesh", "devices", "compute", "period", "memory / device"):
        table.add_column(column, justify="right" if column in ("ops", "compute", "period") else "left")
    capacity = manifest["cluster"]["memory"]
    for stage in manifest["stages"]:
        memory = stage["memory"]
        devices = "; ".join(",".join(map(str, d)) for d in stage["devices"][:4]) + \
            (" …" if len(stage["devices"]) > 4 else "")
        table.add_row(str(stage["index"]), str(len(stage["ops"])), stage["mesh"]["name"], devices,
                      format_seconds(stage["compute_s"]), format_seconds(stage["period_s"]),
                      f"{format_bytes(memory['total'])} of {format_bytes(capacity)} (weights "
                      f"{format_bytes(memory['weights'])})")
    console.print(table)
    for t in manifest["transfers"]:
        console.print(f"transfer {t['source']} → {t['target']}: {len(t['tensors'])} tensors, "
                      f"{format_bytes(t['bytes'])}, {format_seconds(t['seconds'])}", highlight=False)
    totals = manifest["totals"]
    rate = f", {totals['inputs_per_second']:.4g} inputs/s" if totals.get("inputs_per_second") else ""
    console.print(f"latency {format_seconds(totals['latency_s'])}, slowest period "
                  f"{format_seconds(totals['max_period_s'])}, {manifest['replicas']} replica(s) × "
                  f"{manifest['micro_batches']} micro-batch(es){rate}", highlight=False)
