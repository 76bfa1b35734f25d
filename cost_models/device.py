"""Device specifications: data files in ``cost_models/devices/`` (datasheet numbers, sources in comments)
or a user's own YAML/JSON file passed as ``--device path``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from onnxpart.errors import UserError

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


def builtin_devices() -> list[str]:
    folder = resources.files("onnxpart.cost_models") / "devices"
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_device(name_or_path: str) -> DeviceSpec:
    """A built-in device by name (``cpu``, ``t4``, ``a100``, ``h100``) or a YAML/JSON file."""
    path = Path(name_or_path)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise UserError(f"device file {path} does not exist")
        text = path.read_text()
        source = str(path)
    else:
        folder = resources.files("onnxpart.cost_models") / "devices"
        candidate = folder / f"{name_or_path.lower()}.yaml"
        if not candidate.is_file():
            raise UserError(f"unknown device {name_or_path!r}: use one of {', '.join(builtin_devices())} "
                            "or a YAML/JSON file with " + ", ".join(_REQUIRED))
        text = candidate.read_text()
        source = name_or_path.lower()
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except Exception as exc:
        raise UserError(f"cannot read device file {source}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"device file {source} must hold a mapping with {', '.join(_REQUIRED)}")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise UserError(f"device file {source} lacks {', '.join(missing)}")
    try:
        peak = {str(k): float(v) for k, v in dict(data["peak_flops"]).items()}
        spec = DeviceSpec(
            name=str(data.get("name", path.stem if path.suffix else source)),
            description=str(data.get("description", "")),
            peak_flops=peak,
            memory_bandwidth=float(data["memory_bandwidth"]),
            memory_capacity=float(data["memory_capacity"]),
            op_overhead=float(data["op_overhead"]),
            interconnect_bandwidth=float(data["interconnect_bandwidth"]),
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"device file {source} has a non-numeric value: {exc}") from None
    if min(spec.memory_bandwidth, spec.interconnect_bandwidth, *spec.peak_flops.values()) <= 0 or spec.op_overhead < 0:
        raise UserError(f"device file {source}: bandwidths and peaks must be positive, overhead ≥ 0")
    return spec
