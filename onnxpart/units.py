"""Parsing, checking and formatting of the numbers that enter onnxpart. Inside the library everything is
seconds, bytes and bytes/second; these helpers are used where a number comes in (a CLI option, a field of
an input file) and where one goes out to a human.

Every number that enters is checked here, against a :class:`Range`: finite, within its bounds, an integer
where it must be. :meth:`Range.check` checks a number already read (a Typer ``int``/``float`` option, a
JSON or YAML field), :func:`parse_number` reads text; the unit parsers (:func:`parse_bytes`,
:func:`parse_bandwidth`, :func:`parse_seconds`, :func:`parse_percent_or_bytes`, :func:`parse_fraction`)
read a quantity with its unit and check it the same way. Every failure is one :class:`NumberError` (a
:class:`UserError`) naming the option or field, what it must be, and what it got.

The limits below (the named ranges) are far above real use; they keep what can explode bounded (a
``count`` of 10⁹ devices, ``--runs 10**30``) and every sum and product of input numbers finite. README.md,
"Limits", lists them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from onnxpart.errors import UserError


def _plain(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _show_bytes(value: float) -> str:
    """``2**50`` -> ``"1 PiB"``: a bound in the largest binary unit that divides it."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale and value % scale == 0:
            return f"{int(value // scale)} {unit}"
    return f"{value:g} B"


def quoted(value: object) -> str:
    """What the user gave, for a message: short, and safe for integers too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


class NumberError(UserError):
    """A number that is unreadable or out of its range: ``what`` (the option or field) and ``problem``
    (``must be an integer from 1 to 1024, got 0``). A file's schema reports ``problem`` at its field path."""

    def __init__(self, what: str, problem: str):
        super().__init__(f"{what}: {problem}")
        self.what, self.problem = what, problem


@dataclass(frozen=True)
class Range:
    """The values a number may take: finite, from ``low`` to ``high`` (an end excluded where ``low_open`` /
    ``high_open``), an integer where ``integer``. ``noun`` and ``show`` word it for messages:
    ``a size from 0 B to 1 PiB``."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    noun: str = ""
    show: Callable[[float], str] = _plain

    def describe(self) -> str:
        """``an integer from 1 to 1024``, ``a number > 0 and ≤ 1e+07``."""
        noun = self.noun or ("an integer" if self.integer else "a number")
        low, high = self.show(self.low), self.show(self.high)
        if not self.low_open and not self.high_open:
            return f"{noun} from {low} to {high}"
        return f"{noun} {'>' if self.low_open else '≥'} {low} and {'<' if self.high_open else '≤'} {high}"

    def problem(self, value: object, given: str | None = None) -> str | None:
        """None when ``value`` (an int or float, never a bool) lies in the range, else what is wrong:
        ``must be an integer from 1 to 1024, got 1180591620717411303424`` (``given``: the text the user
        wrote, shown instead of the value)."""
        if self.contains(value):
            return None
        return f"must be {self.describe()}, got {given if given is not None else quoted(value)}"

    def contains(self, value: object) -> bool:
        """True when ``value`` is an int or a finite float (integral for an integer range) in the range."""
        kind = type(value)
        if kind is float:
            if not math.isfinite(value) or (self.integer and not value.is_integer()):
                return False
        elif kind is not int and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return False
        if value < self.low or (self.low_open and value == self.low):
            return False
        return value < self.high or (not self.high_open and value == self.high)

    def check(self, value: object, what: str, given: str | None = None) -> int | float:
        """``value`` as an int (integer ranges) or a float; a UserError naming ``what`` when it is out of
        range or not a number."""
        problem = self.problem(value, given)
        if problem is not None:
            raise NumberError(what, problem)
        return int(value) if self.integer else float(value)


_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]{1,400}", re.ASCII)  # longer is out of every range (and past int()'s digit limit)


def parse_number(text: str, what: str, allowed: Range) -> int | float:
    """A plain decimal number (``8``, ``-2.5``, ``1e-6``) read from ``text`` and checked against
    ``allowed``; integers are read exactly (``1180591620717411303424`` stays that integer)."""
    return allowed.check(_read_number(text, what), what, quoted(text.strip()))


def _read_number(text: str, what: str) -> int | float:
    stripped = text.strip() if isinstance(text, str) else None
    if stripped is None or not _NUMBER.fullmatch(stripped):
        raise NumberError(what, f"cannot read {quoted(text)} as a number: use e.g. 8, 0.5 or 1e-6")
    return int(stripped) if _INTEGER.fullmatch(stripped) else float(stripped)


# --------------------------------------------------------------------------------------------- limits
#: Quantities in input files and options.
SECONDS = Range(0, 1e15, noun="a duration", show=lambda v: "0 s" if v == 0 else f"{v:g} s")
BYTES = Range(0, 2**50, noun="a size", show=_show_bytes)
BANDWIDTH = Range(1, 1e18, noun="a bandwidth", show=lambda v: f"{v:g} B/s")
FLOPS = Range(0, 1e30, noun="a FLOP count")
FLOP_RATE = Range(1, 1e24, noun="a FLOP/s rate")
DIM = Range(0, 2**50, integer=True, noun="a dimension")
#: ``--dim`` and ``--input-shape`` values: 0 is real (a decode step's empty KV cache); ONNX runtimes index
#: with 32-bit integers, and 2**70 overflowed protobuf's int64 (a traceback in every command).
SHAPE_DIM = Range(0, 2**31 - 1, integer=True, noun="a dimension")
#: Devices: a system file's devices (all copies together), a mesh's devices, ``--devices``.
DEVICES = Range(1, 4096, integer=True)
MESH_AXES = 4
#: Inputs per batch: ``--batch``, a system file's ``batch_sizes`` and its measured batch sizes.
BATCH = Range(1, 65536, integer=True)
#: Seeds reach HiGHS and CP-SAT, whose seeds are 32-bit signed integers.
SEED = Range(0, 2**31 - 1, integer=True)
#: Nesting of JSON/YAML input files, and a YAML file's nodes once its aliases are expanded.
MAX_DEPTH = 64
MAX_YAML_NODES = 1_000_000


# ------------------------------------------------------------------------------------- quantities
_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_QUANTITY = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*")
_DIGIT_GROUPS = re.compile(r"^\s*\d{1,3}(?:([,_])\d{3})(?:\1\d{3})*(?=\D|$)")
_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _quantity(text: str, units: dict[str, float], what: str, kind: str, examples: str) -> tuple[float, str]:
    """(number × unit, the text as given) of ``"1.5GB"``-like text; UserError if it is not one."""
    if isinstance(text, str):
        grouped = _DIGIT_GROUPS.match(text)
        if grouped:
            text = grouped.group(0).replace(grouped.group(1), "") + text[grouped.end():]
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if unit not in units:
        if isinstance(text, str) and text.strip().startswith("-") and _QUANTITY.fullmatch(text.strip()[1:]):
            raise NumberError(what, f"cannot be negative, got {quoted(text.strip())}")
        raise NumberError(what, f"cannot read {quoted(text)} as {kind}: use e.g. {examples}")
    return float(match.group(1)) * units[unit], quoted(text.strip())


def parse_bytes(text: str, what: str = "size") -> float:
    """``"512MiB"`` -> 536870912.0; ``"1.5GB"`` -> 1.5e9; a bare number is bytes. Digit groups may be
    separated by ``,`` or ``_`` (``6,422,528`` as onnxpart prints sizes). Checked against :data:`BYTES`."""
    value, given = _quantity(text, _BYTE_UNITS, what, "a size", "512MiB, 1.5GB or 1048576")
    return BYTES.check(value, what, given)


def parse_bandwidth(text: str, what: str = "bandwidth") -> float:
    """``"25GB/s"`` -> 2.5e10 bytes/second. ``/s`` is optional; ``100Gbps`` and ``100Gbit/s`` are bits.
    Checked against :data:`BANDWIDTH`."""
    match = re.fullmatch(r"\s*(.*?)(bps|bit/s|/s)?\s*", text, flags=re.IGNORECASE | re.DOTALL)
    quantity, suffix = match.group(1), (match.group(2) or "").lower()
    value, _ = _quantity(quantity, _BYTE_UNITS, what, "a bandwidth", "25GB/s, 900GiB/s or 100Gbps")
    return BANDWIDTH.check(value / 8 if suffix in ("bps", "bit/s") else value, what, quoted(text.strip()))


def parse_seconds(text: str, what: str = "duration") -> float:
    """``"10us"`` -> 1e-05; units s, ms, us (µs), ns; a bare number is seconds. Checked against
    :data:`SECONDS`."""
    value, given = _quantity(text, _SECONDS, what, "a duration", "10us, 1.5ms or 0.002")
    return SECONDS.check(value, what, given)


#: ``--budget P%``: a share of the file order's peak (above 100% is allowed, if pointless).
BUDGET_PERCENT = Range(0, 10**4, low_open=True, noun="a percentage", show=lambda v: f"{v:g}%")
#: ``--max-gap``: a gap 1 − LB/UB, as a fraction or a percentage.
GAP = Range(0, 1, high_open=True, noun="a fraction")
GAP_PERCENT = Range(0, 100, high_open=True, noun="a percentage", show=lambda v: f"{v:g}%")


def parse_percent_or_bytes(text: str, what: str = "--budget") -> tuple[str, float]:
    """``"80%"`` -> ("fraction", 0.8); ``"24MiB"`` -> ("bytes", 25165824.0); ``"min"`` -> ("min", 0.0)."""
    stripped = text.strip()
    if stripped.lower() == "min":
        return "min", 0.0
    if stripped.endswith("%"):
        return "fraction", BUDGET_PERCENT.check(_read_number(stripped[:-1], what), what, quoted(stripped)) / 100.0
    return "bytes", parse_bytes(stripped, what)


def parse_fraction(text: str, what: str = "--max-gap") -> float:
    """``"5%"`` -> 0.05, ``"0.05"`` -> 0.05; checked against :data:`GAP`."""
    stripped = text.strip()
    if stripped.endswith("%"):
        value = GAP_PERCENT.check(_read_number(stripped[:-1], what), what, quoted(stripped)) / 100.0
    else:
        value = parse_number(stripped, what, GAP)
    return float(value)


# ------------------------------------------------------------------------------------- formatting
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


def seconds_unit(value: float) -> tuple[str, float]:
    """The unit :func:`format_seconds` shows ``value`` in, and its size in seconds: 0.00345 -> ``("ms", 1e-3)``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale:
            return unit, scale
    return "ns", 1e-9


def format_seconds(value: float) -> str:
    """0.00345 -> ``"3.45 ms"``."""
    unit, scale = seconds_unit(value)
    return f"{value / scale:.3g} {unit}"


def format_flops(value: float) -> str:
    """3.1e9 -> ``"3.10 GFLOP"``."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("KFLOP", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} FLOP"
