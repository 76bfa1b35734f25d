"""``onnxpart tile program.json --check-certificate``: a matrix program's plan.json read back and its cost
recomputed from the tilings it lists, by :meth:`~onnxpart.tile.program.model.Instance.cost` on the program
given (never trusting the solver): the certificate must be for this program (instance hash), plan.json must
tile every matrix with one of its labels, and the certificate's upper bound (:meth:`~onnxpart.certificate.
Certificate.check`) and plan.json's cost must be the recomputed cost, with no lower bound above it (the one tolerance rule of :mod:`onnxpart.certificate`)."""

from __future__ import annotations

from onnxpart.certificate import Certificate, above, instance_hash, same_value
from onnxpart.tile.program.emit import instance_digest
from onnxpart.tile.program.model import Instance


def check_plan(instance: Instance, payload: dict, cert: Certificate, sha: str | None) -> tuple[float | None, list[str]]:
    """-> (the cost recomputed from plan.json's tilings, or None when it does not tile this program; problems)."""
    problems = []
    if cert.instance_sha256 != instance_hash(sha, instance_digest(instance)):
        problems.append("the certificate is for another program or option set (instance hash differs)")
    try:
        labels = [instance.labels.index(payload["labels"][v]) for v in instance.vertices]
        value = float(instance.cost(labels))
    except (KeyError, ValueError, TypeError) as exc:
        return None, problems + [f"plan.json does not label this program: {exc}"]
    problems += cert.check(value, {})
    claimed = payload.get("cost")
    if not _number(claimed) or not same_value(value, float(claimed)):
        problems.append(f"plan.json cost {claimed} differs from the recomputed cost {value:g}")
    lb = cert.best_lower_bound
    if lb is not None and above(lb, value):
        problems.append(f"the lower bound {lb} exceeds the recomputed cost {value:g}")
    return value, problems


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
