"""Checking a partition without trusting the code that made it (``--check-certificate``).

:func:`check_certificate` reads ``manifest.json`` through its schema (:class:`ManifestSchema`), checks
it was made from the model and instance given, rebuilds the op → stage assignment from the stages' op
lists (every op exactly once, no edge to an earlier stage), recomputes Eq. 3 from scratch
(:func:`onnxpart.partition.model.block_costs`, not the segment structure) and from it every field of
the manifest — per stage its ops' ONNX nodes, tensors in and out, work, io, overflow, parameters and
cost, the bottleneck and its stage — naming the first that differs; the certificate's upper bound must
be the bottleneck, and Lemma 3.3's simple bound and the single-block min-cut bound (over the ops its
``details.search.single_block_ops`` names, when the time limit stopped it early) must re-derive.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.certificate_check import ModelRef, differences, hash_problems
from onnxpart.partition.cuts import single_block_bound
from onnxpart.partition.model import Instance, check_assignment, simple_lower_bound
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate


class StageSchema(ReadBackSchema):
    index: Count
    file: str | None
    ops: list[str]
    onnx_nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    work: NonNegative
    io_in: NonNegative
    io_out: NonNegative
    overflow: NonNegative
    param_bytes: NonNegative
    cost: NonNegative


class ManifestSchema(ReadBackSchema):
    """``manifest.json`` (``onnxpart.partition-manifest/1``) as :func:`onnxpart.partition.emit.manifest` writes it."""

    model: ModelRef
    graph: str
    k: Annotated[int, Field(ge=1)]
    bandwidth: NonNegative | None
    stage_memory: NonNegative | None
    objective: str
    method: str
    bottleneck: NonNegative
    bottleneck_stage: Count
    stages: list[StageSchema]


def check_certificate(inst: Instance, graph, manifest: Any, cert: Certificate, model_sha256: str | None,
                      where: str, onnx_input: bool) -> tuple[list[str], dict[str, float]]:
    """Re-check ``manifest`` (read from ``where``) and ``cert`` against ``inst`` (module docstring);
    ``graph`` is the OpGraph ``inst`` was built from, ``onnx_input`` whether stage files were written.
    -> (the problems found, none when the certificate holds; the recomputed bottleneck and simple bound)."""
    from onnxpart.partition import Solution
    from onnxpart.partition import emit

    checked = validate(ManifestSchema, manifest, where)
    k = checked.k
    problems = hash_problems(cert, instance_hash(model_sha256, inst.digest(), k), checked.model, model_sha256,
                             "costs, bandwidth, stage memory or k")
    assignment = _assignment(inst, checked, problems)
    if assignment is None:
        return problems, {"upper_bound": float("nan"), "simple_bound": float("nan")}
    solution = Solution(inst, k, assignment, checked.method, [])
    files = {b: emit.stage_file(b) for b in np.unique(assignment).tolist()} if onnx_input else {}
    expected = emit.manifest(solution, graph, checked.model.path, model_sha256, files)
    problems += differences(manifest, expected)
    simple = simple_lower_bound(inst, k)
    cut_ops = (cert.details.get("search") or {}).get("single_block_ops")  # None: every op
    cut = single_block_bound(inst, simple, max_ops=cut_ops if isinstance(cut_ops, int) else None)
    problems += cert.check(solution.value, {"simple": simple, "single-block": cut.value})
    return problems, {"upper_bound": solution.value, "simple_bound": simple}


def _assignment(inst: Instance, manifest: ManifestSchema, problems: list[str]) -> np.ndarray | None:
    """op -> stage from the stages' op lists (None, with ``problems``, unless they form a partition into
    stages 0..k-1 with no edge to an earlier stage)."""
    where = {name: i for i, name in enumerate(inst.op_names)}
    assignment = np.full(inst.n, -1, dtype=np.int64)
    found = []
    if [stage.index for stage in manifest.stages] != list(range(manifest.k)):
        found.append(f"the stages are not numbered 0..{manifest.k - 1} in order")
    for stage in manifest.stages:
        for name in stage.ops:
            if name not in where:
                found.append(f"stage {stage.index} lists op {name!r}, which the model does not have")
            elif assignment[where[name]] >= 0:
                found.append(f"op {name!r} is in two stages")
            else:
                assignment[where[name]] = stage.index
    unplaced = [inst.op_names[i] for i in np.flatnonzero(assignment < 0)]
    if unplaced:
        found.append(f"{len(unplaced)} ops are in no stage (first: {unplaced[0]!r})")
    if not found:
        try:
            check_assignment(inst, assignment, manifest.k)
        except ValueError as exc:
            found.append(f"invalid partition: {exc}")
    problems += found
    return None if found else assignment
