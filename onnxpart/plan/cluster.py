"""The cluster of ``onnxpart plan``: nodes × devices per node of one device spec, a link inside a node and a
link between nodes, and the sub-meshes a pipeline stage may take.

File (``--cluster cluster.yaml``, YAML or JSON; units as everywhere: ``80GB``, ``300GB/s``, ``5us``)::

    name: two DGX A100            # optional
    nodes: 2
    devices_per_node: 8
    device: a100                  # built-in spec, a spec file (relative to this file) or an inline mapping
    memory: 80GB                  # per device; default the spec's memory_capacity
    intra_node: {bandwidth: 300GB/s, latency: 5us}   # default: the spec's interconnect, 5 µs
    inter_node: {bandwidth: 25GB/s, latency: 5us}    # default: 25 GB/s, 5 µs

The shorthand ``--cluster NODESxDEVICES:SPEC`` (``2x8:a100``) takes every default. Bandwidths are per device
and per direction: each device has its own NVLink ports inside a node and its own network interface
between nodes (a DGX A100 has one 200 Gb/s HDR port, 25 GB/s, per GPU). The file is read by schedule's
system-file reader (:class:`onnxpart.schedule.system.system_file.Document`: one ``error:`` line naming the
file, the key and its line) and its device-spec resolution.

Devices are numbered node-major: device ``n · devices_per_node + d`` is device ``d`` of node ``n``.

Sub-meshes (the plan family's stage meshes, :func:`sub_meshes`): ``1×d`` inside one node for ``d`` in the
divisor chain of the node's devices (the powers of two dividing it, and the node itself: 1, 2, 4, 8), or
``n×D`` whole nodes. Sizes from one divisor chain always pack: sorted largest first, each at the lowest free
offset that is a multiple of its size (:func:`place`), so any multiset of such meshes whose sizes sum to at
most the cluster's devices is placed (Alpa's Theorem 1 argument, "Alpa", Zheng et al., OSDI 2022, §5.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from onnxpart.cost_models.device import DeviceSpec, load_device
from onnxpart.errors import UserError
from onnxpart.units import BANDWIDTH, BYTES, DEVICES, SECONDS, parse_bandwidth, parse_bytes, parse_seconds
from onnxpart.validate import Schema, number, validate

#: The defaults of a link the file or the shorthand does not give (the issue's: 25 GB/s, 5 µs between nodes).
INTER_BANDWIDTH = 25e9
LATENCY = 5e-6


class _LinkEntry(Schema):
    bandwidth: Optional[number(BANDWIDTH, parse_bandwidth)] = None
    latency: number(SECONDS, parse_seconds) = LATENCY


class ClusterFile(Schema):
    """The schema of a cluster file (module docstring)."""

    name: Optional[str] = None
    description: Optional[str] = None
    nodes: number(DEVICES)
    devices_per_node: number(DEVICES)
    device: Any
    memory: Optional[number(BYTES, parse_bytes)] = None
    intra_node: _LinkEntry = _LinkEntry()
    inter_node: _LinkEntry = _LinkEntry()


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes/s per device, one direction
    latency: float  # seconds per message


@dataclass(frozen=True)
class SubMesh:
    """A stage's mesh: ``nodes`` whole nodes (``nodes ≥ 1``, ``devices`` = the node's) or 1 × ``devices``
    inside one node (``nodes = 1``)."""

    nodes: int
    devices: int

    @property
    def size(self) -> int:
        return self.nodes * self.devices

    @property
    def shape(self) -> tuple[int, ...]:
        """The tile mesh: a ring of ``devices`` inside a node, else nodes × devices (axis 0 between nodes)."""
        return (self.devices,) if self.nodes == 1 else (self.nodes, self.devices)

    def __str__(self) -> str:
        return f"{self.nodes}x{self.devices}"


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: int
    devices_per_node: int
    spec: DeviceSpec
    memory: float  # bytes per device
    intra: Link
    inter: Link
    files: tuple[Path, ...] = ()

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    def node_of(self, device: int) -> int:
        return device // self.devices_per_node

    @cached_property
    def chain(self) -> tuple[int, ...]:
        """The sizes of the 1×d meshes inside a node: the powers of two dividing it, and the node itself."""
        d, out = 1, []
        while self.devices_per_node % d == 0 and d < self.devices_per_node:
            out.append(d)
            d *= 2
        return (*out, self.devices_per_node)

    def bandwidths(self, mesh: SubMesh) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(bandwidth, latency) per axis of ``mesh``'s tile mesh: the node's link, and between nodes the network."""
        if mesh.nodes == 1:
            return (self.intra.bandwidth,), (self.intra.latency,)
        return (self.inter.bandwidth, self.intra.bandwidth), (self.inter.latency, self.intra.latency)

    def describe(self) -> dict[str, Any]:
        """The cluster as the manifest and the certificate record it."""
        return {"name": self.name, "nodes": self.nodes, "devices_per_node": self.devices_per_node,
                "device": self.spec.name, "memory": self.memory,
                "intra_node": {"bandwidth": self.intra.bandwidth, "latency": self.intra.latency},
                "inter_node": {"bandwidth": self.inter.bandwidth, "latency": self.inter.latency}}


def sub_meshes(cluster: Cluster, sizes: tuple[int, ...] | None = None) -> tuple[SubMesh, ...]:
    """The family's stage meshes, smallest first (module docstring); ``sizes`` keeps only meshes of those
    device counts (``--mesh-sizes 1``: one device per stage, tile disabled)."""
    meshes = [SubMesh(1, d) for d in cluster.chain] + [SubMesh(n, cluster.devices_per_node)
                                                       for n in range(2, cluster.nodes + 1)]
    return tuple(m for m in meshes if sizes is None or m.size in sizes)


def place(cluster: Cluster, meshes: list[SubMesh]) -> list[tuple[int, ...]]:
    """The cluster devices of each mesh (row-major over its shape), disjoint: largest first, each at the lowest
    free offset that is a multiple of its size, ties in the order given (consecutive stages of one size land
    side by side). ValueError when they do not fit (sizes off the chain, or more devices than the cluster)."""
    free = [True] * cluster.devices
    out: list[tuple[int, ...] | None] = [None] * len(meshes)
    for i in sorted(range(len(meshes)), key=lambda i: -meshes[i].size):
        size = meshes[i].size
        start = next((s for s in range(0, cluster.devices - size + 1, size) if all(free[s:s + size])), None)
        if start is None:
            raise ValueError(f"meshes {[str(m) for m in meshes]} do not fit {cluster.devices} devices")
        free[start:start + size] = [False] * size
        out[i] = tuple(range(start, start + size))
    return out


_SHORTHAND = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*:\s*(\S+)\s*$")


def read_cluster(text: str) -> Cluster:
    """``--cluster``: ``NODESxDEVICES:SPEC`` or the path of a cluster file. UserError on anything malformed."""
    match = _SHORTHAND.match(text)
    if match:
        nodes, devices, spec = match.groups()
        top = _checked({"nodes": int(nodes), "devices_per_node": int(devices), "device": spec}, f"--cluster {text}")
        return _cluster(top, _load_spec(spec, f"--cluster {text}"), f"{nodes}x{devices}:{spec}", ())
    path = Path(text)
    if not path.is_file():
        raise UserError(f"--cluster {text}: neither NODESxDEVICES:SPEC (e.g. 2x8:a100) nor a cluster file")
    from onnxpart.schedule.system.system_file import Document, device_spec

    doc = Document(path)
    top = validate(ClusterFile, doc.data, doc.source, lines=doc.lines)
    spec = device_spec(doc, top.device, ("device",))
    return _cluster(top, spec, top.name or path.stem, tuple(doc.files))


def _checked(data: dict, source: str) -> ClusterFile:
    return validate(ClusterFile, data, source)


def _load_spec(name: str, source: str) -> DeviceSpec:
    try:
        return load_device(name)
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None


def _cluster(top: ClusterFile, spec: DeviceSpec, name: str, files: tuple[Path, ...]) -> Cluster:
    if top.nodes * top.devices_per_node > DEVICES.high:
        raise UserError(f"cluster {name}: {top.nodes * top.devices_per_node} devices, more than "
                        f"{DEVICES.high:g} (the limit)")
    intra = Link(top.intra_node.bandwidth or spec.interconnect_bandwidth, top.intra_node.latency)
    inter = Link(top.inter_node.bandwidth or INTER_BANDWIDTH, top.inter_node.latency)
    memory = top.memory if top.memory is not None else spec.memory_capacity
    return Cluster(name, int(top.nodes), int(top.devices_per_node), spec, float(memory), intra, inter, files)
