"""``--calibrate costs.json``: the costs the folder was planned with, rescaled to what this machine did.

The op times come from the costs file the folder was planned with (``--costs``), or, for a folder planned
on the analytic model, from that model again on the manifest's device at the given dims. They must be that
folder's: each stage's ops must add up to the stage work its manifest records (else exit 2 — another
costs file, or another ``--coarsen``/dims). On the CPU with graph optimizations off, the stage files run once
more with onnxruntime's profiler (:mod:`onnxpart.bench.kernels`), and every op type gets its own scale from its
ops' kernel times (:func:`onnxpart.bench.fit.fit_kernels`); the weight generators folded into an op (a light
model's ``ConstantOfShape`` weights) have no roofline of their own, so their measured kernel times are added to
that op as measured. Otherwise the stage walls alone are fit (:func:`onnxpart.bench.fit.fit_units`: a scale
per op type where the stages are many enough, else one). Every op's work becomes
``scale[op type] · work + overhead · launches`` (+ its generators' seconds). The file is written by
:func:`onnxpart.costs_io.graph_to_costs` (the one writer of ``onnxpart.costs/1``), ``cost_model: "calibrated"``,
with the fit recorded beside it, so ``partition --costs calibrated.json`` plans with what this machine does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from onnxpart.bench.fit import fit_kernels, fit_units
from onnxpart.bench.kernels import stage_kernels
from onnxpart.bench.folder import model_file
from onnxpart.errors import UserError

#: how far a stage's summed op work may be from the manifest's (relative; what JSON round trips leave)
AGREEMENT = 1e-6


def calibrate(result, costs: Optional[Path], options) -> tuple[dict, dict]:
    """-> (the fit for bench.json, the calibrated costs document) for a partition or plan ``result``."""
    from onnxpart.costs_io import graph_to_costs

    folder = result.folder
    check_source(folder.kind, folder.manifest, costs)
    graph, model_path = _source(folder, costs, options)
    stages = [r for r in result.rows if r.kind == "stage"]
    units = [u for u in _units(folder) if u.name in {r.unit for r in stages}]
    by_name = {op.name: op for op in graph.ops}
    _check_agrees(units, by_name, costs)
    settings = options.settings
    if settings.provider == "CPUExecutionProvider" and not settings.optimize:
        kernels = stage_kernels(folder, units, settings, options.warmup, options.runs)
        fit, generators = _fit_kernels(graph, units, [r.measured for r in stages], kernels)
        fitted_on = "kernel times of every node in the stages (onnxruntime's profiler) and the stages' walls"
    else:
        work = [_per_type(u.ops, by_name) for u in units]
        launches = [sum(_launches(by_name[name]) for name in u.ops) for u in units]
        fit, generators = fit_units(work, launches, [r.measured for r in stages]), {}
        fitted_on = "the stages' walls"
    calibrated = [op.work * fit.scale(op.op_type) + fit.overhead * _launches(op) + generators.get(op.name, 0.0)
                  for op in graph.ops]
    out = graph.with_costs(calibrated, cost_model="calibrated", device=graph.device, bandwidth=graph.bandwidth)
    about = {**fit.to_dict(), "fit_on": fitted_on, "generators_s": sum(generators.values()),
             "source": str(costs) if costs else f"analytic on {folder.manifest.get('device')}",
             "machine": result.document["machine"]["cpu"], "settings": result.document["settings"]}
    return about, graph_to_costs(out, model_path, extra={"calibration": about})


def _fit_kernels(graph, units, measured: list[float], kernels: dict[str, float]):
    """(:func:`~onnxpart.bench.fit.fit_kernels` on the stages' ops, {op: its generators' measured seconds})."""
    index = {op.name: i for i, op in enumerate(graph.ops)}
    ops = graph.ops
    kernel = [sum(kernels.get(n, 0.0) for n in op.onnx_nodes) for op in ops]
    generators = {op.name: sum(kernels.get(n, 0.0) for n in op.const_nodes) for op in ops if op.const_nodes}
    stage_ops = [[index[name] for name in u.ops] for u in units]
    fit = fit_kernels([op.op_type for op in ops], [op.work for op in ops], kernel, stage_ops,
                      [sum(_launches(ops[i]) for i in members) for members in stage_ops],
                      [sum(generators.get(ops[i].name, 0.0) for i in members) for members in stage_ops], measured)
    return fit, generators


def _launches(op) -> int:
    """The kernels an op runs in a stage file: its nodes and the weight generators folded into it."""
    return len(op.onnx_nodes) + len(op.const_nodes)


def check_source(kind: str, manifest: dict, costs: Optional[Path]) -> None:
    """Refuse, before anything runs, a folder calibration cannot use: not stages, or planned on costs that
    cannot be made again (measured ones) with no ``--costs``."""
    if kind not in ("partition", "plan"):
        raise UserError(f"--calibrate fits stage times: it takes partition and plan folders, not {kind}")
    if costs is None and manifest.get("cost_model") != "analytic":
        raise UserError(f"--calibrate: the folder was planned on {manifest.get('cost_model')!r} costs: pass "
                        "--costs with the costs file it was planned with")


def _units(folder):
    from onnxpart.bench.plans import partition_units, plan_units

    return (partition_units if folder.kind == "partition" else plan_units)(folder)[0]


def _source(folder, costs: Optional[Path], options):
    """(the costed OpGraph the folder was planned on, the model path to record)."""
    if costs is not None:
        from onnxpart.costs_io import graph_from_costs
        from onnxpart.files import read_json

        graph = graph_from_costs(read_json(costs, "costs file"), str(costs))
        if graph.model_sha256 and folder.model_sha256 and graph.model_sha256 != folder.model_sha256:
            raise UserError(f"--costs {costs} was made for another model than the folder's (sha256 "
                            f"{graph.model_sha256[:12]}… against {folder.model_sha256[:12]}…)")
        return graph, folder.model_path
    return _analytic(folder, options), folder.model_path


def _analytic(folder, options):
    from onnxpart.loading import load_costed

    model = model_file(folder.model_path, folder.model_sha256, options.model, needed=True)
    settings = options.settings
    dims = [f"{name}={value}" for name, value in settings.dims.items()]
    shapes = [f"{name}={'x'.join(map(str, dims_))}" for name, dims_ in settings.shapes.items()]
    return load_costed(model, cost="analytic", device=folder.manifest.get("device") or "a100", dim=dims,
                       input_shape=shapes).graph


def _per_type(ops, by_name) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ops:
        op = by_name[name]
        out[op.op_type] = out.get(op.op_type, 0.0) + op.work
    return out


def _check_agrees(units, by_name, costs: Optional[Path]) -> None:
    """Each stage's ops exist in the costs and add up to the stage's recorded work."""
    where = f"--costs {costs}" if costs else "the analytic costs at these dims"
    for unit in units:
        missing = [name for name in unit.ops if name not in by_name]
        if missing:
            raise UserError(f"{where} has no op {missing[0]!r} of {unit.name}: not the costs the folder was planned "
                            "with (another --coarsen?)")
        total = sum(by_name[name].work for name in unit.ops)
        if abs(total - unit.predicted) > AGREEMENT * max(abs(unit.predicted), 1e-12):
            raise UserError(f"{where} puts {total:.6g} s on {unit.name}, the manifest {unit.predicted:.6g} s: not the "
                            "costs the folder was planned with (pass --costs, and the --dim values it was planned at)")
