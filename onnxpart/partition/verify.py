"""Checking a partition without trusting the code that made it.

* :func:`check_certificate` re-derives the upper bound from ``manifest.json`` and the instance's costs
  (Eq. 3 from scratch, not the segment structure), checks the partition is valid (every op once, no edge
  to an earlier stage), re-computes Lemma 3.3's simple bound and the single-block min-cut bound, and
  checks the instance hash and that no lower bound exceeds the upper bound: the ``--check-certificate``
  option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxpart.certificate import Certificate, above, instance_hash, same_value
from onnxpart.partition.cuts import single_block_bound
from onnxpart.partition.model import Instance, block_costs, check_assignment, simple_lower_bound


@dataclass
class CertificateCheck:
    upper_bound: float
    simple_bound: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_certificate(inst: Instance, manifest: dict[str, Any], cert: Certificate,
                      model_sha256: str | None) -> CertificateCheck:
    """Recompute the upper bound from the manifest's stage op lists and re-check the simple bound."""
    k = int(manifest["k"])
    where = {name: i for i, name in enumerate(inst.op_names)}
    assignment = np.full(inst.n, -1, dtype=np.int64)
    problems: list[str] = []
    for stage in manifest["stages"]:
        for name in stage["ops"]:
            if name not in where:
                problems.append(f"stage {stage['index']} lists op {name!r}, which the model does not have")
            elif assignment[where[name]] >= 0:
                problems.append(f"op {name!r} is in two stages")
            else:
                assignment[where[name]] = int(stage["index"])
    unplaced = [inst.op_names[i] for i in np.flatnonzero(assignment < 0)]
    if unplaced:
        problems.append(f"{len(unplaced)} ops are in no stage (first: {unplaced[0]!r})")
        return CertificateCheck(float("nan"), float("nan"), problems)
    try:
        check_assignment(inst, assignment, k)
    except ValueError as exc:
        problems.append(f"invalid partition: {exc}")
    costs = block_costs(inst, assignment, k)
    upper = max((c.cost for c in costs), default=0.0)
    for stage, cost in zip(manifest["stages"], costs):
        if not same_value(stage["cost"], cost.cost):
            problems.append(f"stage {stage['index']}: manifest says cost {stage['cost']}, recomputed {cost.cost}")
    if not same_value(upper, cert.upper_bound):
        problems.append(f"certificate upper bound {cert.upper_bound} != recomputed bottleneck {upper}")
    simple = simple_lower_bound(inst, k)
    for bound in cert.lower_bounds:
        if bound.method == "simple" and not same_value(bound.value, simple):
            problems.append(f"simple bound {bound.value} != recomputed {simple}")
        if bound.method == "single-block" and not same_value(bound.value, single_block_bound(inst).value):
            problems.append(f"single-block bound {bound.value} != recomputed {single_block_bound(inst).value}")
        if bound.value is not None and above(bound.value, upper):
            problems.append(f"lower bound {bound.method} = {bound.value} exceeds the upper bound {upper}")
    expected = instance_hash(model_sha256, inst.digest(), k)
    if cert.instance_sha256 != expected:
        problems.append("instance sha256 differs: the certificate was made for another model, costs, options or k")
    return CertificateCheck(upper, simple, problems)
