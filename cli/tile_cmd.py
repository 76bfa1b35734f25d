"""`onnxpart tile`: sharding layouts for an ONNX model on a device mesh (a ring of D devices or an n-D mesh
such as 2x4), or tilings of a matrix program, with a certified lower bound. One command for the two problems
of onnxpart.tile: the input says which (:func:`_is_program`), its runner (cli/tile_onnx.py, cli/tile_program.py)
does load → solve → certificate → emit, and this module parses the options and prints the result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from onnxpart.cli import tile_onnx, tile_program
from onnxpart.cli.common import (CheckCertificateOpt, ExternalDataOpt, OutputOpt, Quantity, TimeLimitOpt, VerifyTolOpt,
                                 console, enforce_gap, gap_limit, handle_errors, print_json)
from onnxpart.cli.option_groups import ModelSource, OutputMode, Search, takes_option_groups
from onnxpart.cli.weights import WeightsOpt
from onnxpart.errors import UserError
from onnxpart.tile.onnx import REGISTRY as LAYOUT_REGISTRY
from onnxpart.tile.program import REGISTRY as PROGRAM_REGISTRY
from onnxpart.units import DEVICES, parse_bandwidth, parse_bytes, parse_seconds

ModelArg = Annotated[Path, typer.Argument(help="ONNX model (or a costs/graph JSON), or a matrix program JSON.")]
DevicesOpt = Annotated[Optional[int], typer.Option("--devices", "-d", help="Devices D of a 1-D mesh (ONNX input; 1 to "
                                                   "4096); the same as --mesh D."), DEVICES]
MeshOpt = Annotated[Optional[str], typer.Option("--mesh", help="Mesh shape, devices per axis: 8, or 2x4 for a 2-D "
                                                "mesh (ONNX input).")]
MeshAxesOpt = Annotated[Optional[str], typer.Option("--mesh-axes", help="Mesh axis names, comma-separated (default "
                                                    "x,y,...), e.g. dp,tp.")]
METHOD_HELP = (LAYOUT_REGISTRY.help("Methods, comma-separated, run in the order given. ONNX models (default all):")
               + " " + PROGRAM_REGISTRY.help("Matrix programs (default local, greedy, exact; tree too where it "
                                             "applies):"))
MethodOpt = Annotated[Optional[str], typer.Option("--method", help=METHOD_HELP)]
PinOpt = Annotated[Optional[list[str]], typer.Option("--pin", help="Fix a tensor's layout: TENSOR=LAYOUT with LAYOUT "
                                                     "R, P or S(d) per mesh axis: S(0) on a 1-D mesh, S(0)R on a 2-D "
                                                     "one (repeatable).")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Print every resharding and the two ops' preferences that "
                                          "forced it.")]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Print one table of every method's result.")]
MeshBandwidthOpt = Annotated[Optional[str], typer.Option(
    "--mesh-bandwidth", help="Link bandwidth of each mesh axis's ring: one value or one per axis (e.g. "
    "300GB/s,25GB/s); default: the device spec's interconnect."),
    Quantity(lambda text, what: tile_onnx.per_axis(text, what, parse_bandwidth))]
MeshLatencyOpt = Annotated[str, typer.Option("--mesh-latency", help="Seconds per ring step: one value or one per mesh "
                                             "axis (e.g. 2e-6,10us)."),
                           Quantity(lambda text, what: tile_onnx.per_axis(text, what, parse_seconds))]
DeviceMemoryOpt = Annotated[Optional[str], typer.Option("--device-memory", help="Bound on weights + activations per "
                                                        "device (e.g. 40GiB); exit 4 when no layout fits."),
                            Quantity(parse_bytes)]
ShardedOutputsOpt = Annotated[bool, typer.Option("--sharded-outputs", help="Leave the graph outputs in their layouts "
                                                 "(the next program reads them sharded); default: each is gathered "
                                                 "whole onto every device at the end of the step, and priced.")]
LabelsOpt = Annotated[Optional[str], typer.Option("--labels", help="Matrix programs: the tilings allowed, "
                                                  "comma-separated subset of row,col,block.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Run the plan on D virtual devices (shards in onnxruntime, "
                                         "collectives in numpy) against the original on seeded inputs; a differing "
                                         "tensor exits 1 and writes nothing.")]


@handle_errors
@takes_option_groups
def tile(
    model: ModelArg,
    devices: DevicesOpt = None,
    mesh: MeshOpt = None,
    mesh_axes: MeshAxesOpt = None,
    output: OutputOpt = None,
    method: MethodOpt = None,
    pin: PinOpt = None,
    explain: ExplainOpt = False,
    compare: CompareOpt = False,
    mesh_bandwidth: MeshBandwidthOpt = None,
    mesh_latency: MeshLatencyOpt = "5e-6",
    device_memory: DeviceMemoryOpt = None,
    sharded_outputs: ShardedOutputsOpt = False,
    labels: LabelsOpt = None,
    time_limit: TimeLimitOpt = 30.0,
    search: Search = Search(),
    check_certificate: CheckCertificateOpt = None,
    source: ModelSource = ModelSource(),
    external_data_threshold: ExternalDataOpt = None,
    weights: WeightsOpt = "copy",
    verify: VerifyOpt = False,
    verify_tol: VerifyTolOpt = 1e-4,
    mode: OutputMode = OutputMode(),
) -> None:
    """Choose a sharding layout per tensor and an algorithm per op on a device mesh, minimizing the step time
    (sharded compute + resharding collectives), with a proven lower bound (matrix tiling as CHLP)."""
    limit = gap_limit(search.max_gap)
    if output is None and check_certificate is None:
        raise UserError("pass --output/-o DIR (or --check-certificate DIR)")
    common = (model, output, check_certificate, method, time_limit, search.seed, search.workers, mode.force, mode.clean, mode.as_json)
    if _is_program(model):
        runner, summary = tile_program, tile_program.run(*common, labels=labels, verify=verify)
    else:
        layout = tile_onnx.MeshOptions(devices, mesh, mesh_axes, mesh_bandwidth, mesh_latency, device_memory, pin,
                                       sharded_outputs)
        runner, summary = tile_onnx, tile_onnx.run(*common, labels=labels, verify=verify, verify_tol=verify_tol,
                                                   mesh=layout, source=source,
                                                   weights=(external_data_threshold, weights))
    if summary is None:
        return
    if mode.as_json:
        print_json(summary)
    else:
        _print(summary, *runner.report(summary, explain), compare)
    enforce_gap(summary["certificate"], limit, output)


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


def _print(summary: dict, fmt: Callable[[float], str], before: list[str], after: list[str], compare: bool) -> None:
    """The terminal report: with ``compare`` one table of every method's result, then the problem's lines
    around the objective line (its value, the method, the proven bound); ``fmt`` writes the objective."""
    plan, cert = summary["manifest"], summary["certificate"]
    if compare:
        table = Table(title="methods", title_justify="left")
        for column in ("method", "objective", "status", "seconds"):
            table.add_column(column, justify="left" if column in ("method", "status") else "right")
        for r in cert["details"]["results"]:
            table.add_row(r["method"], "-" if r["cost"] is None else fmt(r["cost"]), r["status"], f"{r['seconds']:.2f}")
        console.print(table)
    lb = cert["best_lower_bound"]
    bound = "no lower bound proven" if lb is None else f"proven ≥ {fmt(lb)} (gap {cert['gap']:.1%})"
    objective = f"{cert['objective'].split(' (')[0]}: {fmt(cert['upper_bound'])} ({plan['method']}), {bound}"
    for line in before + [objective] + after + [f"wrote {summary['output']}"]:
        console.print(line, highlight=False, soft_wrap=True)
