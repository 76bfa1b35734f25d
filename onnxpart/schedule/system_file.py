"""Reading a system description (``--system`` YAML or JSON) into a :class:`~onnxpart.schedule.model.System`.

Format (units accepted as in the CLI: ``64GiB``, ``16GB/s``, ``100Gbps``, ``10us``)::

    devices:
      - name: gpu            # a group; count > 1 expands to copies gpu:0, gpu:1, ...
        spec: a100           # built-in device (cost_models/devices), a YAML/JSON path, or an inline mapping
        count: 4             # identical copies (default 1)
        memory: 40GiB        # default: the spec's memory_capacity
        batch_sizes: [1, 64] # default [1]
        costs: gpu.json      # optional: measured op times on this device at batch 1 (onnxpart.schedule.measured),
                             # or per batch size: {1: gpu_b1.json, 8: gpu_b8.json} (onnxpart.schedule.batch_curve)
    links:
      default: {bandwidth: 16GB/s, latency: 10us}   # every ordered pair not listed below (optional)
      pairs:
        - {from: cpu, to: gpu, bandwidth: 16GB/s, latency: 10us, both_ways: true}
        - {from: gpu, to: gpu, bandwidth: 300GB/s}   # between copies of one group

``from``/``to`` name a group (all its copies) or one copy (``gpu:2``). Later entries override earlier
ones. A pair with no link and no default has no direct transfer (see :meth:`System.route`).
Every error is one line naming the file, the key and, for YAML, the line.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from onnxpart.cost_models.device import DeviceSpec, load_device
from onnxpart.costs_io import read_costs_file
from onnxpart.errors import UserError
from onnxpart.schedule.model import Device, Link, System
from onnxpart.units import parse_bandwidth, parse_bytes

_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


class _Reader:
    """The parsed document with the line of every key path, and error helpers."""

    def __init__(self, path: Path):
        self.path = path
        self.files = [path]  # every file read: this one, device spec files, costs files
        self.lines: dict[tuple, int] = {}
        try:
            text = path.read_text()
        except OSError as exc:
            raise UserError(f"cannot read system file {path}: {exc.strerror}") from None
        if path.suffix.lower() == ".json":
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}: " if mark is not None else ""
            raise UserError(f"{path}: {where}not valid YAML: {getattr(exc, 'problem', exc)}") from None
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
        key = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p)) for n, p in enumerate(at))
        line = next((self.lines[at[:m]] for m in range(len(at), -1, -1) if at[:m] in self.lines), None)
        where = f"{key or '(top level)'}" + (f" (line {line})" if line is not None else "")
        return UserError(f"{self.path}: {where}: {message}")

    def mapping(self, value: Any, at: tuple, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(at, f"expected a mapping ({what})")
        return value

    def number(self, value: Any, at: tuple, kind: str) -> float:
        """A bytes / bandwidth / seconds / count quantity, number or string with a unit."""
        try:
            if isinstance(value, bool):
                raise ValueError
            if kind == "bytes":
                v = float(value) if isinstance(value, (int, float)) else parse_bytes(str(value))
            elif kind == "bandwidth":
                v = float(value) if isinstance(value, (int, float)) else parse_bandwidth(str(value))
            elif kind == "seconds":
                v = float(value) if isinstance(value, (int, float)) else _seconds(str(value))
            else:
                raise AssertionError(kind)
        except (UserError, ValueError, TypeError):
            raise self.fail(at, f"cannot read {value!r} as {kind}") from None
        if not (v > 0 or (kind == "seconds" and v == 0)) or math.isnan(v):
            raise self.fail(at, f"{kind} must be {'≥ 0' if kind == 'seconds' else 'positive'}, got {value!r}")
        return v


def _seconds(text: str) -> float:
    m = re.match(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zµ]*)\s*$", text)
    if not m or m.group(2) not in _SECONDS:
        raise ValueError(text)
    return float(m.group(1)) * _SECONDS[m.group(2)]


def load_system(path: str | Path) -> System:
    """Read and check a system file; see the module docstring for the format."""
    r = _Reader(Path(path))
    top = r.mapping(r.data, (), "with 'devices' and optionally 'links'")
    unknown = set(top) - {"devices", "links", "name", "description"}
    if unknown:
        raise r.fail((sorted(unknown)[0],), "unknown key (expected devices, links)")
    if not isinstance(top.get("devices"), list) or not top["devices"]:
        raise r.fail(("devices",), "expected a non-empty list of devices")
    devices: list[Device] = []
    groups: dict[str, list[int]] = {}
    for n, entry in enumerate(top["devices"]):
        copies = _device_entry(r, entry, ("devices", n), Path(path).parent)
        group = copies[0].group
        if group in groups:
            raise r.fail(("devices", n, "name"), f"device {group!r} is listed twice")
        groups[group] = list(range(len(devices), len(devices) + len(copies)))
        devices.extend(copies)
    system = System(devices, files=tuple(r.files))
    _links(r, top.get("links"), system, groups)
    return system


_DEVICE_KEYS = {"name", "spec", "count", "memory", "batch_sizes", "costs"}
_LINK_KEYS = {"bandwidth", "latency"}


def _device_entry(r: _Reader, entry: Any, at: tuple, folder: Path) -> list[Device]:
    """One ``devices`` entry, expanded into its ``count`` identical copies."""
    entry = r.mapping(entry, at, "a device with name, spec, count, memory, batch_sizes")
    for key in entry:
        if key not in _DEVICE_KEYS:
            raise r.fail(at + (key,), f"unknown key (expected {', '.join(sorted(_DEVICE_KEYS))})")
    name = entry.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
        raise r.fail(at + ("name",), "each device needs a name (letters, digits, _ . -)")
    spec = _spec(r, entry.get("spec"), at + ("spec",), folder) if "spec" in entry else None
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise r.fail(at + ("count",), f"count must be a positive integer, got {count!r}")
    if "memory" in entry:
        memory = r.number(entry["memory"], at + ("memory",), "bytes")
    else:
        memory = spec.memory_capacity if spec is not None else math.inf
    sizes = entry.get("batch_sizes", [1])
    if (not isinstance(sizes, list) or not sizes
            or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes)):
        raise r.fail(at + ("batch_sizes",), f"batch_sizes must be a list of positive integers, got {sizes!r}")
    costs = _costs(r, entry["costs"], at + ("costs",), folder) if entry.get("costs") is not None else None
    names = [name] if count == 1 else [f"{name}:{c}" for c in range(count)]
    return [Device(n, name, spec, memory, tuple(sorted(set(sizes))), costs) for n in names]


def _costs(r: _Reader, value: Any, at: tuple, folder: Path) -> tuple[tuple[int, str], ...]:
    """``(batch, path)`` per measured batch size, ascending: one costs file (batch 1) or a mapping batch
    size → file, paths relative to the system file. Each file must be a readable costs file whose
    recorded ``batch`` (``onnxpart annotate --batch``), if any, is its key."""
    if isinstance(value, dict):
        if not value:
            raise r.fail(at, "expected a costs file or a mapping batch size → costs file")
        pairs = []
        for key, path in value.items():
            if not re.fullmatch(r"[1-9][0-9]*", key):
                raise r.fail(at + (key,), f"batch size must be a positive integer, got {key!r}")
            pairs.append((int(key), path, at + (key,)))
    else:
        pairs = [(1, value, at)]
    out = []
    for batch, path, where in sorted(pairs, key=lambda p: p[0]):
        if not isinstance(path, str) or not path:
            raise r.fail(where, f"expected the path of a costs file, got {path!r}")
        full = str(folder / path) if not Path(path).is_absolute() else path
        try:
            recorded = read_costs_file(full).get("batch")
        except UserError as exc:
            raise r.fail(where, str(exc)) from None
        if recorded is not None and recorded != batch:
            fix = f"list it as costs: {{{recorded}: {path}}}" if isinstance(recorded, int) else "measure it again"
            raise r.fail(where, f"{path} was measured at batch {recorded!r}, not {batch}: {fix}")
        out.append((batch, full))
        r.files.append(Path(full))
    return tuple(out)


def _spec(r: _Reader, value: Any, at: tuple, folder: Path) -> DeviceSpec:
    """A built-in device name, a device file (relative to the system file) or an inline mapping."""
    if isinstance(value, str):
        candidate = folder / value
        source = str(candidate) if candidate.suffix.lower() in (".yaml", ".yml", ".json") else value
        try:
            spec = load_device(source)
        except UserError as exc:
            raise r.fail(at, str(exc)) from None
        if Path(source).is_file():
            r.files.append(Path(source))
        return spec
    value = r.mapping(value, at, "a device name or peak_flops, memory_bandwidth, ...")
    required = ("peak_flops", "memory_bandwidth", "memory_capacity", "op_overhead", "interconnect_bandwidth")
    for key in required:
        if key not in value:
            raise r.fail(at, f"inline spec lacks {key}")
    peaks = r.mapping(value["peak_flops"], at + ("peak_flops",), "dtype: FLOP/s")
    try:
        return DeviceSpec(name=str(value.get("name", r.path.stem)), description=str(value.get("description", "")),
                          peak_flops={str(k): float(v) for k, v in peaks.items()},
                          memory_bandwidth=r.number(value["memory_bandwidth"], at + ("memory_bandwidth",), "bandwidth"),
                          memory_capacity=r.number(value["memory_capacity"], at + ("memory_capacity",), "bytes"),
                          op_overhead=r.number(value["op_overhead"], at + ("op_overhead",), "seconds"),
                          interconnect_bandwidth=r.number(value["interconnect_bandwidth"],
                                                          at + ("interconnect_bandwidth",), "bandwidth"))
    except (TypeError, ValueError):
        raise r.fail(at + ("peak_flops",), "peak FLOP/s must be numbers") from None


def _link(r: _Reader, value: Any, at: tuple, extra: set[str]) -> Link:
    value = r.mapping(value, at, "bandwidth and latency")
    for key in value:
        if key not in _LINK_KEYS | extra:
            raise r.fail(at + (key,), f"unknown key (expected {', '.join(sorted(_LINK_KEYS | extra))})")
    if "bandwidth" not in value:
        raise r.fail(at, "a link needs a bandwidth")
    return Link(r.number(value["bandwidth"], at + ("bandwidth",), "bandwidth"),
                r.number(value.get("latency", 0.0), at + ("latency",), "seconds"))


def _endpoints(r: _Reader, value: Any, at: tuple, system: System, groups: dict[str, list[int]]) -> list[int]:
    if isinstance(value, str):
        if value in groups:
            return groups[value]
        if value in system.names:
            return [system.names.index(value)]
    known = ", ".join(groups) + ("" if len(groups) == system.k else " (or a copy such as "
                                 + next(d.name for d in system.devices if ":" in d.name) + ")")
    raise r.fail(at, f"unknown device {value!r}: the system has {known}")


def _links(r: _Reader, links: Any, system: System, groups: dict[str, list[int]]) -> None:
    """Fill ``system.links``: the default for every ordered pair, then each pair entry in order."""
    if links is None:
        return
    links = r.mapping(links, ("links",), "with default and/or pairs")
    for key in links:
        if key not in ("default", "pairs"):
            raise r.fail(("links", key), "unknown key (expected default, pairs)")
    if "default" in links:
        default = _link(r, links["default"], ("links", "default"), set())
        system.links = {(u, v): default for u in range(system.k) for v in range(system.k) if u != v}
    pairs = links.get("pairs", [])
    if not isinstance(pairs, list):
        raise r.fail(("links", "pairs"), "expected a list of {from, to, bandwidth, latency}")
    for n, entry in enumerate(pairs):
        at = ("links", "pairs", n)
        entry = r.mapping(entry, at, "from, to, bandwidth, latency")
        for key in ("from", "to"):
            if key not in entry:
                raise r.fail(at, f"a link needs '{key}'")
        src = _endpoints(r, entry["from"], at + ("from",), system, groups)
        dst = _endpoints(r, entry["to"], at + ("to",), system, groups)
        link = _link(r, entry, at, {"from", "to", "both_ways"})
        both = entry.get("both_ways", False)
        if not isinstance(both, bool):
            raise r.fail(at + ("both_ways",), "both_ways must be true or false")
        for u in src:
            for v in dst:
                if u != v:
                    system.links[(u, v)] = link
                    if both:
                        system.links[(v, u)] = link
