"""`onnxpart remat`: fit a memory budget with the least recomputation, emit the rematerialized model, and
say how close to optimal it is. The algorithms live in onnxpart.remat; this module parses options, shows
progress and prints the result."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (CheckCertificateOpt, ExternalDataOpt, FreezeDimsOpt, MAX_RECOMPUTE, ORDER_TIME_LIMIT,
                                 OutputOpt, Quantity, TimeLimitOpt, VerifyOpt, VerifyTolOpt, check_folder, console,
                                 enforce_gap, err_console, gap_limit, handle_errors, print_json, progress_bar,
                                 run_clock, verify_line, write_outputs)
from onnxpart.cli.option_groups import ModelSource, OutputMode, Search, takes_option_groups
from onnxpart.cli.weights import WeightsOpt, weights_policy
from onnxpart.errors import InfeasibleError, UserError
from onnxpart.remat import REGISTRY
from onnxpart.units import byte_unit, format_bytes, format_seconds, parse_percent_or_bytes

PHASES = {"phase1": "phase 1: peak", "phase2": "phase 2: time", "checkmate": "checkmate MILP"}
METHOD_HELP = REGISTRY.help("Comma-separated to run several, sharing --time-limit:")


@handle_errors
@takes_option_groups
def remat(
    model: Path = typer.Argument(..., help="ONNX model, or a JSON graph: costs.json, dnn-partitioning or networkx node-link."),
    budget: Annotated[str, typer.Option("--budget", "-b", help="Memory budget: 80% (of the file order's peak), 24MiB, 6,422,528 (bytes), or min (the smallest that works: Moccasin phase 1 with half the time limit)."), Quantity(parse_percent_or_bytes)] = ...,
    output: OutputOpt = None,
    mode: OutputMode = OutputMode(),
    method: str = typer.Option("moccasin", "--method", help=METHOD_HELP),
    compare: bool = typer.Option(False, "--compare", help="Run the methods on the same instance and print one table (all of them if one is named)."),
    order: str = typer.Option("best", "--order", help="best: the better of fixed and minmem, each with half the time; fixed: the file's order (paper §2.3); minmem: the memory-minimizing order; free: the solver picks (§2.1)."),
    max_recompute: Annotated[int, typer.Option("--max-recompute", help="C_v: how many times an op may be computed (2 = at most one recomputation)."), MAX_RECOMPUTE] = 2,
    time_limit: TimeLimitOpt = 60.0,
    order_time_limit: Annotated[float, typer.Option("--order-time-limit", help="Seconds (out of --time-limit) for the exact part of --order minmem and best."), ORDER_TIME_LIMIT] = 10.0,
    search: Search = Search(),
    check_certificate: CheckCertificateOpt = None,
    deterministic: bool = typer.Option(False, "--deterministic", help="Reproducible CP-SAT runs: interleaved workers, deterministic time limit."),
    precedence: str = typer.Option("literals", "--precedence", help="Moccasin precedence encoding: literals (Eq. 5) or reservoir (Eq. 10)."),
    include_params: bool = typer.Option(False, "--include-params", help="Count parameters in the memory (resident all along)."),
    verify: VerifyOpt = False,
    verify_tol: VerifyTolOpt = 1e-4,
    freeze_dims: FreezeDimsOpt = False,
    external_data_threshold: ExternalDataOpt = None,
    weights: WeightsOpt = "copy",
    source: ModelSource = ModelSource(),
    ort_optimize: bool = typer.Option(False, "--ort-optimize", help="Plan on onnxruntime's BASIC-optimized graph "
                                      "(constant folding, redundant nodes, standard-op fusions); the budget stays "
                                      "relative to the original's peak and --verify compares with the original."),
) -> None:
    """Fit a memory budget with the least recomputation (Moccasin CP-SAT; Checkmate baselines)."""
    from onnxpart import remat as rm
    from onnxpart.output_guard import run_reads
    from onnxpart.readers import check_format

    methods = REGISTRY.parse(method)
    check_format(source.graph_format)
    limit = gap_limit(search.max_gap)
    options = rm.Options(  # --time-limit is the whole run (onnxpart.remat: how it is shared)
        budget=parse_percent_or_bytes(budget, "--budget"), order=order, max_copies=max_recompute,
        methods=REGISTRY.names if compare and len(methods) == 1 else methods, time_limit=time_limit,
        order_time_limit=order_time_limit, workers=search.workers, seed=search.seed, include_params=include_params,
        deterministic=deterministic, precedence=precedence)
    with contextlib.ExitStack() as scratch:  # --ort-optimize's model and --verify's scratch folder live to the end
        loaded, prepass, options = _load(model, options, scratch, source, ort_optimize=ort_optimize)
        if check_certificate is not None:
            return _check(loaded.graph, check_certificate, mode.as_json)
        if verify and loaded.model is None:
            raise UserError("--verify needs an ONNX model; a graph file has nothing to run")
        reads = run_reads(model, loaded.model, prepass.original_model if prepass else None, costs=source.costs,
                          device=source.device)
        out = _output_dir(output, verify, scratch, force=mode.force, clean=mode.clean, reads=reads)
        policy = _policy(loaded, prepass, external_data_threshold, weights, output, mode.as_json)
        solution = _solve(loaded.graph, options, time_limit, compare and not mode.as_json, mode.as_json)
        summary = _emit(out, loaded, model, solution, prepass, dict(
            verify=verify, seed=search.seed, tolerance=verify_tol, freeze=freeze_dims, policy=policy,
            include_params=include_params))
    summary["output"] = None if output is None else str(output)
    if mode.as_json:
        print_json(summary)
    else:
        _print(summary, solution, prepass, compare or len(methods) > 1)
    enforce_gap(summary["certificate"], limit, output)


def _load(model: Path, options, scratch: contextlib.ExitStack, source: ModelSource, *, ort_optimize: bool):
    """-> (Loaded, OrtPrePass or None, options with --budget P% resolved against the original model)."""
    from onnxpart.remat.model import resolve_budget
    from onnxpart.remat.prepass import load_ort_optimized, refuse_ort_optimize

    if not ort_optimize:
        return source.load(model), None, options
    refuse_ort_optimize(model, source.costs, source.graph_format)
    loaded, prepass = load_ort_optimized(model, source.input_shape, source.force_shape, source.dim, source.coarsen,
                                         source.cost, source.device, options.include_params, scratch)
    if options.budget[0] != "min":  # --budget P% is of the peak of the model the user gave
        options = dataclasses.replace(options, budget=("bytes", resolve_budget(*options.budget,
                                                                               prepass.original_peak)))
    return loaded, prepass, options


def _policy(loaded, prepass, threshold: Optional[str], weights: str, output: Optional[Path], quiet: bool):
    """How remat.onnx gets its weights (:func:`onnxpart.cli.weights.weights_policy`; None for a graph file).
    With --ort-optimize its weights are onnxruntime's rewrite in a scratch folder removed at exit: nothing
    there to link or reference."""
    if prepass is not None and weights in ("link", "reference"):
        raise UserError(f"--weights {weights} shares the input's data files, but with --ort-optimize remat.onnx's "
                        "weights are onnxruntime's rewrite in a scratch folder removed at exit: use --weights copy")
    return weights_policy(loaded.model, threshold, weights, output, quiet)


def _output_dir(output: Optional[Path], verify: bool, scratch: contextlib.ExitStack, **guard):
    """The output folder, checked before solving (``guard``: ``force``, ``clean`` and the files the run
    ``reads``, :class:`onnxpart.files.OutputDir`); with --verify alone, a scratch folder (the check runs
    the written remat.onnx). None when nothing is to be written."""
    import tempfile

    from onnxpart.files import OutputDir

    if output is None and not verify:
        return None
    if output is None:
        return OutputDir(Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="onnxpart-"))) / "out")
    return OutputDir(output, **guard)


def _solve(graph, options, time_limit: float, table_on_error: bool, quiet: bool):
    from onnxpart import remat as rm
    from onnxpart.board import Board
    from onnxpart.remat.model import build_instance

    try:
        with progress_bar(time_limit, _remat_value, disable=quiet, phases=PHASES) as on_progress:
            instance = build_instance(graph, options.include_params)
            return rm.solve(instance, options, Board(on_progress), seconds=run_clock.solve_seconds(time_limit))
    except InfeasibleError as exc:
        partial = getattr(exc, "solution", None)
        if partial is not None and table_on_error:
            _compare_table(partial)
        raise


def _emit(out, loaded, model_path: Path, solution, prepass, check: dict) -> dict:
    """remat.onnx (+ .data), sequence.json, certificate.json, memory.png into ``out`` (one atomic commit,
    :func:`write_outputs`); with --verify the written remat.onnx is run against the original first, and a
    mismatch leaves nothing written. -> the JSON result."""
    from onnxpart import remat as rm
    from onnxpart.remat.emit import plot_memory, sequence_payload

    graph, source, best = loaded.graph, loaded.model, solution.best
    extra = {"ort_optimize": prepass.to_dict()} if prepass is not None else {}
    run_clock.mark_writing()  # building remat.onnx and checking its peak is writing it, not solving
    remat_model = _remat_model(source, graph, solution, check["include_params"], check["freeze"], extra)
    files: list[str] = []

    def models(out) -> None:
        files.extend(_write(out, remat_model, check) + ["sequence.json", "certificate.json", "memory.png"])

    def memory_png(out, _) -> None:
        plot_memory(out.path("memory.png"), solution.baseline, best.profile, solution.budget,
                    f"{graph.name}{' after ort-optimize' if prepass is not None else ''}: "
                    f"{best.method}, order {solution.options.order}")

    reference = prepass.original_model if prepass is not None else source
    return write_outputs(
        out, "sequence.json", lambda _: sequence_payload(graph, str(model_path), best.profile, solution.budget,
                                                         solution.baseline, best.method, dict(extra)),
        rm.certificate(solution, graph.model_sha256), models=models, extras=memory_png, report_in="manifest",
        verify=(lambda out, _: _verify(out, reference, best, check)) if check["verify"] else None,
        **rm.summary(solution), **extra, files=files)


def _remat_value(value: float, phase: str) -> str:
    """Phase 1 bounds bytes (the peak); the other phases, durations."""
    return format_bytes(value) if phase == "phase1" else format_seconds(value)


def _remat_model(source, graph, solution, include_params: bool, freeze: bool, extra: dict):
    """remat.onnx in memory (None for graph-only input), its own node order re-simulated within budget."""
    if source is None:
        return None
    import functools

    from onnxpart.remat.emit import build_remat_model, check_emitted

    declare = functools.partial(source.value_info, freeze=True) if freeze else None
    remat_model = build_remat_model(source.model, graph, solution.best.profile, solution.budget, declare)
    extra["emitted_peak_bytes"] = check_emitted(remat_model, solution.budget, include_params, source.hints,
                                                source.dims)
    return remat_model


def _write(out, remat_model, check: dict) -> list[str]:
    from onnxpart.writer import write_model

    if remat_model is None:
        return []
    return [path.name for path in write_model(remat_model, out.path("remat.onnx"), check["policy"])]


def _verify(out, reference, best, check: dict) -> dict:
    from onnxpart.remat.verify import verify as run_verify
    from onnxpart.verify import VerifyReport, too_big_to_run

    skipped = too_big_to_run(reference.model)
    if skipped is not None:
        return VerifyReport(seed=check["seed"], tolerance=check["tolerance"], skipped=skipped).to_dict()
    with err_console.status("verifying in onnxruntime…"):
        report = run_verify(reference, out.path("remat.onnx"), best.profile.peak, seed=check["seed"],
                            tolerance=check["tolerance"], freeze=check["freeze"])
    VerifyReport(seed=report["seed"], tolerance=report["tolerance"], sizes=report["sizes"]).raise_if_failed()
    return report


def _check(graph, folder: Path, as_json: bool) -> None:
    """--check-certificate: re-simulate an earlier output folder's sequence on this model."""
    from onnxpart.remat.check import check_certificate

    def check(sequence, cert):
        problems = check_certificate(graph, sequence, cert, graph.model_sha256, str(folder / "sequence.json"))
        return problems, {"upper_bound": cert.upper_bound}

    check_folder(folder, "sequence.json", check, lambda facts: (
        f"certificate ok: the sequence re-simulates within the budget at duration "
        f"{format_seconds(facts['upper_bound'])}, every field of sequence.json recomputed"), as_json, problem="remat")


def _print(summary: dict, solution, prepass, table: bool) -> None:
    if table:
        _compare_table(solution)
    if prepass is not None:
        console.print(_prepass_line(prepass), highlight=False, soft_wrap=True)
    # markup off: the line ends with "[method, status]", which rich would take for a style tag and drop
    from onnxpart.certificate import Certificate

    cert = Certificate.from_dict(summary["certificate"])
    console.print(_summary_line(solution, cert, prepass), highlight=False, soft_wrap=True, markup=False)
    v = summary["verify"]
    if v is not None:
        ort = (f"onnxruntime measured peak {format_bytes(v['ort_peak_bytes'])} (original "
               f"{format_bytes(v['ort_original_peak_bytes'])}), predicted {format_bytes(v['predicted_peak_bytes'])}"
               if v["ort_peak_bytes"] is not None else "onnxruntime reported no memory peak")
        console.print(verify_line(v, f"{v['outputs']} outputs"), highlight=False, soft_wrap=True)
        console.print(f"memory: {ort}" + (f"; note: {v['memory_note']}" if v["memory_note"] else ""),
                      highlight=False, soft_wrap=True)
    if summary["output"] is not None:
        console.print(f"wrote {', '.join(summary['files'])} to {summary['output']}", highlight=False)


def _prepass_line(prepass) -> str:
    scale, unit = byte_unit(max(prepass.original_peak, prepass.optimized_peak))
    return (f"ort-optimize (onnxruntime ORT_ENABLE_BASIC): {prepass.original_nodes} → {prepass.optimized_nodes} "
            f"ONNX nodes, {prepass.original_ops} → {prepass.optimized_ops} ops; file-order peak "
            f"{prepass.original_peak / scale:.2f} {unit} (original) → {prepass.optimized_peak / scale:.2f} {unit} "
            f"(optimized). --budget P% is of the original's peak; the plan and remat.onnx are for the optimized graph")


def _summary_line(solution, cert, prepass=None) -> str:
    best = solution.best
    scale, unit = byte_unit(max(solution.baseline.peak, prepass.original_peak if prepass else 0))
    proven = _proven(cert)
    peaks = f"{solution.baseline.peak / scale:.1f}"
    if prepass is not None:
        peaks = f"{prepass.original_peak / scale:.1f} → {peaks} (ort-optimize)"
    line = (f"peak {peaks} → {best.profile.peak / scale:.1f} {unit} "
            f"(budget {solution.budget / scale:.1f}), duration {100 * best.profile.tdi:+.2f}% ({proven}"
            f"{' at this budget' if solution.budget_search else ''}), "
            f"{best.profile.recomputations} ops recomputed [{best.method}, {best.status}]")
    return line + _budget_search_line(solution.budget_search, scale, unit)


def _proven(cert) -> str:
    """What the certificate proves about the duration. Under ``--order best`` with two orders tried, the
    bound over either order comes first: the answer's own order's bounds hold in its stages only."""
    own = ("proven optimal" if cert.proven_optimal else f"proven ≥ {100 * cert.details['tdi_lower_bound']:+.2f}%")
    either = [b.value for b in cert.lower_bounds if b.method == "either-order"]
    if not either:
        return own
    base = cert.details["base_duration"]
    over_both = (either[0] - base) / base if base else 0.0
    return f"proven ≥ {100 * over_both:+.2f}% in either order, {own} in the {cert.details['order']} order's stages"


def _budget_search_line(search: Optional[dict], scale: float, unit: str) -> str:
    """What ``--budget min`` proved about the budget, apart from what phase 2 proved about the duration."""
    if search is None:
        return ""
    if search["status"] == "optimal":
        return "; --budget min: no smaller budget works under the restriction (proven)"
    if search["status"] == "heuristic":
        return (f"; --budget min: {search['budget_bytes'] / scale:.1f} {unit} is the smallest peak the greedy's "
                f"first answer reached (Moccasin's model is skipped at this size), not proven the smallest "
                f"(proven ≥ {search['proven_min_bytes'] / scale:.1f} {unit}, the memory floor)")
    return (f"; --budget min: {search['budget_bytes'] / scale:.1f} {unit} is the smallest peak found, not proven "
            f"the smallest (proven ≥ {search['proven_min_bytes'] / scale:.1f} {unit}: the search stopped on its "
            "time limit)")


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
