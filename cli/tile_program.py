"""`onnxpart tile program.json`: the paper's matrix programs (onnxpart.tile.program) run for the `tile`
command — parse → CHLP instance → solve → certificate → plan.json, certificate.json — and its lines of the
terminal report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

from onnxpart.cli.common import check_folder, choose, progress_bar, run_clock, write_outputs
from onnxpart.errors import UserError


def run(path: Path, output: Optional[Path], check_certificate: Optional[Path], method: Optional[str],
        time_limit: float, seed: int, workers: int, force: bool, clean: bool, as_json: bool, *,
        labels: Optional[str], verify: bool) -> Optional[dict]:
    """Tile the program in ``path`` into ``output`` (never over ``path``: :class:`onnxpart.files.OutputDir`),
    or check an earlier folder; -> the JSON result (None after a check)."""
    from onnxpart.files import read_text
    from onnxpart.onnx_io import file_sha256
    from onnxpart.tile.program.model import build_instance, restrict_labels
    from onnxpart.tile.program.program import load_program

    if verify:
        raise UserError("--verify runs an ONNX model's plan; a matrix program has no model to run")
    instance = build_instance(load_program(read_text(path, "matrix program"), path.stem, str(path)))
    if labels is not None:
        instance = restrict_labels(instance, choose(labels, "--labels", instance.labels, "tiling"))
    sha = file_sha256(path)
    if check_certificate is not None:
        _check(instance, check_certificate, sha, as_json)
        return None
    return _solve_and_write(instance, path, sha, output, (method, labels, time_limit, seed, workers), force, clean,
                            as_json)


def _solve_and_write(instance, path: Path, sha: str, output: Path, solving: tuple, force: bool, clean: bool,
                     as_json: bool) -> dict:
    """Solve (``solving``: --method, --labels, --time-limit, --seed, --workers) in what the time limit leaves
    after parsing, then write plan.json and certificate.json into ``output`` (:func:`write_outputs`)."""
    from onnxpart import tile
    from onnxpart.board import Board
    from onnxpart.files import OutputDir
    from onnxpart.tile.program import REGISTRY, ProgramOptions, emit

    method, labels, time_limit, seed, workers = solving
    methods = REGISTRY.parse(method) if method else ProgramOptions.methods
    out = OutputDir(output, force=force, clean=clean, reads=[path])
    options = ProgramOptions(methods=methods, time_limit=time_limit, workers=workers, seed=seed)
    with progress_bar(time_limit, lambda value, _: f"{value:g}", disable=as_json) as on_progress:
        solution = tile.solve(instance, options, Board(on_progress), run_clock.solve_seconds(time_limit))
    recorded = {"methods": list(methods), "labels": labels, "time_limit": time_limit, "seed": seed}
    cert = emit.certificate(solution, sha, recorded)
    return write_outputs(out, "plan.json", lambda _: emit.plan_payload(solution, str(path), sha), cert,
                         method=solution.method, cost=solution.cost, results=cert.details["results"])


def _check(instance, folder: Path, sha, as_json: bool) -> None:
    from onnxpart.tile.program.check import check_plan

    def check(plan, cert):
        value, problems = check_plan(instance, plan, cert, sha)
        return problems, {"cost": value}

    check_folder(folder, "plan.json", check, lambda facts: f"certificate ok: cost {facts['cost']:g} recomputed from "
                 "plan.json", as_json)


def report(summary: dict, explain: bool) -> tuple[Callable[[float], str], list[str], list[str]]:
    """The terminal report of a result: (how a cost is written, the line before the objective line — every
    matrix's tiling —, none after it)."""
    tilings = ", ".join(f"{m}={lab}" for m, lab in summary["manifest"]["labels"].items())
    return (lambda value: f"{value:g}"), [tilings], []
