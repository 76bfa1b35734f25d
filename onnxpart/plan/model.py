"""The plan problem and its answers: a costed model on a cluster (:class:`Problem`), a plan's shape (stages,
their meshes, replicas: :class:`Shape`) and a plan priced in full (:class:`Priced`).

**The plan family.** The model's ops cut into S ≥ 1 stages, each a run of consecutive units
(:mod:`onnxpart.plan.units`); stage s on its own sub-mesh (1×d inside a node, or whole nodes:
:mod:`onnxpart.plan.cluster`), the sub-meshes disjoint; R ≥ 1 identical replicas of the pipeline; inside each
stage a tile plan on its mesh (:mod:`onnxpart.plan.stages`); every device's memory within its capacity.

**Objective.** A stage's compute is tile's step time of its ops on its mesh; a transfer between two stages
moves the tensors one hands the other (:mod:`onnxpart.plan.transfers`). The latency of one micro-batch is
``L = Σ compute + Σ transfers``; a stage's period is its compute plus the transfers into and out of it (the
link is not overlapped with compute: Eq. 3 of the partition paper). ``latency`` minimizes L for one input;
``throughput`` processes ``batch`` inputs — each one micro-batch, the model at the dims it was costed at —
split over R replicas, ``M = batch / R`` micro-batches each, in ``T = L + (M − 1) · max period`` (GPipe's and
Alpa's formula).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from onnxpart.errors import UserError
from onnxpart.graph import OpGraph
from onnxpart.plan.cluster import Cluster, SubMesh, sub_meshes
from onnxpart.plan.units import MAX_UNITS, Units, make_units

OBJECTIVES = ("latency", "throughput")


@dataclass
class Problem:
    graph: OpGraph
    cluster: Cluster
    objective: str = "latency"
    batch: int = 1  # inputs in the step (throughput)
    micro_batches: int | None = None  # M per replica when given
    mesh_sizes: tuple[int, ...] | None = None  # only sub-meshes of these sizes (None: all)
    max_units: int = MAX_UNITS
    constants: dict = field(default_factory=dict)  # small constants of the model (tile's catalog reads them)
    instances: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise UserError(f"--objective {self.objective}: use one of {', '.join(OBJECTIVES)}")
        if not self.meshes:
            raise UserError(f"--mesh-sizes {','.join(map(str, self.mesh_sizes or ()))}: no sub-mesh of the "
                            f"cluster has that many devices; sizes here: "
                            f"{', '.join(str(m.size) for m in sub_meshes(self.cluster))}")
        self.replica_options()

    @cached_property
    def units(self) -> Units:
        return make_units(self.graph, self.max_units)

    @cached_property
    def meshes(self) -> tuple[SubMesh, ...]:
        return sub_meshes(self.cluster, self.mesh_sizes)

    def instance(self, mesh: SubMesh):
        """Tile's layout instance of the whole model on ``mesh`` (built once per mesh)."""
        if mesh not in self.instances:
            from onnxpart.tile.onnx.build import build_layout_instance

            bandwidth, latency = self.cluster.bandwidths(mesh)
            self.instances[mesh] = build_layout_instance(self.graph, mesh.shape, bandwidth, latency,
                                                         constants=self.constants, device=self.cluster.spec)
        return self.instances[mesh]

    def run(self, first: int, last: int, m: int) -> "Shape":
        """Units ``first .. last - 1`` as one stage on mesh ``m``: how a run of the family is priced alone."""
        return Shape(((tuple(self.units.ops(first, last)), self.meshes[m]),), units=((first, last),))

    def replica_options(self) -> list[tuple[int, int]]:
        """(R, M) pairs the family allows: latency one input on one replica; throughput R dividing the batch
        (at most one device per replica each), or the R that ``micro_batches`` gives. UserError when none."""
        if self.objective == "latency":
            return [(1, 1)]
        if self.micro_batches is not None:
            if self.batch % self.micro_batches:
                raise UserError(f"--micro-batches {self.micro_batches} does not divide --batch {self.batch}")
            replicas = self.batch // self.micro_batches
            if replicas > self.cluster.devices:
                raise UserError(f"--batch {self.batch} in {self.micro_batches} micro-batches needs {replicas} "
                                f"replicas, more than the cluster's {self.cluster.devices} devices")
            return [(replicas, self.micro_batches)]
        return [(r, self.batch // r) for r in range(1, min(self.batch, self.cluster.devices) + 1)
                if self.batch % r == 0]


@dataclass(frozen=True)
class Shape:
    """A plan without its layouts: stages as (op indices in order, mesh), and the replicas."""

    stages: tuple[tuple[tuple[int, ...], SubMesh], ...]
    replicas: int = 1
    micro_batches: int = 1
    units: tuple[tuple[int, int], ...] | None = None  # the unit run of each stage, when stages are runs of units

    @property
    def devices(self) -> int:
        return self.replicas * sum(mesh.size for _, mesh in self.stages)

    def describe(self) -> str:
        """``S=2 [1x8, 1x8] R=1 M=64``."""
        return (f"S={len(self.stages)} [{', '.join(str(m) for _, m in self.stages)}] R={self.replicas} "
                f"M={self.micro_batches}")


@dataclass
class Transfer:
    source: int
    target: int
    tensors: tuple[str, ...]
    bytes: float  # bytes moved, all receivers together (one replica)
    seconds: float


@dataclass
class Priced:
    """A plan priced in full: its stages (:class:`onnxpart.plan.stages.Stage`), their devices per replica, the
    transfers, and the objective (module docstring); ``missing`` bytes per device of the stage furthest over
    its memory (0: it fits)."""

    shape: Shape
    stages: list[Any]
    devices: list[list[tuple[int, ...]]]  # [replica][stage] -> cluster devices
    transfers: list[Transfer]
    objective: str
    memory: list[dict[str, float]]
    capacity: float

    @property
    def computes(self) -> list[float]:
        return [s.compute for s in self.stages]

    @property
    def periods(self) -> list[float]:
        out = list(self.computes)
        for t in self.transfers:
            out[t.source] += t.seconds
            out[t.target] += t.seconds
        return out

    @property
    def latency(self) -> float:
        return sum(self.computes) + sum(t.seconds for t in self.transfers)

    @property
    def value(self) -> float:
        if self.objective == "latency":
            return self.latency
        return self.latency + (self.shape.micro_batches - 1) * max(self.periods)

    @property
    def missing(self) -> float:
        return max(0.0, max(m["total"] for m in self.memory) - self.capacity)

    @property
    def fits(self) -> bool:
        return self.missing <= 0
