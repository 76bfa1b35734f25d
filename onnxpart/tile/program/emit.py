"""A matrix program's results as files: ``plan.json`` (schema ``onnxpart.tile-plan/1``: the program, its
sha256, the method, every matrix's tiling, every expression's algorithm and labeling, the cost and its
unit) and the shared certificate (problem ``tile``; objective: the CHLP retiling cost)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxpart.certificate import Certificate
from onnxpart import tile
from onnxpart.tile.program.model import Instance

if TYPE_CHECKING:  # the package's __init__, named for the annotations only: no module imports its own package
    from onnxpart.tile.program import ProgramSolution

SCHEMA = "onnxpart.tile-plan/1"
OBJECTIVE = "CHLP retiling cost (Section 4–5: Σ_e w(e)·min_l d(X, l), {unit})"


def instance_digest(instance: Instance) -> list:
    """What the certificate's instance hash covers: matrices, weights, domains and expressions."""
    return [list(instance.vertices), list(instance.vertex_weight), [list(d) for d in instance.domains],
            [(e.name, list(e.vertices), [list(t) for t in e.tuples], e.weight, e.base) for e in instance.edges]]


def plan_payload(solution: ProgramSolution, program: str, sha: str | None) -> dict[str, Any]:
    """plan.json (module docstring)."""
    return {"schema": SCHEMA, "program": program, "program_sha256": sha, "method": solution.method,
            "labels": solution.labels, "choices": solution.choices, "cost": solution.cost,
            "unit": solution.instance.unit}


def certificate(solution: ProgramSolution, sha: str | None, options: dict[str, Any]) -> Certificate:
    inst = solution.instance
    return tile.certificate(solution, sha, instance_digest(inst), OBJECTIVE.format(unit=inst.unit), options)
