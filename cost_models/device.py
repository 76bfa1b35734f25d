"""Device specifications: data files in ``cost_models/devices/`` (datasheet numbers, sources in comments)
or a user's own YAML/JSON file passed as ``--device path``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Optional

from pydantic import Field

from onnxpart.errors import UserError
from onnxpart.files import read_text
from onnxpart.units import (BANDWIDTH, BYTES, FLOP_RATE, SECONDS, parse_bandwidth, parse_bytes, parse_number,
                            parse_seconds)
from onnxpart.validate import OpenSchema, load_yaml, number, parse_json, validate

_REQUIRED = ("peak_flops", "memory_bandwidth", "memory_capacity", "op_overhead", "interconnect_bandwidth")


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    description: str
    peak_flops: dict[str, float]  # FLOP/s per dtype name ("float32", "float16", "int8", ...)
    memory_bandwidth: float  # bytes/s
    memory_capacity: float  # bytes
    op_overhead: float  # seconds added to every op (launch/dispatch)
    interconnect_bandwidth: float  # bytes/s between two devices of this kind (one direction)

    def peak_for(self, dtype: str) -> float:
        """Peak FLOP/s for a dtype: exact match, then its family (float8*, int*/uint*), then float32."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if dtype.startswith("float8") and "float8" in self.peak_flops:
            return self.peak_flops["float8"]
        if dtype in ("int4", "uint4", "uint8", "int8", "float8e4m3fn", "float8e5m2") and "int8" in self.peak_flops:
            return self.peak_flops["int8"]
        return self.peak_flops.get("float32", next(iter(self.peak_flops.values())))


class DeviceSpecFile(OpenSchema):
    """The schema of a device spec: a device file, or a system file's inline ``spec:``. Numbers may carry
    units (``2TB/s``, ``80GiB``, ``5us``); other keys (notes, sources) are ignored."""

    name: Optional[str] = None
    description: str = ""
    peak_flops: Annotated[dict[str, number(FLOP_RATE, lambda text, what: parse_number(text, what, FLOP_RATE))],
                          Field(min_length=1)]
    memory_bandwidth: number(BANDWIDTH, parse_bandwidth)
    memory_capacity: number(BYTES, parse_bytes)
    op_overhead: number(SECONDS, parse_seconds)
    interconnect_bandwidth: number(BANDWIDTH, parse_bandwidth)

    def spec(self, default_name: str) -> DeviceSpec:
        """The :class:`DeviceSpec` (named ``default_name`` where the file gives no name)."""
        return DeviceSpec(self.name or default_name, self.description, dict(self.peak_flops), self.memory_bandwidth,
                          self.memory_capacity, self.op_overhead, self.interconnect_bandwidth)


def builtin_devices() -> list[str]:
    folder = resources.files("onnxpart.cost_models") / "devices"
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_device(name_or_path: str) -> DeviceSpec:
    """A built-in device by name (``cpu``, ``t4``, ``a100``, ``h100``) or a YAML/JSON file
    (:class:`DeviceSpecFile`)."""
    path = Path(name_or_path)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        text, source = read_text(path, "device file"), str(path)
        name = path.stem
    else:
        candidate = resources.files("onnxpart.cost_models") / "devices" / f"{name_or_path.lower()}.yaml"
        if not candidate.is_file():
            raise UserError(f"unknown device {name_or_path!r}: use one of {', '.join(builtin_devices())} "
                            "or a YAML/JSON file with " + ", ".join(_REQUIRED))
        text, source = candidate.read_text(), name_or_path.lower()
        name = source
    data = parse_json(text, source) if source.endswith(".json") else load_yaml(text, source)
    if not isinstance(data, dict):
        raise UserError(f"device file {source} must hold a mapping with {', '.join(_REQUIRED)}")
    return validate(DeviceSpecFile, data, source).spec(name)
