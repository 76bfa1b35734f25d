"""Re-checking a result folder (``--check-certificate``): what every strategy shares.

* :func:`read_certificate` reads ``certificate.json`` through its pydantic schema (:class:`CertificateSchema`:
  finite numbers, every bound ≥ 0, a sha256), so a malformed file is one line naming the field.
* :func:`consistency_problems` checks what a certificate claims about itself: no lower bound above the
  upper bound, and the best lower bound, the gap and ``proven_optimal`` as the formulas of
  :class:`~onnxpart.certificate.Certificate` give them.
* :func:`hash_problems` checks the folder was made for the model and instance given.
* :func:`differences` compares a manifest read back with the one a strategy recomputes from the model
  alone and names every entry that differs — the way each strategy re-checks *every* field it can;
  :meth:`Certificate.check <onnxpart.certificate.Certificate.check>` does the same for the certificate's
  upper bound and its closed-form bounds.

Numbers compare by the one tolerance rule of :mod:`onnxpart.certificate`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from onnxpart.certificate import SCHEMA, Certificate, LowerBound, above, mismatch, same_value
from onnxpart.validate import NonNegative, ReadBackSchema, validate


class LowerBoundSchema(ReadBackSchema):
    method: str
    value: NonNegative | None
    status: str
    solver: str
    seconds: NonNegative
    note: str = ""


class CertificateSchema(ReadBackSchema):
    """``certificate.json`` as :meth:`Certificate.to_dict` writes it."""

    schema_: Literal[SCHEMA] = Field(alias="schema")
    problem: str
    instance_sha256: Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
    objective: str
    upper_bound: NonNegative
    best_lower_bound: NonNegative | None
    gap: Annotated[float, Field(ge=0, le=1)] | None
    proven_optimal: bool
    lower_bounds: list[LowerBoundSchema]
    details: dict[str, Any]


class ModelRef(ReadBackSchema):
    """A manifest's ``model``: the file it was made from and its sha256 (None for a graph file without one)."""

    path: str | None
    sha256: str | None


def read_certificate(path: Path) -> tuple[Certificate, CertificateSchema]:
    """``certificate.json`` validated -> (the certificate, the fields as stored, derived ones included)."""
    from onnxpart.files import read_json

    stored = validate(CertificateSchema, read_json(path, "certificate"), str(path))
    bounds = [LowerBound(b.method, b.value, b.status, b.solver, b.seconds, b.note) for b in stored.lower_bounds]
    return Certificate(stored.problem, stored.instance_sha256, stored.objective, stored.upper_bound, bounds,
                       stored.details), stored


def consistency_problems(cert: Certificate, stored: CertificateSchema) -> list[str]:
    """What a certificate gets wrong about itself: a lower bound above its upper bound, or a best lower
    bound, gap or ``proven_optimal`` other than the formulas give (:attr:`Certificate.gap`)."""
    problems = [f"lower bound {b.method} = {b.value} exceeds the upper bound {cert.upper_bound}"
                for b in cert.lower_bounds if b.value is not None and above(b.value, cert.upper_bound)]
    for name, claimed, value in (("best_lower_bound", stored.best_lower_bound, cert.best_lower_bound),
                                 ("gap", stored.gap, cert.gap)):
        if (claimed is None) != (value is None) or (value is not None and not same_value(claimed, value)):
            problems.append(f"certificate {name} {claimed} != recomputed {value}")
    if stored.proven_optimal != cert.proven_optimal:
        problems.append(f"certificate proven_optimal {stored.proven_optimal} != recomputed {cert.proven_optimal}")
    return problems


def hash_problems(cert: Certificate, expected: str, model: ModelRef, model_sha256: str | None,
                  instance: str) -> list[str]:
    """The folder was made for another model or instance: the manifest's ``model.sha256`` is not the
    model given, or the certificate's instance hash is not ``expected`` (``instance`` names what the
    hash covers besides the model, for the message)."""
    problems = []
    if model.sha256 != model_sha256:
        problems.append(f"the manifest was made from another model (sha256 {model.sha256}, the model given has "
                        f"{model_sha256})")
    if cert.instance_sha256 != expected:
        problems.append(f"instance sha256 differs: the certificate was made for another model, {instance}")
    return problems


#: an entity list's label for one entry, e.g. ``lambda op: f"ops[{op['name']!r}]"``
Label = Callable[[dict], str]


def differences(listed: Any, expected: Any, entities: dict[str, Label] | None = None, path: str = "") -> list[str]:
    """Every field of ``expected`` (a manifest recomputed from the model) that ``listed`` (the one read
    back) does not hold, named by its path (``stages[1].io_in``). A list at a path of ``entities`` is a
    set of entries told apart by their label: an entry listed twice, one that is not in ``expected``,
    one missing, each entry's fields, then their order. Other lists compare position by position, then
    by length. Keys ``listed`` has beyond ``expected`` are not compared."""
    entities = entities or {}
    if isinstance(expected, dict):
        if not isinstance(listed, dict):
            return [f"{path} is not an object"]
        problems = []
        for key, want in expected.items():
            sub = f"{path}.{key}" if path else key
            if key not in listed:
                problems.append(f"{sub} is missing")
            elif sub in entities and isinstance(want, list) and isinstance(listed[key], list):
                problems += _entity_differences(listed[key], want, entities[sub], sub)
            else:
                problems += differences(listed[key], want, entities, sub)
        return problems
    if isinstance(expected, list):
        if not isinstance(listed, list):
            return [f"{path} is not an array"]
        problems = [p for i, (a, b) in enumerate(zip(listed, expected)) for p in differences(a, b, entities, f"{path}[{i}]")]
        return problems + ([] if len(listed) == len(expected) else
                           [f"{path} has {len(listed)} entries, recomputed {len(expected)}"])
    return mismatch(path, listed, expected)


def _entity_differences(listed: list, expected: list, label: Label, path: str) -> list[str]:
    want = {label(entry): entry for entry in expected}
    problems: list[str] = []
    seen: list[str] = []
    known: set[str] = set()  # seen, as a set: a list's `in` made the check O(n²) on 20,000 ops
    for entry in listed:
        name = label(entry) if isinstance(entry, dict) else f"{path}[{len(seen)}]"
        if name in known:
            problems.append(f"{name} is listed twice")
        elif name not in want:
            problems.append(f"{name} is not in the recomputed result")
        else:
            problems += differences(entry, want[name], None, name)
        seen.append(name)
        known.add(name)
    problems += [f"{name} is missing" for name in want if name not in known]
    if not problems and seen != list(want):
        problems.append(f"{path} are not in the recomputed order")
    return problems
