"""`onnxpart inspect`: what is in a model — ops, parameters, FLOPs, activations, peak memory of the file's
order, costliest ops."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli.common import (COARSEN_HELP, COSTS_HELP, COST_HELP, DEVICE_HELP, DIM_HELP, ForceShapeOpt,
                                 INPUT_SHAPE_HELP, TOP, console, handle_errors, load_costed, print_json)
from onnxpart.units import format_bytes, format_flops, format_seconds


@handle_errors
def inspect(
    model: Path = typer.Argument(..., help="ONNX model (or a costs.json graph)."),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help=INPUT_SHAPE_HELP),
    force_shape: ForceShapeOpt = False,
    dim: Optional[list[str]] = typer.Option(None, "--dim", help=DIM_HELP),
    cost: str = typer.Option("analytic", "--cost", help=COST_HELP),
    device: str = typer.Option("a100", "--device", help=DEVICE_HELP),
    costs: Optional[Path] = typer.Option(None, "--costs", help=COSTS_HELP),
    coarsen: bool = typer.Option(False, "--coarsen", help=COARSEN_HELP),
    top: Annotated[int, typer.Option("--top", help="How many of the costliest ops to list."), TOP] = 10,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
) -> None:
    """Summarize a model: ops, parameters, FLOPs, activations, peak memory, costliest ops."""
    from onnxpart.inspect_report import inspect_report

    from onnxpart.shapes import symbolic_dims

    loaded = load_costed(model, input_shape=input_shape, coarsen=coarsen, costs=costs, cost=cost, device=device,
                         dim=dim, force_shape=force_shape)
    summary = inspect_report(loaded.graph, top=top)
    summary["model"] = str(model)
    if loaded.model is not None:
        summary["symbolic_dims"] = [{"name": name, "inputs": inputs, "value": loaded.model.dims.get(name)}
                                    for name, inputs in symbolic_dims(loaded.model.model).items()]
    if loaded.measured_end_to_end is not None:
        summary["measured_end_to_end"] = loaded.measured_end_to_end
    if as_json:
        print_json(summary)
        return
    overview = Table(title=f"{model.name}", show_header=False, title_justify="left")
    overview.add_column(style="bold")
    overview.add_column()
    overview.add_row("ONNX nodes", f"{summary['onnx_nodes']}  →  {summary['ops']} compute ops, "
                                   f"{summary['edges']} edges")
    overview.add_row("parameters", f"{summary['params']} tensors, {format_bytes(summary['param_bytes'])}")
    overview.add_row("compute", f"{format_flops(summary['flops'])}, {format_seconds(summary['work'])} "
                                f"({summary['cost_model']} on {summary['device']})")
    if "measured_end_to_end" in summary:
        overview.add_row("measured run", format_seconds(summary["measured_end_to_end"]) + " end to end")
    overview.add_row("activations", f"{format_bytes(summary['activation_bytes'])} produced; peak "
                                    f"{format_bytes(summary['peak_activation_bytes'])} in the file's order "
                                    f"(at {summary['peak_at_op']})")
    overview.add_row("inputs", ", ".join(f"{i['name']} {i['dtype']}{i['shape']}" for i in summary["inputs"]))
    if summary.get("symbolic_dims"):
        overview.add_row("symbolic dims", ", ".join(f"{d['name']}={d['value']} ({', '.join(d['inputs'])})"
                                                    for d in summary["symbolic_dims"]))
    overview.add_row("outputs", ", ".join(f"{o['name']} {o['dtype']}{o['shape']}" for o in summary["outputs"]))
    overview.add_row("op types", ", ".join(f"{t}×{c}" for t, c in summary["op_types"].items()))
    if summary["opaque_ops"]:
        overview.add_row("opaque ops", ", ".join(summary["opaque_ops"]))
    console.print(overview)
    if summary["costliest_ops"]:
        table = Table(title=f"costliest {len(summary['costliest_ops'])} ops", title_justify="left")
        for column in ("op", "type", "work", "share", "FLOPs", "params"):
            table.add_column(column, justify="right" if column not in ("op", "type") else "left")
        for op in summary["costliest_ops"]:
            table.add_row(op["name"], op["op_type"], format_seconds(op["work"]), f"{op['share']:.1%}",
                          format_flops(op["flops"]), format_bytes(op["param_bytes"]))
        console.print(table)
