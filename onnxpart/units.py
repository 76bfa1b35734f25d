"""Parsing and formatting of human quantities. Inside the library everything is seconds, bytes and
bytes/second; these helpers are used only at the CLI edge."""

from __future__ import annotations

import re

from onnxpart.errors import UserError

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


_DIGIT_GROUPS = re.compile(r"^\s*\d{1,3}(?:([,_])\d{3})(?:\1\d{3})*(?=\D|$)")


def parse_bytes(text: str) -> float:
    """``"512MiB"`` -> 536870912.0; ``"1.5GB"`` -> 1.5e9; a bare number is bytes. Digit groups may be
    separated by ``,`` or ``_`` (``6,422,528`` as onnxpart prints sizes)."""
    grouped = _DIGIT_GROUPS.match(text)
    if grouped:
        text = grouped.group(0).replace(grouped.group(1), "") + text[grouped.end():]
    match = _QUANTITY.match(text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _BYTE_UNITS:
        raise UserError(f"cannot read {text!r} as a size: use e.g. 512MiB, 1.5GB or 1048576")
    return float(match.group(1)) * _BYTE_UNITS[unit]


def parse_bandwidth(text: str) -> float:
    """``"25GB/s"`` -> 2.5e10 bytes/second. ``/s`` is optional; ``100Gbps`` and ``100Gbit/s`` are bits."""
    match = re.match(r"^\s*(.*?)(bps|bit/s|/s)?\s*$", text, flags=re.IGNORECASE)
    quantity, suffix = match.group(1), (match.group(2) or "").lower()
    bits = suffix in ("bps", "bit/s")
    try:
        value = parse_bytes(quantity)
    except UserError:
        raise UserError(f"cannot read {text!r} as a bandwidth: use e.g. 25GB/s, 900GiB/s or 100Gbps") from None
    if value <= 0:
        raise UserError(f"bandwidth must be positive, got {text!r}")
    return value / 8 if bits else value


def parse_percent_or_bytes(text: str) -> tuple[str, float]:
    """``"80%"`` -> ("fraction", 0.8); ``"24MiB"`` -> ("bytes", 25165824.0); ``"min"`` -> ("min", 0.0)."""
    stripped = text.strip()
    if stripped.lower() == "min":
        return "min", 0.0
    if stripped.endswith("%"):
        try:
            value = float(stripped[:-1]) / 100.0
        except ValueError:
            raise UserError(f"cannot read {text!r} as a percentage") from None
        if value <= 0:
            raise UserError(f"a percentage must be positive, got {text!r}")
        return "fraction", value
    return "bytes", parse_bytes(stripped)


def parse_fraction(text: str) -> float:
    """``"5%"`` -> 0.05, ``"0.05"`` -> 0.05."""
    stripped = text.strip()
    try:
        return float(stripped[:-1]) / 100.0 if stripped.endswith("%") else float(stripped)
    except ValueError:
        raise UserError(f"cannot read {text!r} as a fraction: use e.g. 5% or 0.05") from None


def byte_unit(value: float) -> tuple[float, str]:
    """The binary unit to show ``value`` bytes in: 1536 -> ``(1024, "KiB")``; below 1 KiB, ``(1, "B")``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return scale, unit
    return 1, "B"


def format_bytes(value: float) -> str:
    """1536 -> ``"1.5 KiB"``."""
    scale, unit = byte_unit(value)
    return f"{value / scale:.1f} {unit}" if scale > 1 else f"{value:.0f} B"


def format_seconds(value: float) -> str:
    """0.00345 -> ``"3.45 ms"``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def format_flops(value: float) -> str:
    """3.1e9 -> ``"3.10 GFLOP"``."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("KFLOP", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} FLOP"
