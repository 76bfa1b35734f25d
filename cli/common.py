"""What every command shares: loading a costed graph from a model or a costs file, the options that
say how, error handling, and the terminal."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console

from onnxpart.errors import UserError

console = Console()
err_console = Console(stderr=True)
log = logging.getLogger("onnxpart")

# Options shared by commands that read a model (Typer declares them per command; these are the texts).
INPUT_SHAPE_HELP = ("Shape of a graph input (or of an internal tensor inference cannot see through): "
                    "NAME=DIMS, e.g. input_ids=1x128, or NAME=DIMS:DTYPE (repeatable).")
DIM_HELP = ("Fix a symbolic dim by its name for costing, e.g. batch=1 (repeatable; `inspect` lists the names). "
            "Emitted models keep it dynamic unless --freeze-dims.")
FREEZE_HELP = "Write the --dim/--input-shape values into emitted models instead of keeping their dims symbolic."
EXTERNAL_HELP = ("Emitted models whose weights exceed this size are written as NAME.onnx + NAME.onnx.data "
                 "(always when the input uses external data).")
VERIFY_TOL_HELP = "--verify fails (exit 1) when an output's error relative to its scale exceeds this."
COST_HELP = "Cost model: analytic (roofline on --device) or measured (onnxruntime profiling here)."
DEVICE_HELP = "Device for the analytic model: cpu, t4, a100, h100, or a YAML/JSON spec file."
COSTS_HELP = "Reuse a costs.json from `onnxpart annotate` instead of costing again."
COARSEN_HELP = "Merge single-consumer elementwise chains into their producer first (smaller n)."
FORMAT_HELP = ("Input format: auto (a .json file is a graph, recognised by its keys; anything else an ONNX model), "
               "onnx, costs, dnn-partitioning, node-link.")


def handle_errors(command: Callable) -> Callable:
    """Turn UserError into a one-line message and its exit code; Ctrl-C into exit 130. Bugs keep
    their tracebacks."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UserError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


@dataclass
class Loaded:
    """A costed graph, and the ONNX model it came from (None for graph-only input)."""

    graph: Any  # OpGraph
    model: Any  # LoadedModel | None
    source: Path
    measured_end_to_end: float | None = None


def load_costed(path: Path, *, fmt: str = "auto", input_shape: Optional[list[str]] = None, coarsen: bool = False,
                costs: Optional[Path] = None, cost: str = "analytic", device: str = "a100",
                need_model: bool = False, runs: int = 5, dim: Optional[list[str]] = None) -> Loaded:
    """Model or graph file -> costed OpGraph. Graph files (``--format``, or by suffix and content: costs,
    dnn-partitioning, node-link) go through :func:`onnxpart.readers.read_graph`; models are loaded here,
    which keeps the model for emission and applies ``--costs`` or the ``--cost`` model."""
    from onnxpart.costs_io import apply_costs, read_costs_file
    from onnxpart.onnx_io import load_graph, parse_dims, parse_input_shapes
    from onnxpart.readers import read_graph, reads_model

    if not reads_model(path, fmt):
        if need_model:
            raise UserError(f"{path} is a graph file: this command needs the ONNX model")
        return Loaded(read_graph(path, fmt), None, path)
    graph, loaded = load_graph(path, parse_input_shapes(input_shape or []), coarsen=coarsen,
                               dims=parse_dims(dim or []))
    if costs is not None:
        return Loaded(apply_costs(graph, read_costs_file(costs), source=str(costs)), loaded, path)
    return cost_graph(graph, loaded, path, cost, device, runs)


def cost_graph(graph, loaded, path: Path, cost: str, device: str, runs: int = 5) -> Loaded:
    from onnxpart.cost_models import analytic_costs, load_device

    if cost == "analytic":
        return Loaded(analytic_costs(graph, load_device(device)), loaded, path)
    if cost == "measured":
        from onnxpart.cost_models.measured import measured_costs

        spec = load_device(device)
        with err_console.status(f"profiling {path.name} in onnxruntime ({runs} runs)…"):
            result = measured_costs(graph.replace(bandwidth=spec.interconnect_bandwidth), loaded, runs=runs)
        return Loaded(result.graph, loaded, path, measured_end_to_end=result.end_to_end)
    raise UserError(f"unknown cost model {cost!r}: use analytic or measured")


def print_json(payload: Any) -> None:
    """Machine output on stdout: plain JSON, nothing else."""
    sys.stdout.write(json.dumps(payload, indent=2, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(type(value).__name__)


def weight_policy(loaded, threshold: Optional[str]):
    """How emitted models store their weights (``--external-data-threshold``)."""
    from onnxpart.units import parse_bytes
    from onnxpart.writer import WeightPolicy

    limit = int(parse_bytes(threshold)) if threshold is not None else WeightPolicy.threshold
    return WeightPolicy(source_dir=loaded.folder, always_external=loaded.uses_external_data, threshold=limit)


def verify_line(report: dict, what: str) -> str:
    """One line for a ``--verify`` report (onnxpart.verify.VerifyReport.to_dict())."""
    sizes = "; ".join(f"{_dims_text(size['dims'])}max abs {size['max_abs_error']:.3g}, relative "
                      f"{size['max_rel_error']:.3g}" for size in report["sizes"])
    notes = "".join(f" ({note})" for note in report["notes"])
    return f"verify: {what} reproduce the model's outputs ({sizes}; tolerance {report['tolerance']:g}){notes}"


def _dims_text(dims: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in dims.items()) + ": " if dims else ""


@contextlib.contextmanager
def progress_bar(time_limit: float, fmt: Callable[[float, str], str], disable: bool = False,
                 phases: dict[str, str] | None = None):
    """One live view for every command: a rich progress bar over ``time_limit`` seconds showing the
    phase, the incumbent, the proven bound and the gap of each :class:`onnxpart.board.Progress` record
    sent to the callback it yields. ``fmt(value, phase)`` renders a value in the phase's unit."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=disable) as bar:
        task = bar.add_task("starting", total=time_limit)

        def update(record) -> None:
            phase = (phases or {}).get(record.phase, record.phase)
            bar.update(task, completed=min(record.seconds, time_limit),
                       description=f"{phase:<12} best {fmt(record.upper, record.phase)}  proven ≥ "
                                   f"{fmt(record.lower, record.phase)}  gap {record.gap:.1%}")

        yield update
