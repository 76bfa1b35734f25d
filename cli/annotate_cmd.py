"""`onnxpart annotate`: cost every op and write costs.json (schema in README.md)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from onnxpart.cli.common import (BESIDE, COARSEN_HELP, COST_HELP, CleanOpt, DEVICE_HELP, DIM_HELP, ForceShapeOpt,
                                 INPUT_SHAPE_HELP, MIN_TIME, MIN_TIME_DEFAULT, RUNS, WORKERS, console, handle_errors,
                                 load_costed, print_json)
from onnxpart.errors import UserError
from onnxpart.units import BATCH, format_seconds


@handle_errors
def annotate(
    model: Path = typer.Argument(..., help="ONNX model."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write costs.json."),
    cost: str = typer.Option("analytic", "--cost", help=COST_HELP),
    device: str = typer.Option("a100", "--device", help=DEVICE_HELP),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help=INPUT_SHAPE_HELP),
    force_shape: ForceShapeOpt = False,
    dim: Optional[list[str]] = typer.Option(None, "--dim", help=DIM_HELP),
    coarsen: bool = typer.Option(False, "--coarsen", help=COARSEN_HELP),
    runs: Annotated[int, typer.Option("--runs", help="Profiled runs for --cost measured (median per node)."), RUNS] = 5,
    threads: Annotated[int, typer.Option("--threads", help="onnxruntime intra-op threads for --cost measured (0: its "
                                         "default, one per core). Profile with what each worker will have: "
                                         "a k-stage pipeline on C cores gives a stage C/k."), WORKERS] = 0,
    min_time: Annotated[float, typer.Option("--min-time", help="--cost measured: keep profiling past --runs until "
                                            "this many seconds have passed (at most 200 runs)."),
                        MIN_TIME] = MIN_TIME_DEFAULT,
    beside: Annotated[int, typer.Option("--beside", help="--cost measured: profile while N more copies of the "
                                        "model run on other cores (--threads cores each), as a pipeline's other "
                                        "stages run beside each stage; bench --beside N times stages alike."),
                      BESIDE] = 0,
    batch: Annotated[Optional[int], typer.Option("--batch", help="Cost a batch of B inputs: the symbolic dim on axis 0 "
                                                 "of every graph input set to B × its --dim value (default 1); "
                                                 "recorded as the file's batch, for a system file's costs: {B: file}."),
                     BATCH] = None,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing costs file that onnxpart wrote."),
    clean: CleanOpt = False,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
) -> None:
    """Cost every op (analytic roofline or measured with onnxruntime) and write costs.json."""
    from onnxpart.cost_models import load_device
    from onnxpart.cost_models.measured import Profiling
    from onnxpart.costs_io import SCHEMA, graph_to_costs
    from onnxpart.files import write_json
    from onnxpart.output_guard import check_file, run_reads

    if batch is not None:
        dim = _batch_dims(model, dim or [], batch)
    profiling = Profiling(runs=runs, threads=threads, min_seconds=min_time, beside=beside)
    loaded = load_costed(model, input_shape=input_shape, coarsen=coarsen, cost=cost, device=device, dim=dim,
                         need_model=True, force_shape=force_shape, profiling=profiling)
    check_file(output, run_reads(model, loaded.model, device=device), force, clean, SCHEMA)
    graph = loaded.graph
    extra: dict = {"batch": batch or 1}
    if loaded.measured_end_to_end is not None:
        extra["measured"] = {"end_to_end": loaded.measured_end_to_end, "kernel_total": loaded.measured_kernel_total,
                             **profiling.describe()}
    spec = asdict(load_device(device))
    write_json(output, graph_to_costs(graph, str(model), device_spec=spec, extra=extra))
    summary = {"output": str(output), "ops": len(graph.ops), "work": graph.total_work,
               "cost_model": graph.cost_model, "device": graph.device, **extra}
    if as_json:
        print_json(summary)
        return
    line = f"wrote {output}: {len(graph.ops)} ops, total work {format_seconds(graph.total_work)} ({graph.cost_model}"
    line += f" on {graph.device})" if graph.cost_model == "analytic" else ")"
    if batch is not None:
        line += f"; batch {batch}"
    if loaded.measured_end_to_end is not None:
        line += (f"; profiled kernels sum to {format_seconds(loaded.measured_kernel_total)}, scaled to the "
                 f"{format_seconds(loaded.measured_end_to_end)} measured end to end with the profiler off")
    console.print(line, highlight=False)


def _batch_dims(model: Path, dim: list[str], batch: int) -> list[str]:
    """``--dim`` with the model's batch dim (:func:`onnxpart.schedule.throughput.verify.batch_dim`: the symbolic dim
    on axis 0 of every graph input) set to ``batch`` × its rows per input (its ``--dim`` value, default 1)."""
    from onnxpart.onnx_io import parse_dims, read_model
    from onnxpart.schedule.throughput.verify import batch_dim

    name = batch_dim(read_model(model).model)
    if name is None:
        raise UserError(f"--batch {batch}: axis 0 of {model.name}'s graph inputs is a fixed size, so the batch "
                        "cannot be set (export the model with a symbolic batch dim)")
    rows = parse_dims(dim).get(name, 1)
    return [d for d in dim if d.split("=", 1)[0].strip() != name] + [f"{name}={rows * batch}"]
