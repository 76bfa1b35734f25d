"""`onnxpart tile model.onnx`: the ONNX layout problem (onnxpart.tile.onnx) run for the `tile` command —
load → cost → layout instance → solve → certificate → plan.json, certificate.json, annotated.onnx — and
its lines of the terminal report."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from onnxpart.cli.common import (check_folder, comma_list, err_console, progress_bar, run_clock, verify_line,
                                 write_outputs)
from onnxpart.cli.option_groups import ModelSource
from onnxpart.cli.weights import weights_policy
from onnxpart.errors import UserError
from onnxpart.units import format_bytes, format_seconds, parse_bandwidth, parse_bytes, parse_seconds


@dataclass(frozen=True)
class MeshOptions:
    """The options that make the layout instance (as typed: checked where it is built)."""

    devices: Optional[int]
    mesh: Optional[str]
    mesh_axes: Optional[str]
    mesh_bandwidth: Optional[str]
    mesh_latency: str
    device_memory: Optional[str]
    pin: Optional[list[str]]
    sharded_outputs: bool


def run(path: Path, output: Optional[Path], check_certificate: Optional[Path], method: Optional[str],
        time_limit: float, seed: int, workers: int, force: bool, clean: bool, as_json: bool, *, labels, verify: bool,
        verify_tol: float, mesh: MeshOptions, source: ModelSource, weights: tuple) -> Optional[dict]:
    """Tile the model in ``path`` into ``output``, or check an earlier folder; -> the JSON result (None after a
    check). ``source``: how to read and cost the model; ``weights``: (--external-data-threshold, --weights)."""
    if labels is not None:
        raise UserError("--labels is for matrix programs; an ONNX model's layouts are R, P and S(d)")
    if verify and source.force_shape:
        raise UserError("--verify runs the model at its own dims, and a sharding plan holds for the dims it was "
                        "made for, which --force-shape replaced: drop one of them")
    shape = _mesh_shape(mesh.devices, mesh.mesh)
    loaded = source.load(path)
    if verify and loaded.model is None:
        raise UserError("--verify needs an ONNX model (graph-only input has nothing to run)")
    inst = _instance(loaded, shape, mesh, source.device)
    sha = loaded.model.sha256 if loaded.model is not None else loaded.graph.model_sha256
    if check_certificate is not None:
        _check(inst, check_certificate, sha, as_json)
        return None
    from onnxpart.files import OutputDir
    from onnxpart.output_guard import run_reads

    out = OutputDir(output, force=force, clean=clean, reads=run_reads(path, loaded.model, costs=source.costs,
                                                                       device=source.device))
    policy = weights_policy(loaded.model, *weights, output, as_json)
    check = {"verify": verify, "seed": seed, "tolerance": verify_tol}
    return _solve_and_write(inst, loaded, path, sha, out, (method, time_limit, seed, workers), policy, check,
                            as_json)


def _mesh_shape(devices: Optional[int], mesh: Optional[str]) -> tuple[int, ...]:
    """--mesh and --devices -> the mesh shape (--devices D is --mesh D)."""
    from onnxpart.tile.onnx.mesh import parse_mesh

    if mesh is None:
        if devices is None:
            raise UserError("pass --devices D or --mesh SHAPE (e.g. --mesh 2x4; every axis ≥ 1)")
        return (devices,)
    shape = parse_mesh(mesh)
    if devices is not None and devices != math.prod(shape):
        raise UserError(f"--devices {devices} disagrees with --mesh {mesh} ({math.prod(shape)} devices): pass one")
    return shape


def per_axis(text: str, option: str, parse) -> list[float]:
    """One value per mesh axis, or one for all: ``300GB/s,25GB/s`` read by ``parse``."""
    return [parse(part, option) for part in comma_list(text, option, "value", "one value, or one per mesh axis")]


def _instance(loaded, shape, mesh: MeshOptions, device: str):
    """The layout instance of the loaded model on the mesh (small constants read from the model by the I/O
    layer, :func:`onnxpart.onnx_constants.small_constants`), with the replicated-only note."""
    from onnxpart.cost_models import load_device
    from onnxpart.onnx_constants import small_constants
    from onnxpart.tile.onnx.build import build_layout_instance, parse_pins

    bandwidth = per_axis(mesh.mesh_bandwidth, "--mesh-bandwidth", parse_bandwidth) if mesh.mesh_bandwidth else None
    latency = per_axis(mesh.mesh_latency, "--mesh-latency", parse_seconds)
    memory = parse_bytes(mesh.device_memory, "--device-memory") if mesh.device_memory is not None else None
    names = comma_list(mesh.mesh_axes, "--mesh-axes", "axis name", "one name per mesh axis, e.g. dp,tp") \
        if mesh.mesh_axes else None
    constants = small_constants(loaded.model.model) if loaded.model is not None else {}
    pins = parse_pins(mesh.pin or [], len(shape))
    inst = build_layout_instance(loaded.graph, shape, bandwidth, latency, memory, pins, constants, names,
                                 load_device(device), mesh.sharded_outputs)
    _note_replicated_only(inst)
    return inst


def _note_replicated_only(inst) -> None:
    """One note when tensors can only be replicated (no dim divides by the devices), naming the largest model
    tensors among them — not the exporters' tiny shape constants (``/Constant_output_0``), which are left out."""
    from onnxpart.tile.onnx.model import replicated_only_tensors

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


def _solve_and_write(inst, loaded, model_path, sha, out, solving: tuple, policy, check: dict, as_json: bool):
    """Solve (``solving``: --method, --time-limit, --seed, --workers) in what the time limit leaves after loading,
    then write annotated.onnx, plan.json and certificate.json into ``out`` (an :class:`onnxpart.files.OutputDir`,
    by :func:`write_outputs`); with ``check["verify"]`` the plan is run on the virtual devices first, and a
    mismatch (exit 1) leaves nothing written."""
    from onnxpart import tile
    from onnxpart.board import Board
    from onnxpart.tile.onnx import REGISTRY, LayoutOptions, emit

    method, time_limit, seed, workers = solving
    options = LayoutOptions(REGISTRY.names if method is None else REGISTRY.parse(method), time_limit, workers, seed)
    with progress_bar(time_limit, lambda value, _: format_seconds(value), disable=as_json) as on_progress:
        solution = tile.solve(inst, options, Board(on_progress), run_clock.solve_seconds(time_limit))
    recorded = {"devices": inst.mesh.devices, "mesh": list(inst.mesh.shape), "axis_names": list(inst.mesh.names),
                "bandwidth": emit.axis_values(inst.mesh.bandwidths), "latency": emit.axis_values(inst.mesh.latencies),
                "device_memory": inst.memory, "sharded_outputs": inst.sharded_outputs,
                "methods": list(options.methods), "time_limit": time_limit, "seed": seed}
    cert = emit.certificate(solution, sha, recorded)

    def models(folder) -> None:
        _write_annotated(folder, emit.annotated_model(loaded.model.model, loaded.graph, solution), policy)

    def verify(folder, plan: dict) -> dict:
        return _verify(solution, loaded, check).to_dict()

    return write_outputs(out, "plan.json", lambda _: emit.plan_payload(solution, str(model_path), sha), cert,
                         models=models if loaded.model is not None else None,
                         verify=verify if check["verify"] else None, method=solution.method,
                         step_time=solution.cost, one_device=solution.one_device, speed_up=solution.speed_up,
                         replicated=solution.replicated, results=cert.details["results"])


def _verify(solution, loaded, check: dict):
    from onnxpart.tile.onnx.verify import verify_plan

    devices = solution.instance.mesh.devices
    with err_console.status(f"running the plan on {devices} virtual devices in onnxruntime…"):
        report = verify_plan(solution.instance, solution.plan, loaded.graph, loaded.model, seed=check["seed"],
                             tolerance=check["tolerance"])
    report.raise_if_failed()
    return report


def _write_annotated(out, annotated, policy) -> None:
    from onnxpart.writer import write_annotated

    write_annotated(annotated, out.path("annotated.onnx"), policy)


def _check(inst, folder: Path, sha, as_json: bool) -> None:
    from onnxpart.tile.onnx.check import check_plan

    def check(plan, cert):
        value, problems = check_plan(inst, plan, cert, sha)
        return problems, {"step_time": value}

    check_folder(folder, "plan.json", check, lambda facts: (
        f"certificate ok: step time {format_seconds(facts['step_time'])} recomputed from plan.json"), as_json)


def report(summary: dict, explain: bool) -> tuple[Callable[[float], str], list[str], list[str]]:
    """The terminal report of a result: (how a step time is written, the lines before the objective line — the
    layouts, what stays replicated, with ``explain`` every resharding —, the lines after it — the speed-up over
    one device, the --verify line)."""
    plan, totals = summary["manifest"], summary["manifest"]["totals"]
    sharded = sum(set(t["layout"]) != {"R"} for t in plan["tensors"])
    mesh = "x".join(map(str, plan["mesh"]["shape"]))
    before = [f"{sharded} of {len(plan['tensors'])} tensors sharded on {plan['mesh']['devices']} devices "
              f"(mesh {mesh}); compute {format_seconds(totals['compute_s'])}, {totals['reshardings']} reshardings "
              f"{format_seconds(totals['resharding_s'])}, {format_bytes(totals['memory_per_device'])} per device"]
    compute, shapes = replicated_summary(plan), replicated_summary(plan, shape_computations=True)
    if compute:
        before.append(f"replicated only (not in the catalog): {compute} (see plan.json)")
    if shapes:
        before.append(f"shape computations (small integer tensors, replicated at no real cost): {shapes}")
    if explain:
        before += [f"  {r['tensor']}: {r['from']} → {r['to']} {r['collective']} {format_bytes(r['bytes'])} "
                   f"{format_seconds(r['seconds'])} — " + " vs ".join(r["forced_by"]) for r in plan["reshardings"]]
    after = [_against_one_device(totals)]
    if summary.get("verify") is not None:
        after.append(verify_line(summary["verify"], f"the plan's {plan['mesh']['devices']} virtual devices"))
    return format_seconds, before, after


def _against_one_device(totals: dict) -> str:
    one = format_seconds(totals["one_device_s"])
    if totals["replicated"]:
        return (f"no sharding beats one device ({one}): the plan is replicated — every device runs the whole "
                "model, nothing is exchanged")
    return f"speed-up ×{totals['speed_up']:.2f} over one device ({one})"


def replicated_summary(plan: dict, shape_computations: bool = False) -> str:
    """plan.json's replicated-only ops by op type, most first: ``12 Reshape, 3 Concat``; the compute ops
    missing from the catalog, or with ``shape_computations`` the ops on tiny integer tensors only."""
    from collections import Counter

    counts = Counter(op["op_type"] for op in plan["ops"]
                     if op["replicated_only"] and op.get("shape_computation", False) == shape_computations)
    return ", ".join(f"{n} {op_type}" for op_type, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
