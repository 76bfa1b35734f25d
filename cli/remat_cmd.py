"""`onnxpart remat`: fit a memory budget with the least recomputation, emit the rematerialized model, and
say how close to optimal it is."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (COARSEN_HELP, COST_HELP, COSTS_HELP, DEVICE_HELP, DIM_HELP, EXTERNAL_HELP,
                                 FORMAT_HELP, FREEZE_HELP, INPUT_SHAPE_HELP, VERIFY_TOL_HELP, console, err_console,
                                 handle_errors, load_costed, print_json, progress_bar, verify_line, weight_policy)
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.units import byte_unit, format_bytes, format_seconds


@handle_errors
def remat(
    model: Path = typer.Argument(..., help="ONNX model, or a JSON graph: costs.json, dnn-partitioning or networkx node-link."),
    budget: str = typer.Option(..., "--budget", "-b", help="Memory budget: 80% (of the file order's peak), 24MiB, 6,422,528 (bytes), or min (the smallest that works: Moccasin phase 1 with half the time limit)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder for remat.onnx, sequence.json, certificate.json, memory.png."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output folder."),
    method: str = typer.Option("moccasin", "--method", help="moccasin, checkmate, checkmate-lp, greedy; comma-separated to run several."),
    compare: bool = typer.Option(False, "--compare", help="Run the methods on the same instance and print one table (all four if one is named)."),
    order: str = typer.Option("fixed", "--order", help="fixed: the file's order (paper §2.3); minmem: the memory-minimizing order; free: the solver picks (§2.1)."),
    max_recompute: int = typer.Option(2, "--max-recompute", min=1, help="C_v: how many times an op may be computed (2 = at most one recomputation)."),
    time_limit: float = typer.Option(60.0, "--time-limit", min=0.1, help="Seconds per method."),
    order_time_limit: float = typer.Option(10.0, "--order-time-limit", min=0.0, help="Seconds for the exact part of --order minmem."),
    workers: int = typer.Option(2, "--workers", min=1, help="CP-SAT workers."),
    seed: int = typer.Option(0, "--seed", help="Solver seed (and the seed of --verify's inputs)."),
    deterministic: bool = typer.Option(False, "--deterministic", help="Reproducible CP-SAT runs: interleaved workers, deterministic time limit."),
    precedence: str = typer.Option("literals", "--precedence", help="Moccasin precedence encoding: literals (Eq. 5) or reservoir (Eq. 10)."),
    include_params: bool = typer.Option(False, "--include-params", help="Count parameters in the memory (resident all along)."),
    verify: bool = typer.Option(False, "--verify", help="Run remat.onnx in onnxruntime (at the costed dims and twice each dynamic dim), compare outputs with the original, report ORT's measured peak."),
    verify_tol: float = typer.Option(1e-4, "--verify-tol", min=0.0, help=VERIFY_TOL_HELP),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help=INPUT_SHAPE_HELP),
    dim: Optional[list[str]] = typer.Option(None, "--dim", help=DIM_HELP),
    freeze_dims: bool = typer.Option(False, "--freeze-dims", help=FREEZE_HELP),
    external_data_threshold: Optional[str] = typer.Option(None, "--external-data-threshold", help=EXTERNAL_HELP + " [default: 1GiB]"),
    cost: str = typer.Option("analytic", "--cost", help=COST_HELP),
    device: str = typer.Option("a100", "--device", help=DEVICE_HELP),
    costs: Optional[Path] = typer.Option(None, "--costs", help=COSTS_HELP),
    coarsen: bool = typer.Option(False, "--coarsen", help=COARSEN_HELP),
    graph_format: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    ort_optimize: bool = typer.Option(False, "--ort-optimize", help="Plan on onnxruntime's BASIC-optimized graph "
                                      "(constant folding, redundant nodes, standard-op fusions); the budget stays "
                                      "relative to the original's peak and --verify compares with the original."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Fit a memory budget with the least recomputation (Moccasin CP-SAT; Checkmate baselines)."""
    from onnxpart import remat as rm
    from onnxpart.board import Board
    from onnxpart.readers import check_format
    from onnxpart.units import parse_percent_or_bytes

    methods = tuple(m.strip() for m in method.split(",") if m.strip())
    if compare and len(methods) == 1:
        methods = rm.METHODS
    if precedence not in ("literals", "reservoir"):
        raise UserError(f"unknown --precedence {precedence!r}: use literals or reservoir")
    check_format(graph_format)
    options = rm.RematOptions(
        budget=parse_percent_or_bytes(budget), methods=methods, order=order, max_copies=max_recompute,
        time_limit=time_limit, order_time_limit=order_time_limit, workers=workers, seed=seed,
        include_params=include_params, deterministic=deterministic, precedence=precedence)
    with contextlib.ExitStack() as scratch:  # --ort-optimize: its temporary model lives until the end
        prepass = None
        if ort_optimize:
            _refuse_ort_optimize(model, costs, graph_format)
            loaded, prepass = _load_ort_optimized(model, input_shape, dim, coarsen, cost, device, include_params,
                                                  scratch)
            graph = loaded.graph
            if options.budget[0] != "min":  # --budget P% is of the peak of the model the user gave
                options = replace(options, budget=("bytes", rm.resolve_budget(*options.budget, prepass.original_peak)))
        else:
            loaded = load_costed(model, fmt=graph_format, input_shape=input_shape, coarsen=coarsen, costs=costs,
                                 cost=cost, device=device, dim=dim)
            graph = loaded.graph
        if verify and loaded.model is None:
            raise UserError("--verify needs an ONNX model; a graph file has nothing to run")
        out = None
        if output is not None or verify:
            import tempfile

            from onnxpart.files import OutputDir

            # refuse an existing folder before solving; --verify alone runs the files in a scratch folder
            where = output or Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="onnxpart-"))) / "out"
            out = OutputDir(where, force=force)

        try:
            phases = {"phase1": "phase 1: peak", "phase2": "phase 2: time", "checkmate": "checkmate MILP"}
            total = time_limit * len(methods) + (order_time_limit if order == "minmem" else 0.0)
            with progress_bar(total, _remat_value, disable=as_json, phases=phases) as on_progress:
                solution = rm.solve(graph, options, Board(on_progress))
        except InfeasibleError as exc:
            if out is not None:
                out.discard()
            partial = getattr(exc, "solution", None)
            if partial is not None and compare and not as_json:
                _compare_table(partial)
            raise

        payload = rm.summary(solution)
        cert = rm.certificate(solution, graph.model_sha256)
        payload["certificate"] = cert.to_dict()
        if prepass is not None:
            payload["ort_optimize"] = prepass.to_dict()
        source = loaded.model
        try:
            remat_model = _remat_model(source, graph, solution, include_params, freeze_dims, payload)
            if out is not None:
                policy = weight_policy(source, external_data_threshold) if source is not None else None
                files = _write(out, graph, solution, cert, remat_model, payload, policy,
                               dict(verify=verify, seed=seed, tolerance=verify_tol, prepass=prepass, source=source))
                if output is not None:
                    payload["files"] = files
        except BaseException:
            if out is not None:
                out.discard()
            raise
        if as_json:
            print_json(payload)
            return
        if compare or len(methods) > 1:
            _compare_table(solution)
        if prepass is not None:
            console.print(_prepass_line(prepass), highlight=False, soft_wrap=True)
        # markup off: the line ends with "[method, status]", which rich would take for a style tag and drop
        console.print(_summary_line(solution, cert, prepass), highlight=False, soft_wrap=True, markup=False)
        if "verify" in payload:
            v = payload["verify"]
            ort = (f"onnxruntime measured peak {format_bytes(v['ort_peak_bytes'])} (original {format_bytes(v['ort_original_peak_bytes'])}), "
                   f"predicted {format_bytes(v['predicted_peak_bytes'])}"
                   if v["ort_peak_bytes"] is not None else "onnxruntime reported no memory peak")
            console.print(verify_line(v, f"{v['outputs']} outputs"), highlight=False, soft_wrap=True)
            console.print(f"memory: {ort}" + (f"; note: {v['memory_note']}" if v["memory_note"] else ""),
                          highlight=False, soft_wrap=True)
        if out is not None:
            console.print(f"wrote {', '.join(payload['files'])} to {output}", highlight=False)


def _remat_value(value: float, phase: str) -> str:
    """Phase 1 bounds bytes (the peak); the other phases, durations."""
    return format_bytes(value) if phase == "phase1" else format_seconds(value)


def _remat_model(source, graph, solution, include_params: bool, freeze: bool, payload: dict):
    """remat.onnx in memory (None for graph-only input), its own node order re-simulated within budget."""
    if source is None:
        return None
    import functools

    from onnxpart.remat.emit import build_remat_model, check_emitted

    declare = functools.partial(source.value_info, freeze=True) if freeze else None
    remat_model = build_remat_model(source.model, graph, solution.best.profile, solution.budget, declare)
    payload["emitted_peak_bytes"] = check_emitted(remat_model, solution.budget, include_params, source.hints,
                                                  source.dims)
    return remat_model


def _write(out, graph, solution, cert, remat_model, payload: dict, policy, check: dict) -> list[str]:
    """The output folder. With ``check["verify"]`` the written remat.onnx is run against the original
    first (a mismatch leaves nothing written); the --ort-optimize and --verify reports go into
    sequence.json as they are."""
    from onnxpart.files import write_json
    from onnxpart.remat.emit import plot_memory, sequence_payload
    from onnxpart.writer import write_model

    best = solution.best
    files = []
    if remat_model is not None:
        files += [path.name for path in write_model(remat_model, out.path("remat.onnx"), policy)]
    if check["verify"]:
        from onnxpart.remat.verify import verify as run_verify

        prepass = check["prepass"]
        with err_console.status("verifying in onnxruntime…"):
            reference = prepass.original_model if prepass is not None else check["source"]
            payload["verify"] = run_verify(reference, out.path("remat.onnx"), best.profile.peak,
                                           seed=check["seed"], tolerance=check["tolerance"])
        _raise_if_failed(payload["verify"])
    extra = {key: payload[key] for key in ("ort_optimize", "verify") if key in payload}
    write_json(out.path("sequence.json"), sequence_payload(graph, best.profile, solution.budget, solution.baseline,
                                                           best.result.method, extra))
    write_json(out.path("certificate.json"), cert.to_dict())
    plot_memory(out.path("memory.png"), solution.baseline, best.profile, solution.budget,
                f"{graph.name}{' after ort-optimize' if 'ort_optimize' in extra else ''}: "
                f"{best.result.method}, order {solution.options.order}")
    files += ["sequence.json", "certificate.json", "memory.png"]
    out.commit()
    return files


def _raise_if_failed(report: dict) -> None:
    from onnxpart.verify import VerifyReport

    check = VerifyReport(seed=report["seed"], tolerance=report["tolerance"], sizes=report["sizes"])
    check.raise_if_failed()


@dataclass(frozen=True)
class OrtPrePass:
    """What --ort-optimize did: the model the user gave (what --verify compares with, and whose file-order
    peak --budget P% is relative to) and the optimized graph the plan is for."""

    original_model: Any  # LoadedModel: the model the user gave
    original_sha256: str
    optimized_sha256: str
    original_nodes: int  # ONNX nodes
    optimized_nodes: int
    original_ops: int  # compute ops (weight generators folded)
    optimized_ops: int
    original_peak: float  # file order, no recomputation
    optimized_peak: float

    def to_dict(self) -> dict:
        import onnxruntime

        from onnxpart.ort_optimize import LEVEL

        return {"level": LEVEL, "onnxruntime_version": onnxruntime.__version__,
                "original_sha256": self.original_sha256, "optimized_sha256": self.optimized_sha256,
                "original_nodes": self.original_nodes, "optimized_nodes": self.optimized_nodes,
                "original_ops": self.original_ops, "optimized_ops": self.optimized_ops,
                "original_peak_bytes": self.original_peak, "optimized_peak_bytes": self.optimized_peak}


def _refuse_ort_optimize(model: Path, costs: Optional[Path], graph_format: str) -> None:
    """--ort-optimize needs an ONNX model and costs it itself."""
    from onnxpart.readers import reads_model

    if not reads_model(model, graph_format):
        raise UserError(f"--ort-optimize needs an ONNX model: {model} is a graph file, which onnxruntime has "
                        f"nothing to optimize in")
    if costs is not None:
        raise UserError(f"--ort-optimize cannot use --costs {costs}: those costs are for the unoptimized graph, "
                        f"whose nodes the optimizer fuses and removes; drop --costs (the optimized graph is "
                        f"costed with --cost) or drop --ort-optimize")


def _load_ort_optimized(model: Path, input_shape, dim, coarsen: bool, cost: str, device: str, include_params: bool,
                        scratch: contextlib.ExitStack):
    """The costed, BASIC-optimized graph of ``model`` (what remat plans) and the :class:`OrtPrePass` report."""
    from onnxpart import remat as rm
    from onnxpart.onnx_io import load_graph, parse_dims, parse_input_shapes
    from onnxpart.ort_optimize import ort_optimized

    def file_order_peak(graph) -> float:
        return rm.baseline(rm.build_instance(graph, include_params)).peak

    original_graph, original = load_graph(model, parse_input_shapes(input_shape or []), coarsen=coarsen,
                                          dims=parse_dims(dim or []))
    path = scratch.enter_context(ort_optimized(model))  # its weights stay there: remat.onnx reads them
    optimized = load_costed(path, input_shape=input_shape, coarsen=coarsen, cost=cost, device=device, dim=dim)
    prepass = OrtPrePass(
        original_model=original, original_sha256=original.sha256, optimized_sha256=optimized.model.sha256,
        original_nodes=len(original.model.graph.node), optimized_nodes=len(optimized.model.model.graph.node),
        original_ops=len(original_graph.ops), optimized_ops=len(optimized.graph.ops),
        original_peak=file_order_peak(original_graph), optimized_peak=file_order_peak(optimized.graph))
    return optimized, prepass


def _prepass_line(prepass: OrtPrePass) -> str:
    scale, unit = byte_unit(max(prepass.original_peak, prepass.optimized_peak))
    return (f"ort-optimize (onnxruntime ORT_ENABLE_BASIC): {prepass.original_nodes} → {prepass.optimized_nodes} "
            f"ONNX nodes, {prepass.original_ops} → {prepass.optimized_ops} ops; file-order peak "
            f"{prepass.original_peak / scale:.2f} {unit} (original) → {prepass.optimized_peak / scale:.2f} {unit} "
            f"(optimized). --budget P% is of the original's peak; the plan and remat.onnx are for the optimized graph")


def _summary_line(solution, cert, prepass: Optional[OrtPrePass] = None) -> str:
    best = solution.best
    scale, unit = byte_unit(max(solution.baseline.peak, prepass.original_peak if prepass else 0))
    lb = cert.details["tdi_lower_bound"]
    proven = "proven optimal" if cert.proven_optimal else f"proven ≥ {100 * lb:+.2f}%"
    peaks = f"{solution.baseline.peak / scale:.1f}"
    if prepass is not None:
        peaks = f"{prepass.original_peak / scale:.1f} → {peaks} (ort-optimize)"
    return (f"peak {peaks} → {best.profile.peak / scale:.1f} {unit} "
            f"(budget {solution.budget / scale:.1f}), duration {100 * best.profile.tdi:+.2f}% ({proven}), "
            f"{best.profile.recomputations} ops recomputed [{best.result.method}, {best.result.status}]")


def _compare_table(solution) -> None:
    from onnxpart import remat as rm

    data = rm.summary(solution)
    scale, unit = byte_unit(solution.baseline.peak)
    table = Table(title=f"remat, budget {solution.budget / scale:.1f} {unit} "
                        f"(baseline {solution.baseline.peak / scale:.1f} {unit})", title_justify="left")
    table.add_column("method", no_wrap=True, min_width=12)
    table.add_column("status", no_wrap=True)
    for column in ("TDI", "proven ≥", f"peak ({unit})", "recomputed", "time to best", "seconds"):
        table.add_column(column, justify="right")
    for row in data["methods"]:
        pct = lambda v: "—" if v is None else f"{100 * v:+.2f}%"  # noqa: E731
        table.add_row(row["method"], row["status"], pct(row["tdi"]), pct(row["tdi_lower_bound"]),
                      "—" if row["peak_bytes"] is None else f"{row['peak_bytes'] / scale:.2f}",
                      "—" if row["recomputations"] is None else str(row["recomputations"]),
                      "—" if row["time_to_best"] is None else f"{row['time_to_best']:.1f} s",
                      f"{row['seconds']:.1f} s")
    console.print(table)
