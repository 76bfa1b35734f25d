"""``onnxpart plan --check-certificate``: a manifest.json read back and every number recomputed from what it says.

The file is validated first (pydantic models of ``onnxpart.plan-manifest/1``: the fields the check reads, with
their types; a wrong type or a missing field is one problem naming it). Then, for the model and the cluster
given on the command line (the :class:`~onnxpart.plan.model.Problem` they make):

* the certificate's instance hash must be this problem's, and the manifest's cluster, objective, batch and
  family (units, sub-meshes) this problem's;
* the stages must hold every op of the model once, each on a sub-mesh of the family, with a replica count
  and micro-batches the family allows;
* each stage is rebuilt from its recorded layouts (:func:`onnxpart.plan.evaluate.build_stage`; each layout one
  of its tensor's candidates there) and the plan repriced (:func:`onnxpart.plan.evaluate.price`): every stage's
  compute, period, devices and memory per device, every transfer (tensors, bytes, seconds), the totals
  (latency, slowest period, objective) and the certificate's upper bound must be what those layouts cost, and
  every device's memory within its capacity; no lower bound may exceed the recomputed value.

Numbers compare by the one tolerance rule of :mod:`onnxpart.certificate` (:func:`~onnxpart.certificate.mismatch`).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from onnxpart.certificate import Certificate, above, mismatch
from onnxpart.errors import UserError
from onnxpart.plan.emit import SCHEMA, family, instance_sha, totals
from onnxpart.plan.model import Priced, Problem, Shape
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate


class MeshEntry(ReadBackSchema):
    nodes: Count
    devices: Count


class StageEntry(ReadBackSchema):
    index: Count
    ops: list[str]
    units: Optional[list[Count]]
    mesh: MeshEntry
    devices: list[list[Count]]
    compute_s: NonNegative
    period_s: NonNegative
    memory: dict[str, NonNegative]
    layouts: dict[str, str]


class TransferEntry(ReadBackSchema):
    source: Count
    target: Count
    tensors: list[str]
    bytes: NonNegative
    seconds: NonNegative


class TotalsEntry(ReadBackSchema):
    latency_s: NonNegative
    max_period_s: NonNegative
    value_s: NonNegative


class PlanManifest(ReadBackSchema):
    schema_: Literal[SCHEMA] = Field(alias="schema")
    cluster: dict
    objective: str
    batch: Count
    replicas: Count
    micro_batches: Count
    family: dict
    stages: list[StageEntry] = Field(min_length=1)
    transfers: list[TransferEntry]
    totals: TotalsEntry


def parse_manifest(payload) -> PlanManifest:
    """manifest.json -> :class:`PlanManifest`; UserError naming the first fields that are missing or wrong."""
    return validate(PlanManifest, payload, f"manifest.json (an {SCHEMA} manifest)")


def check_plan(problem: Problem, payload, cert: Certificate, model_sha: str | None) -> tuple[float | None, list[str]]:
    """Recompute the plan from manifest.json (module docstring) and hold the certificate to it; -> (the
    recomputed objective, or None when the file does not describe a plan of this problem; problems)."""
    problems = []
    if cert.instance_sha256 != instance_sha(problem, model_sha):
        problems.append("the certificate is for another model, cluster or option set (instance hash differs)")
    try:
        read = parse_manifest(payload)
        problems += _same_problem(problem, read)
        shape = _shape(problem, read)
        priced = _reprice(problem, shape, read)
    except UserError as exc:
        return None, problems + [str(exc)]
    problems += _stages(priced, read) + _transfers(priced, read)
    recomputed = totals(problem, priced)
    for name in ("latency_s", "max_period_s", "value_s"):
        problems += mismatch(f"totals.{name}", getattr(read.totals, name), recomputed[name])
    problems += cert.check(priced.value, {})
    if not priced.fits:
        problems.append(f"a device holds {priced.missing:.6g} bytes more than its memory")
    lower = cert.best_lower_bound
    if lower is not None and above(lower, priced.value):
        problems.append(f"the lower bound {lower} exceeds the recomputed objective {priced.value}")
    return priced.value, problems


def _same_problem(problem: Problem, read: PlanManifest) -> list[str]:
    """The manifest's cluster, objective, batch and family against this run's."""
    return (mismatch("manifest cluster", read.cluster, problem.cluster.describe())
            + mismatch("manifest objective", read.objective, problem.objective)
            + mismatch("manifest batch", read.batch, problem.batch)
            + mismatch("manifest family", read.family, family(problem)))


def _shape(problem: Problem, read: PlanManifest) -> Shape:
    """The plan's shape from the manifest: every op once, meshes and replicas of the family (else UserError)."""
    index = {op.name: i for i, op in enumerate(problem.graph.ops)}
    meshes = {(m.nodes, m.devices): m for m in problem.meshes}
    stages, seen = [], []
    for entry in read.stages:
        unknown = [name for name in entry.ops if name not in index]
        if unknown:
            raise UserError(f"stage {entry.index}: ops {unknown[:3]} are not the model's")
        mesh = meshes.get((entry.mesh.nodes, entry.mesh.devices))
        if mesh is None:
            raise UserError(f"stage {entry.index}: mesh {entry.mesh.nodes}x{entry.mesh.devices} is not a sub-mesh "
                            f"of the family ({', '.join(map(str, problem.meshes))})")
        ops = tuple(index[name] for name in entry.ops)
        seen += ops
        stages.append((ops, mesh))
    if sorted(seen) != list(range(len(problem.graph.ops))):
        raise UserError("the stages do not hold every op of the model exactly once")
    if (read.replicas, read.micro_batches) not in problem.replica_options():
        raise UserError(f"{read.replicas} replicas of {read.micro_batches} micro-batches: not a choice the family "
                        f"allows for {problem.objective} with batch {problem.batch}")
    units = [entry.units for entry in read.stages]
    return Shape(tuple(stages), read.replicas, read.micro_batches,
                 None if any(u is None for u in units) else tuple(tuple(u) for u in units))


def _reprice(problem: Problem, shape: Shape, read: PlanManifest) -> Priced:
    """Each stage rebuilt from its recorded layouts, and the plan priced (UserError naming a layout that is not
    of its tensor's candidates, or a stage's tensors that are not those its ops touch)."""
    from onnxpart.plan.evaluate import build_stage, price, stage_io
    from onnxpart.tile.onnx.build import parse_layout

    stage_of, received = stage_io(problem, shape)
    stages = []
    for s, ((ops, mesh), entry) in enumerate(zip(shape.stages, read.stages)):
        whole = problem.instance(mesh)
        touched = {t for i in ops for t in whole.ops[i].inputs + whole.ops[i].outputs}
        if set(entry.layouts) != touched:
            raise UserError(f"stage {s}: its layouts name {sorted(set(entry.layouts) - touched)[:3]} not of its "
                            f"ops, and miss {sorted(touched - set(entry.layouts))[:3]}")
        layouts = {}
        for name, text in entry.layouts.items():
            layout = parse_layout(text, len(mesh.shape))
            if layout not in whole.tensor(name).domain:
                raise UserError(f"stage {s}: tensor {name}: layout {text} is not among its candidates on "
                                f"{mesh} ({', '.join(map(str, whole.tensor(name).domain))})")
            layouts[name] = layout
        names = [t for src in sorted(received[s]) for t in received[s][src]]
        stage = build_stage(problem, shape, s, stage_of, names, layouts=layouts)
        try:
            stage.instance.check(layouts)
        except ValueError as exc:
            raise UserError(f"stage {s}: {exc} (a tensor crossing stages holds no partial sums)") from None
        stages.append(stage)
    return price(problem, shape, stages)


def _stages(priced: Priced, read: PlanManifest) -> list[str]:
    problems = []
    for s, entry in enumerate(read.stages):
        where = f"stage {s}"
        problems += mismatch(f"{where} compute_s", entry.compute_s, priced.stages[s].compute)
        problems += mismatch(f"{where} period_s", entry.period_s, priced.periods[s])
        problems += mismatch(f"{where} devices", entry.devices, [list(replica[s]) for replica in priced.devices])
        memory = priced.memory[s]
        if set(entry.memory) != set(memory):
            problems.append(f"{where} memory lists {sorted(entry.memory)}, recomputed {sorted(memory)}")
        problems += [p for key in sorted(set(entry.memory) & set(memory))
                     for p in mismatch(f"{where} memory.{key}", entry.memory[key], memory[key])]
    return problems


def _transfers(priced: Priced, read: PlanManifest) -> list[str]:
    said = {(t.source, t.target): t for t in read.transfers}
    runs = {(t.source, t.target): t for t in priced.transfers}
    problems = [f"the transfer {a} -> {b} the stages need is missing from transfers" for a, b in runs.keys() - said.keys()]
    problems += [f"transfers lists {a} -> {b}, which the stages do not run" for a, b in said.keys() - runs.keys()]
    for key in sorted(runs.keys() & said.keys()):
        where, ran, told = f"transfer {key[0]} -> {key[1]}", runs[key], said[key]
        problems += mismatch(f"{where} tensors", told.tensors, list(ran.tensors))
        problems += mismatch(f"{where} bytes", told.bytes, ran.bytes)
        problems += mismatch(f"{where} seconds", told.seconds, ran.seconds)
    if len(read.transfers) != len(said):
        problems.append("transfers lists one transfer twice")
    return problems
