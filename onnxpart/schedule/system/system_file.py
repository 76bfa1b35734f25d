"""Reading a system description (``--system`` YAML or JSON) into a :class:`~onnxpart.schedule.system.model.System`.

Format (units accepted as in the CLI: ``64GiB``, ``16GB/s``, ``100Gbps``, ``10us``)::

    devices:
      - name: gpu            # a group; count > 1 expands to copies gpu:0, gpu:1, ...
        spec: a100           # built-in device (cost_models/devices), a YAML/JSON path, or an inline mapping
        count: 4             # identical copies (default 1)
        memory: 40GiB        # default: the spec's memory_capacity
        batch_sizes: [1, 64] # default [1]
        costs: gpu.json      # optional: measured op times on this device at batch 1 (schedule.system.measured),
                             # or per batch size: {1: gpu_b1.json, 8: gpu_b8.json} (schedule.system.batch_curve)
        switch: 20us         # a device switch onto it: the launch of a piece's session (default: the spec's
                             # op_overhead, 0 without a spec), paid by every transfer into it
    links:
      default: {bandwidth: 16GB/s, latency: 10us}   # every ordered pair not listed below (optional)
      pairs:
        - {from: cpu, to: gpu, bandwidth: 16GB/s, latency: 10us, both_ways: true}
        - {from: gpu, to: gpu, bandwidth: 300GB/s}   # between copies of one group

``from``/``to`` name a group (all its copies) or one copy (``gpu:2``). Later entries override earlier
ones. A pair with no link and no default has no direct transfer (see :meth:`System.route`).
:class:`SystemFile` is the schema (numbers finite and in range, :mod:`onnxpart.units`; at most
:data:`~onnxpart.units.DEVICES` devices in all, copies included). Every error is one line naming the file,
the key and the line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import yaml
from pydantic import Field

from onnxpart.cost_models.device import DeviceSpec, DeviceSpecFile, load_device
from onnxpart.costs_io import read_costs_file
from onnxpart.errors import UserError
from onnxpart.files import read_text
from onnxpart.schedule.system.model import Device, Link, System
from onnxpart.units import (BATCH, BYTES, DEVICES, SECONDS, BANDWIDTH, NumberError, parse_bandwidth, parse_bytes,
                            parse_number, parse_seconds, quoted)
from onnxpart.validate import Schema, compose_yaml, identifier, located, number, parse_json, validate


class _LinkEntry(Schema):
    bandwidth: number(BANDWIDTH, parse_bandwidth)
    latency: number(SECONDS, parse_seconds) = 0.0


class _PairEntry(_LinkEntry):
    source: str = Field(alias="from")
    to: str
    both_ways: bool = False


class _Links(Schema):
    default: Optional[_LinkEntry] = None
    pairs: list[_PairEntry] = []


class _DeviceEntry(Schema):
    name: identifier(r"[A-Za-z_][A-Za-z0-9_.-]*", "a name (letters, digits, _ . -; not starting with a digit)")
    spec: Any = None  # a built-in device, a device file or an inline spec: :func:`_spec`
    count: number(DEVICES) = 1
    memory: Optional[number(BYTES, parse_bytes)] = None
    batch_sizes: Annotated[list[number(BATCH)], Field(min_length=1)] = [1]
    costs: Any = None  # a costs file or {batch size: costs file}: :func:`_costs`
    switch: Optional[number(SECONDS, parse_seconds)] = None  # default: the spec's op_overhead (0 without one)


class SystemFile(Schema):
    """The schema of a system file (module docstring)."""

    name: Optional[str] = None
    description: Optional[str] = None
    devices: Annotated[list[_DeviceEntry], Field(min_length=1)]
    links: Optional[_Links] = None


class Document:
    """A system file read: its data, the line of every key path, and errors that name both."""

    def __init__(self, path: Path):
        self.path, self.source = path, str(path)
        self.files = [path]  # every file read: this one, device spec files, costs files
        self.lines: dict[tuple, int] = {}
        text = read_text(path, "system file")
        if path.suffix.lower() == ".json":
            parse_json(text, self.source)  # JSON's own errors (and depth limit) first
        node = compose_yaml(text, self.source)
        self.data = self._convert(node, ()) if node is not None else None

    def _convert(self, node: yaml.Node, at: tuple) -> Any:
        self.lines[at] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                out[key] = self._convert(value_node, at + (key,))
                self.lines[at + (key,)] = key_node.start_mark.line + 1  # the key's line, not the value's
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(item, at + (n,)) for n, item in enumerate(node.value)]
        return yaml.SafeLoader("").construct_object(node)

    def fail(self, at: tuple, message: str) -> UserError:
        return located(self.source, at, message, self.lines)


def load_system(path: str | Path) -> System:
    """Read and check a system file; see the module docstring for the format."""
    doc = Document(Path(path))
    top = validate(SystemFile, doc.data, doc.source, lines=doc.lines)
    devices: list[Device] = []
    groups: dict[str, list[int]] = {}
    for n, entry in enumerate(top.devices):
        at = ("devices", n)
        if entry.name in groups:
            raise doc.fail(at + ("name",), f"device {entry.name!r} is listed twice")
        if len(devices) + entry.count > DEVICES.high:
            raise doc.fail(at + ("count",), f"more than {DEVICES.high:g} devices in all (the limit)")
        groups[entry.name] = list(range(len(devices), len(devices) + entry.count))
        devices.extend(_copies(doc, entry, at))
    system = System(devices, files=tuple(doc.files))
    _links(doc, top.links, system, groups)
    return system


def _copies(doc: Document, entry: _DeviceEntry, at: tuple) -> list[Device]:
    """One ``devices`` entry, expanded into its ``count`` identical copies."""
    spec = device_spec(doc, entry.spec, at + ("spec",)) if entry.spec is not None else None
    if entry.memory is not None:
        memory = entry.memory
    else:
        memory = spec.memory_capacity if spec is not None else math.inf
    costs = _costs(doc, entry.costs, at + ("costs",)) if entry.costs is not None else None
    switch = entry.switch if entry.switch is not None else spec.op_overhead if spec is not None else 0.0
    names = [entry.name] if entry.count == 1 else [f"{entry.name}:{c}" for c in range(entry.count)]
    return [Device(n, entry.name, spec, memory, tuple(sorted(set(entry.batch_sizes))), costs, switch)
            for n in names]


def _costs(doc: Document, value: Any, at: tuple) -> tuple[tuple[int, str], ...]:
    """``(batch, path)`` per measured batch size, ascending: one costs file (batch 1) or a mapping batch
    size → file, paths relative to the system file. Each file must be a readable costs file whose
    recorded ``batch`` (``onnxpart annotate --batch``), if any, is its key."""
    if isinstance(value, str):
        pairs = [(1, value, at)]
    elif isinstance(value, dict) and value:
        pairs = []
        for key, path in value.items():
            try:
                pairs.append((parse_number(key, "batch size", BATCH), path, at + (key,)))
            except NumberError as exc:
                raise doc.fail(at + (key,), str(exc)) from None
    else:
        raise doc.fail(at, f"expected a costs file or a mapping batch size → costs file, got {quoted(value)}")
    out = []
    for batch, path, where in sorted(pairs, key=lambda p: p[0]):
        if not isinstance(path, str) or not path:
            raise doc.fail(where, f"expected the path of a costs file, got {quoted(path)}")
        full = str(doc.path.parent / path) if not Path(path).is_absolute() else path
        try:
            recorded = read_costs_file(full).batch
        except UserError as exc:
            raise doc.fail(where, str(exc)) from None
        if recorded is not None and recorded != batch:
            raise doc.fail(where, f"{path} was measured at batch {recorded}, not {batch}: list it as costs: "
                                  f"{{{recorded}: {path}}}")
        out.append((batch, full))
        doc.files.append(Path(full))
    return tuple(out)


def device_spec(doc: Document, value: Any, at: tuple) -> DeviceSpec:
    """A built-in device name, a device file (relative to the system file) or an inline mapping."""
    if isinstance(value, str):
        candidate = doc.path.parent / value
        source = str(candidate) if candidate.suffix.lower() in (".yaml", ".yml", ".json") else value
        try:
            spec = load_device(source)
        except UserError as exc:
            raise doc.fail(at, str(exc)) from None
        if Path(source).is_file():
            doc.files.append(Path(source))
        return spec
    if isinstance(value, dict):
        return validate(DeviceSpecFile, value, doc.source, at=at, lines=doc.lines).spec(doc.path.stem)
    raise doc.fail(at, f"expected a device name, a device file or a mapping with peak_flops, memory_bandwidth, "
                       f"memory_capacity, op_overhead, interconnect_bandwidth; got {quoted(value)}")


def _endpoints(doc: Document, value: str, at: tuple, system: System, groups: dict[str, list[int]]) -> list[int]:
    if value in groups:
        return groups[value]
    if value in system.names:
        return [system.names.index(value)]
    known = ", ".join(groups) + ("" if len(groups) == system.k else " (or a copy such as "
                                 + next(d.name for d in system.devices if ":" in d.name) + ")")
    raise doc.fail(at, f"unknown device {value!r}: the system has {known}")


def _links(doc: Document, links: Optional[_Links], system: System, groups: dict[str, list[int]]) -> None:
    """Fill ``system.links``: the default for every ordered pair, then each pair entry in order."""
    if links is None:
        return
    if links.default is not None:
        default = Link(links.default.bandwidth, links.default.latency)
        system.links = {(u, v): default for u in range(system.k) for v in range(system.k) if u != v}
    for n, entry in enumerate(links.pairs):
        at = ("links", "pairs", n)
        src = _endpoints(doc, entry.source, at + ("from",), system, groups)
        dst = _endpoints(doc, entry.to, at + ("to",), system, groups)
        link = Link(entry.bandwidth, entry.latency)
        for u in src:
            for v in dst:
                if u != v:
                    system.links[(u, v)] = link
                    if entry.both_ways:
                        system.links[(v, u)] = link
