"""Cross-mesh resharding: the tensors one stage hands to another, from the sender's layout on its sub-mesh to
the receiver's layout on its own, priced by the index sets each device sends and receives.

Each receiving device needs the box of the tensor its layout gives it (:func:`boxes`: along a dim sharded by
mesh axes, its block; a replicated dim whole). The sender's devices hold boxes of their own; the receiver gets
each intersection from one holder of it — one in its own node when there is one, else spread over the holders
by the receiver's index — over the node's link (NVLink) or the network between nodes. A transfer between two
stages moves all their tensors at once, so it takes

    latency + max over devices of max(bytes sent, bytes received) / bandwidth     (per link kind)

with the network's latency when any byte crosses nodes, else the node link's. Bandwidths are per device and
direction (:mod:`onnxpart.plan.cluster`). Partial sums (``P``) never cross a stage boundary: a stage stores
the tensors it hands on, and those it receives, in ``R`` or ``S`` layouts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.plan.cluster import Cluster
from onnxpart.tile.onnx.mesh import parts

Box = tuple[tuple[int, int], ...]


def boxes(shape: Sequence[int], layout, mesh_shape: Sequence[int]) -> list[Box]:
    """The box each device of the mesh (row-major) holds of a tensor of ``shape`` in ``layout`` (no ``P``)."""
    comps = parts(layout)
    out = []
    for coords in np.ndindex(*mesh_shape):
        box = []
        for d, size in enumerate(shape):
            index, count = 0, 1
            for j, a in enumerate(comps):
                if a.kind == "S" and a.dim == d:
                    index, count = index * mesh_shape[j] + coords[j], count * mesh_shape[j]
            step = size // count
            box.append((index * step, (index + 1) * step))
        out.append(tuple(box))
    return out


def _overlap(a: Box, b: Box) -> int:
    n = 1
    for (a0, a1), (b0, b1) in zip(a, b):
        n *= max(0, min(a1, b1) - max(a0, b0))
    return n


@dataclass
class Traffic:
    """Bytes per device and link kind of one transfer between two stages."""

    sent: dict[tuple[int, str], float]
    received: dict[tuple[int, str], float]

    @classmethod
    def empty(cls) -> "Traffic":
        return cls({}, {})

    def add(self, sender: int, receiver: int, nbytes: float, link: str) -> None:
        self.sent[(sender, link)] = self.sent.get((sender, link), 0.0) + nbytes
        self.received[(receiver, link)] = self.received.get((receiver, link), 0.0) + nbytes

    @property
    def total(self) -> float:
        return sum(self.received.values())

    def seconds(self, cluster: Cluster) -> float:
        """The transfer's time (module docstring); 0 when nothing moves."""
        if not self.received:
            return 0.0
        link = {"intra": cluster.intra, "inter": cluster.inter}
        slowest = max(nbytes / link[kind].bandwidth for (_, kind), nbytes in (*self.sent.items(),
                                                                              *self.received.items()))
        crosses = any(kind == "inter" for _, kind in self.received)
        return (cluster.inter.latency if crosses else cluster.intra.latency) + slowest


def move(traffic: Traffic, cluster: Cluster, shape: Sequence[int], nbytes: int,
         source: tuple[Sequence[int], object, Sequence[int]], target: tuple[Sequence[int], object, Sequence[int]]) -> None:
    """Add to ``traffic`` the bytes of one tensor (``shape``, ``nbytes``) moved from ``source`` to ``target``,
    each (cluster devices of the mesh, layout, mesh shape)."""
    numel = int(np.prod(shape)) if len(shape) else 1
    item = nbytes / numel if numel else 0.0
    src_devices, src_layout, src_shape = source
    held: dict[Box, list[int]] = {}
    for device, box in zip(src_devices, boxes(shape, src_layout, src_shape)):
        held.setdefault(box, []).append(device)
    for n, (receiver, want) in enumerate(zip(target[0], boxes(shape, target[1], target[2]))):
        for box, holders in held.items():
            count = _overlap(box, want)
            if count == 0:
                continue
            near = [h for h in holders if cluster.node_of(h) == cluster.node_of(receiver)]
            sender = near[n % len(near)] if near else holders[n % len(holders)]
            link = "intra" if near else "inter"
            traffic.add(sender, receiver, count * item, link)
