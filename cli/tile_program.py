"""`onnxpart tile program.json`: the paper's matrix programs through the existing CHLP solvers
(onnxpart.tile.solve); files through onnxpart.tile.emit."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from onnxpart.cli.common import check_folder, choose, err_console, result


def run(path: Path, output, method: Optional[str], labels: Optional[str], time_limit: float, seed: int,
        workers: int, force: bool, clean: bool, check_certificate: Optional[Path], as_json: bool) -> Optional[dict]:
    """Tile the program in ``path`` into ``output`` (never over ``path``: :class:`onnxpart.files.OutputDir`),
    or check an earlier folder; -> the JSON result (None after a check)."""
    from onnxpart.files import read_text
    from onnxpart.onnx_io import file_sha256
    from onnxpart.tile import METHODS, TileOptions, emit, solve
    from onnxpart.tile.model import build_instance
    from onnxpart.tile.program import load_program

    instance = build_instance(load_program(read_text(path, "matrix program"), path.stem, str(path)))
    if labels is not None:
        instance = emit.restrict_labels(instance, list(choose(labels, "--labels", instance.labels, "tiling")))
    sha = file_sha256(path)
    if check_certificate is not None:
        _check(instance, check_certificate, sha, as_json)
        return None
    from onnxpart.cli.tile_cmd import _methods
    from onnxpart.files import OutputDir, write_json

    methods = _methods(method, METHODS) if method else ("local", "greedy", "exact")
    out = OutputDir(output, force=force, clean=clean, reads=[path])
    options = TileOptions(methods=methods, time_limit=time_limit, workers=workers, seed=seed)
    with err_console.status(f"tiling {path.name}…"):
        solution = solve(instance, options)
    plan = emit.program_plan(solution, str(path), sha)
    recorded = {"methods": list(methods), "labels": labels, "time_limit": time_limit, "seed": seed}
    cert = emit.program_certificate(solution, sha, recorded).to_dict()
    with out:
        write_json(out.path("plan.json"), plan)
        write_json(out.path("certificate.json"), cert)
    return result(out.target, plan, cert, None, method=solution.method, cost=solution.cost,
                  results=cert["details"]["results"])


def _check(instance, folder: Path, sha, as_json: bool) -> None:
    from onnxpart.tile import emit

    def check(plan, cert):
        value, problems = emit.check_program_plan(instance, plan, cert, sha)
        return problems, {"cost": value}

    check_folder(folder, "plan.json", check, lambda facts: f"certificate ok: cost {facts['cost']:g} recomputed from plan.json",
                 as_json)


