"""`onnxpart tile`: sharding layouts for an ONNX model on a device mesh (a ring of D devices or an
n-D mesh such as 2x4), or tilings of a matrix program, with a certified lower bound. The algorithms live in onnxpart.tile; this module
parses options, runs load → cost → solve → certificate → emit and prints the result."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (CheckCertificateOpt, CleanOpt, CoarsenOpt, CostOpt, CostsOpt, DeviceOpt, DimOpt,
                                 ExternalDataOpt, ForceOpt, ForceShapeOpt, FormatOpt, InputShapeOpt, JsonOpt,
                                 MaxGapOpt, OutputOpt, Quantity, SeedOpt, TimeLimitOpt, VerifyTolOpt, WorkersOpt,
                                 check_folder, choose, comma_list, console, enforce_gap, err_console, gap_limit,
                                 handle_errors, load_costed, print_json, progress_bar, result, verify_line)
from onnxpart.errors import UserError
from onnxpart.units import DEVICES, format_bytes, format_seconds, parse_bandwidth, parse_bytes, parse_seconds


@handle_errors
def tile(
    model: Path = typer.Argument(..., help="ONNX model (or a costs/graph JSON), or a matrix program JSON."),
    devices: Annotated[Optional[int], typer.Option("--devices", "-d", help="Devices D of a 1-D mesh (ONNX input; "
                                                   "1 to 4096); the same as --mesh D."), DEVICES] = None,
    mesh: Optional[str] = typer.Option(None, "--mesh", help="Mesh shape, devices per axis: 8, or 2x4 for a "
                                       "2-D mesh (ONNX input)."),
    mesh_axes: Optional[str] = typer.Option(None, "--mesh-axes", help="Mesh axis names, comma-separated "
                                            "(default x,y,...), e.g. dp,tp."),
    output: OutputOpt = None,
    method: Optional[str] = typer.Option(None, "--method", help="Methods, comma-separated: local, greedy, exact "
                                         "(ONNX; default all); programs also exhaustive, tree."),
    pin: Optional[list[str]] = typer.Option(None, "--pin", help="Fix a tensor's layout: TENSOR=LAYOUT with LAYOUT "
                                            "R, P or S(d) per mesh axis: S(0) on a 1-D mesh, S(0)R on a 2-D "
                                            "one (repeatable)."),
    explain: bool = typer.Option(False, "--explain", help="Print every resharding and the two ops' preferences "
                                 "that forced it."),
    compare: bool = typer.Option(False, "--compare", help="Print one table of every method's result."),
    mesh_bandwidth: Annotated[Optional[str], typer.Option("--mesh-bandwidth", help="Link bandwidth of each mesh "
                                                          "axis's ring: one value or one per axis (e.g. "
                                                          "300GB/s,25GB/s); default: the device spec's interconnect."),
                              Quantity(lambda text, what: _per_axis(text, what, parse_bandwidth))] = None,
    mesh_latency: Annotated[str, typer.Option("--mesh-latency", help="Seconds per ring step: one value or one per "
                                              "mesh axis (e.g. 2e-6,10us)."),
                            Quantity(lambda text, what: _per_axis(text, what, parse_seconds))] = "5e-6",
    device_memory: Annotated[Optional[str], typer.Option("--device-memory", help="Bound on weights + activations "
                                                         "per device (e.g. 40GiB); exit 4 when no layout fits."),
                             Quantity(parse_bytes)] = None,
    sharded_outputs: bool = typer.Option(False, "--sharded-outputs", help="Leave the graph outputs in their "
                                         "layouts (the next program reads them sharded); default: each is "
                                         "gathered whole onto every device at the end of the step, and priced."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Matrix programs: the tilings allowed, "
                                         "comma-separated subset of row,col,block."),
    time_limit: TimeLimitOpt = 30.0,
    seed: SeedOpt = 0,
    workers: WorkersOpt = 0,
    max_gap: MaxGapOpt = None,
    check_certificate: CheckCertificateOpt = None,
    costs: CostsOpt = None,
    cost: CostOpt = "analytic",
    device: DeviceOpt = "a100",
    input_shape: InputShapeOpt = None,
    force_shape: ForceShapeOpt = False,
    dim: DimOpt = None,
    coarsen: CoarsenOpt = False,
    graph_format: FormatOpt = "auto",
    external_data_threshold: ExternalDataOpt = None,
    verify: bool = typer.Option(False, "--verify", help="Run the plan on D virtual devices (shards in "
                                "onnxruntime, collectives in numpy) against the original on seeded inputs; a "
                                "differing tensor exits 1 and writes nothing."),
    verify_tol: VerifyTolOpt = 1e-4,
    force: ForceOpt = False,
    clean: CleanOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Choose a sharding layout per tensor and an algorithm per op on a device mesh, minimizing the step time
    (sharded compute + resharding collectives), with a proven lower bound (matrix tiling as CHLP)."""
    limit = gap_limit(max_gap)
    if output is None and check_certificate is None:
        raise UserError("pass --output/-o DIR (or --check-certificate DIR)")
    workers = workers or _cores()
    if _is_program(model):
        from onnxpart.cli import tile_program

        if verify:
            raise UserError("--verify runs an ONNX model's plan; a matrix program has no model to run")
        summary = tile_program.run(model, output, method, labels, time_limit, seed, workers, force, clean,
                                   check_certificate, as_json)
    else:
        if labels is not None:
            raise UserError("--labels is for matrix programs; an ONNX model's layouts are R, P and S(d)")
        if verify and force_shape:
            raise UserError("--verify runs the model at its own dims, and a sharding plan holds for the dims it was "
                            "made for, which --force-shape replaced: drop one of them")
        shape = _mesh_shape(devices, mesh)
        loaded = load_costed(model, fmt=graph_format, input_shape=input_shape, coarsen=coarsen, costs=costs,
                             cost=cost, device=device, dim=dim, force_shape=force_shape)
        if verify and loaded.model is None:
            raise UserError("--verify needs an ONNX model (graph-only input has nothing to run)")
        inst = _instance(loaded, shape, mesh_axes, mesh_bandwidth, mesh_latency, device_memory, pin, device,
                         sharded_outputs)
        sha = loaded.model.sha256 if loaded.model is not None else loaded.graph.model_sha256
        if check_certificate is not None:
            _check(inst, check_certificate, sha, as_json)
            return
        from onnxpart.files import OutputDir
        from onnxpart.output_guard import run_reads

        out = OutputDir(output, force=force, clean=clean, reads=run_reads(model, loaded.model, costs=costs,
                                                                          device=device))
        check = {"verify": verify, "seed": seed, "tolerance": verify_tol}
        summary = _solve_and_write(inst, loaded, model, sha, out, method, time_limit, seed, workers,
                                   external_data_threshold, check, as_json)
    if summary is None:
        return
    if as_json:
        print_json(summary)
    else:
        _print(summary, explain, compare)
    enforce_gap(summary["certificate"], limit, output)


def _cores() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _is_program(path: Path) -> bool:
    """A .json file holding a list, or an object with a "program" list, is a matrix program."""
    from onnxpart.files import read_json

    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    try:
        data = read_json(path, "matrix program")
    except UserError:
        return True  # let the program parser say what is wrong
    return isinstance(data, list) or (isinstance(data, dict) and "program" in data)


def _mesh_shape(devices: Optional[int], mesh: Optional[str]) -> tuple[int, ...]:
    """--mesh and --devices -> the mesh shape (--devices D is --mesh D)."""
    from onnxpart.tile.mesh import parse_mesh

    if mesh is None:
        if devices is None:
            raise UserError("pass --devices D or --mesh SHAPE (e.g. --mesh 2x4; every axis ≥ 1)")
        return (devices,)
    shape = parse_mesh(mesh)
    if devices is not None and devices != math.prod(shape):
        raise UserError(f"--devices {devices} disagrees with --mesh {mesh} ({math.prod(shape)} devices): pass one")
    return shape


def _per_axis(text: str, option: str, parse) -> list[float]:
    """One value per mesh axis, or one for all: ``300GB/s,25GB/s`` read by ``parse``."""
    return [parse(part, option) for part in comma_list(text, option, "value", "one value, or one per mesh axis")]


def _instance(loaded, shape, mesh_axes, mesh_bandwidth, mesh_latency, device_memory, pin, device, sharded_outputs):
    from onnxpart.cost_models import load_device
    from onnxpart.tile.onnx_constants import small_constants
    from onnxpart.tile.onnx_model import build_layout_instance, parse_pins

    bandwidth = _per_axis(mesh_bandwidth, "--mesh-bandwidth", parse_bandwidth) if mesh_bandwidth else None
    latency = _per_axis(mesh_latency, "--mesh-latency", parse_seconds)
    memory = parse_bytes(device_memory, "--device-memory") if device_memory is not None else None
    names = comma_list(mesh_axes, "--mesh-axes", "axis name", "one name per mesh axis, e.g. dp,tp") if mesh_axes \
        else None
    constants = small_constants(loaded.model.model) if loaded.model is not None else {}
    inst = build_layout_instance(loaded.graph, shape, bandwidth, latency, memory, parse_pins(pin or [], len(shape)),
                                 constants, names, load_device(device), sharded_outputs)
    _note_replicated_only(inst)
    return inst


def _note_replicated_only(inst) -> None:
    """One note when tensors can only be replicated (no dim divides by the devices), naming the largest model
    tensors among them — not the exporters' tiny shape constants (``/Constant_output_0``), which are left out."""
    from onnxpart.tile.onnx_model import replicated_only_tensors

    devices = inst.mesh.devices
    only_r = replicated_only_tensors(inst)
    if devices > 1 and len(only_r) == len(inst.tensors):
        err_console.print(f"[yellow]note:[/] {devices} devices divide no dimension of any tensor: every tensor "
                          "can only be replicated (R)", highlight=False)
        return
    named = [t for t in only_r if not t.tiny]
    if named:
        examples = ", ".join(t.name for t in sorted(named, key=lambda t: (-t.bytes, t.name))[:3])
        err_console.print(f"[yellow]note:[/] {len(named)} of {len(inst.tensors)} tensors can only be replicated "
                          f"(no dimension divides by {devices}), largest: {examples}", highlight=False)


def _methods(method: Optional[str], known: tuple[str, ...]) -> tuple[str, ...]:
    return known if method is None else choose(method, "--method", known)


def _solve_and_write(inst, loaded, model_path, sha, out, method, time_limit, seed, workers, threshold,
                     check: dict, as_json: bool = False):
    """Solve, then write plan.json, certificate.json and annotated.onnx into ``out`` (an
    :class:`onnxpart.files.OutputDir`); with ``check["verify"]`` the plan is run on the virtual devices
    first, and a mismatch (exit 1) leaves nothing written."""
    from onnxpart.files import write_json
    from onnxpart.tile import emit
    from onnxpart.tile.onnx_search import METHODS, LayoutOptions, solve_layouts

    options = LayoutOptions(_methods(method, METHODS), time_limit, workers, seed)
    from onnxpart.board import Board

    with progress_bar(time_limit, lambda value, _: format_seconds(value), disable=as_json) as on_progress:
        solution = solve_layouts(inst, options, Board(on_progress))
    plan = emit.plan_payload(solution, str(model_path), sha)
    recorded = {"devices": inst.mesh.devices, "mesh": list(inst.mesh.shape), "axis_names": list(inst.mesh.names),
                "bandwidth": emit.axis_values(inst.mesh.bandwidths), "latency": emit.axis_values(inst.mesh.latencies),
                "device_memory": inst.memory, "sharded_outputs": inst.sharded_outputs,
                "methods": list(options.methods), "time_limit": time_limit, "seed": seed}
    cert = emit.certificate(solution, sha, recorded)
    report = None
    with out:
        if check["verify"]:
            report = _verify(solution, loaded, check)
            cert.details["verify"] = report.to_dict()
        write_json(out.path("plan.json"), plan)
        write_json(out.path("certificate.json"), cert.to_dict())
        if loaded.model is not None:
            _write_annotated(out, emit.annotated_model(loaded.model.model, loaded.graph, solution), loaded, threshold)
    totals = plan["totals"]
    return result(out.target, plan, cert.to_dict(), report.to_dict() if report is not None else None,
                  method=solution.method, step_time=solution.cost, one_device=totals["one_device_s"],
                  speed_up=totals["speed_up"], replicated=solution.replicated, results=cert.details["results"])


def _verify(solution, loaded, check: dict):
    from onnxpart.tile.verify import verify_plan

    devices = solution.instance.mesh.devices
    with err_console.status(f"running the plan on {devices} virtual devices in onnxruntime…"):
        report = verify_plan(solution.instance, solution.plan, loaded.graph, loaded.model, seed=check["seed"],
                             tolerance=check["tolerance"])
    report.raise_if_failed()
    return report


def _write_annotated(out, annotated, loaded, threshold) -> None:
    from onnxpart.loading import weight_policy
    from onnxpart.writer import write_annotated

    write_annotated(annotated, out.path("annotated.onnx"), weight_policy(loaded.model, threshold))


def _check(inst, folder: Path, sha, as_json: bool) -> None:
    from onnxpart.tile.plan_check import check_plan

    def check(plan, cert):
        value, problems = check_plan(inst, plan, cert, sha)
        return problems, {"step_time": value}

    check_folder(folder, "plan.json", check, lambda facts: (
        f"certificate ok: step time {format_seconds(facts['step_time'])} recomputed from plan.json"), as_json)


def _print(summary: dict, explain: bool, compare: bool) -> None:
    plan, cert = summary["manifest"], summary["certificate"]
    if compare:
        table = Table(title="methods", title_justify="left")
        for column in ("method", "objective", "status", "seconds"):
            table.add_column(column, justify="left" if column in ("method", "status") else "right")
        for r in cert["details"]["results"]:
            table.add_row(r["method"], "-" if r["cost"] is None else _fmt(plan, r["cost"]), r["status"],
                          f"{r['seconds']:.2f}")
        console.print(table)
    if "tensors" in plan:
        _print_layouts(plan, explain)
    else:
        console.print(", ".join(f"{m}={lab}" for m, lab in plan["labels"].items()), highlight=False, soft_wrap=True)
    lb = cert["best_lower_bound"]
    bound = "no lower bound proven" if lb is None else f"proven ≥ {_fmt(plan, lb)} (gap {cert['gap']:.1%})"
    console.print(f"{cert['objective'].split(' (')[0]}: {_fmt(plan, cert['upper_bound'])} ({plan['method']}), {bound}",
                  highlight=False)
    if "tensors" in plan:
        console.print(_against_one_device(plan["totals"]), highlight=False)
    if summary.get("verify") is not None:
        console.print(verify_line(summary["verify"], f"the plan's {plan['mesh']['devices']} virtual devices"),
                      highlight=False, soft_wrap=True)
    console.print(f"wrote {summary['output']}", highlight=False)


def _against_one_device(totals: dict) -> str:
    one = format_seconds(totals["one_device_s"])
    if totals["replicated"]:
        return (f"no sharding beats one device ({one}): the plan is replicated — every device runs the whole "
                "model, nothing is exchanged")
    return f"speed-up ×{totals['speed_up']:.2f} over one device ({one})"


def _fmt(plan: dict, value: float) -> str:
    return format_seconds(value) if "tensors" in plan else f"{value:g}"


def _print_layouts(plan: dict, explain: bool) -> None:
    totals = plan["totals"]
    sharded = sum(set(t["layout"]) != {"R"} for t in plan["tensors"])
    mesh = "x".join(map(str, plan["mesh"]["shape"]))
    console.print(f"{sharded} of {len(plan['tensors'])} tensors sharded on {plan['mesh']['devices']} devices "
                  f"(mesh {mesh}); "
                  f"compute {format_seconds(totals['compute_s'])}, {totals['reshardings']} reshardings "
                  f"{format_seconds(totals['resharding_s'])}, {format_bytes(totals['memory_per_device'])} per device",
                  highlight=False)
    compute, shapes = replicated_summary(plan), replicated_summary(plan, shape_computations=True)
    if compute:
        console.print(f"replicated only (not in the catalog): {compute} (see plan.json)", highlight=False,
                      soft_wrap=True)
    if shapes:
        console.print(f"shape computations (small integer tensors, replicated at no real cost): {shapes}",
                      highlight=False, soft_wrap=True)
    if explain:
        for r in plan["reshardings"]:
            console.print(f"  {r['tensor']}: {r['from']} → {r['to']} {r['collective']} "
                          f"{format_bytes(r['bytes'])} {format_seconds(r['seconds'])} — "
                          + " vs ".join(r["forced_by"]), highlight=False, soft_wrap=True)


def replicated_summary(plan: dict, shape_computations: bool = False) -> str:
    """plan.json's replicated-only ops by op type, most first: ``12 Reshape, 3 Concat``; the compute ops
    missing from the catalog, or with ``shape_computations`` the ops on tiny integer tensors only."""
    from collections import Counter

    counts = Counter(op["op_type"] for op in plan["ops"]
                     if op["replicated_only"] and op.get("shape_computation", False) == shape_computations)
    return ", ".join(f"{n} {op_type}" for op_type, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
