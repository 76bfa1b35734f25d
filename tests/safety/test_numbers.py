"""Numbers that enter onnxpart (issue 26, part 3): the one numeric parser (onnxpart.units) and every
numeric option of every command.

- Property tests: :func:`parse_number` accepts exactly the finite values inside a range (integers exactly,
  however long), the unit parsers round-trip what onnxpart prints, and no text, however odd, makes a
  parser raise anything but a UserError or return a number outside its limit; a file's number fields
  (the pydantic ``number`` type) obey the same rule and name the field.
- The command line: each bad number (past a limit, ``nan``, ``inf``, ``1e400``, a decimal ``2**70``) for
  each command that takes the option, run as a subprocess: exit 2, one ``error:`` line naming the option,
  no traceback, nothing written, inputs untouched (tests/safety/harness.py).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.costs_io import CostsFile
from onnxpart.errors import UserError
from onnxpart.tile.onnx.mesh import parse_mesh
from onnxpart.units import (BANDWIDTH, BATCH, BYTES, DEVICES, GAP, SECONDS, SEED, NumberError, Range, format_bytes,
                            format_seconds, parse_bandwidth, parse_bytes, parse_fraction, parse_number,
                            parse_percent_or_bytes, parse_seconds)
from onnxpart.validate import validate
from tests.safety.harness import DIAMOND, STRATEGY_ARGS, SYSTEM, Guard

TWO_70 = str(2**70)  # 1180591620717411303424, as a user would type 2**70
RANGES = [SECONDS, BYTES, BANDWIDTH, SEED, DEVICES, BATCH, GAP, Range(0.1, 1e7), Range(-5, 5, low_open=True),
          Range(1, 1024, integer=True)]


def in_range(allowed: Range, value: float) -> bool:
    """The definition the parser must implement: finite, between the ends, integral for integer ranges."""
    if not math.isfinite(value) or (allowed.integer and value != math.floor(value)):
        return False
    above_low = value > allowed.low if allowed.low_open else value >= allowed.low
    below_high = value < allowed.high if allowed.high_open else value <= allowed.high
    return above_low and below_high


# ------------------------------------------------------------------------------------ the parser
@given(st.sampled_from(RANGES), st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=200, deadline=None)
def test_parse_number_accepts_exactly_the_finite_values_in_range_and_round_trips(allowed, value):
    text = repr(value)
    if in_range(allowed, value):
        assert parse_number(text, "--x", allowed) == value
    else:
        with pytest.raises(NumberError, match=r"^--x: "):
            parse_number(text, "--x", allowed)


@given(st.sampled_from(RANGES), st.integers(min_value=-2**200, max_value=2**200) | st.integers(-10**4, 10**4))
@settings(max_examples=150, deadline=None)
def test_integers_are_read_exactly_however_long(allowed, value):
    inside = allowed.low <= value <= allowed.high and not (allowed.low_open and value == allowed.low) \
        and not (allowed.high_open and value == allowed.high)
    if inside:
        parsed = parse_number(str(value), "-k", allowed)
        assert parsed == value and (type(parsed) is int) == allowed.integer
    else:
        with pytest.raises(NumberError, match=r"^-k: must be "):
            parse_number(str(value), "-k", allowed)


@given(st.floats(min_value=0, max_value=2**50 / 2**20))
@settings(max_examples=100, deadline=None)
def test_sizes_round_trip(mib):
    assert parse_bytes(f"{mib!r}MiB") == pytest.approx(mib * 2**20, rel=1e-12)
    assert parse_bytes(format_bytes(mib * 2**20)) == pytest.approx(mib * 2**20, rel=0.05, abs=1)


@given(st.floats(min_value=1e-9, max_value=1e15))
@settings(max_examples=100, deadline=None)
def test_durations_and_bandwidths_round_trip(seconds):
    assert parse_seconds(format_seconds(seconds)) == pytest.approx(seconds, rel=5e-3)
    assert parse_seconds(f"{seconds * 1e3!r}ms") == pytest.approx(seconds, rel=1e-12)
    if 1 <= seconds <= 1e18:  # bytes/s; 8 bits each
        assert parse_bandwidth(f"{seconds * 8!r}bps") == pytest.approx(seconds, rel=1e-12)


NUMBERISH = st.from_regex(r"\A\s*[-+]?[0-9.,_eE+-]{0,14}\s*[a-zA-Zµ/%]{0,7}\s*\Z")
PARSERS = {
    "number": lambda text: (parse_number(text, "--x", Range(0, 10)), Range(0, 10)),
    "bytes": lambda text: (parse_bytes(text), BYTES),
    "bandwidth": lambda text: (parse_bandwidth(text), BANDWIDTH),
    "seconds": lambda text: (parse_seconds(text), SECONDS),
    "fraction": lambda text: (parse_fraction(text), GAP),
    "budget": lambda text: (parse_percent_or_bytes(text)[1], Range(0, 2**50)),
    "mesh": lambda text: (math.prod(parse_mesh(text)), DEVICES),
}


@pytest.mark.parametrize("parser", PARSERS)
@given(text=st.text() | NUMBERISH)
@settings(max_examples=150, deadline=None)
def test_any_text_gives_a_number_in_range_or_a_user_error(parser, text):
    try:
        value, allowed = PARSERS[parser](text)
    except UserError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert in_range(allowed, value), (text, value)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                       max_size=3), max_leaves=6)


@given(JSON_VALUES)
@settings(max_examples=150, deadline=None)
def test_a_file_number_is_in_range_or_an_error_naming_its_field(value):
    data = {"ops": [{"name": "a", "work": value, "param_bytes": 1}], "tensors": []}
    try:
        costs = validate(CostsFile, data, "costs.json")
    except UserError as exc:
        assert str(exc).startswith("costs.json: ops[0].work: ") and "\n" not in str(exc)
        return
    assert in_range(SECONDS, costs.ops[0].work)


# ------------------------------------------------------------------------------------ the command line
def case(command: str, option: str, value: str, *extra: str):
    return pytest.param(command, option, value, extra, id=f"{command} {option} {value[:12]}")


#: The options every strategy command shares, each command with a different bad value so that every bad
#: value is seen once and every command once.
KIT = {
    "--time-limit": ["nan", "inf", "1e400", "0"],
    "--seed": [TWO_70, "-1", str(2**31), TWO_70],
    "--workers": [TWO_70, "-1", TWO_70, "100000"],
    "--verify-tol": ["nan", "inf", "-1", "1e400"],
    "--max-gap": ["nan", "100%", "1e400", "-5%"],
    "--external-data-threshold": ["1e400", "2PiB", "nan", "-1GB"],
}
CASES = [case(command, option, values[i]) for option, values in KIT.items()
         for i, command in enumerate(STRATEGY_ARGS)] + [
    case("partition", "-k", TWO_70), case("partition", "-k", "0"),
    case("partition", "--bandwidth", "1e400"), case("partition", "--bandwidth", "inf"),
    case("partition", "--bandwidth", "-5"),
    case("partition", "--stage-memory", "1e400", "--bandwidth", "1GB/s"),
    case("partition", "--population", TWO_70), case("partition", "--generations", "-1"),
    case("partition", "--elite", "nan"), case("partition", "--random-orders", TWO_70),
    case("partition", "--ideal-limit", TWO_70),
    case("remat", "--budget", "nan%"), case("remat", "--budget", "inf%"), case("remat", "--budget", "1e400"),
    case("remat", "--max-recompute", TWO_70), case("remat", "--order-time-limit", "inf"),
    case("schedule", "--batch", TWO_70, "--objective", "throughput"), case("schedule", "--max-pieces", "0"),
    case("schedule", "--iterations", str(10**30)),
    case("tile", "--devices", str(2**40)), case("tile", "--mesh", "2x2x2x2x2x2x2x2x2x2"),
    case("tile", "--mesh", "64x128"), case("tile", "--mesh-latency", "nan"),
    case("tile", "--mesh-bandwidth", "inf"), case("tile", "--device-memory", "1e400"),
    case("annotate", "--runs", str(10**30), "--cost", "measured"), case("annotate", "--batch", TWO_70),
    case("inspect", "--top", TWO_70),
    # issue 40: a dim of 2**70 overflowed protobuf's int64 (a 92-line traceback in every command)
    *[case(command, "--dim", f"batch={TWO_70}") for command in ("inspect", "annotate", *STRATEGY_ARGS)],
    *[case(command, "--input-shape", f"x={TWO_70}x8x16x16") for command in ("inspect", *STRATEGY_ARGS)],
]


def command_line(command: str, option: str, value: str, extra: tuple, out):
    """The command with the least it needs, the bad option last (so it replaces a default such as tile's
    --devices)."""
    if command in STRATEGY_ARGS:
        base = ["--time-limit", "2"] if option in ("--devices", "--mesh") else STRATEGY_ARGS[command]
        return [command, DIAMOND, "-o", out, *base, *extra, option, value]
    if command == "annotate":
        return [command, DIAMOND, "-o", out, *extra, option, value]
    return [command, DIAMOND, *extra, option, value]


@pytest.mark.parametrize("command, option, value, extra", CASES)
def test_a_bad_number_is_one_line_naming_the_option(tmp_path, command, option, value, extra):
    out = tmp_path / ("costs.json" if command == "annotate" else "out")
    guard = Guard(tmp_path / "cwd", (DIAMOND, SYSTEM), out)
    line = guard.refused(*command_line(command, option, value, extra, out), mention=option)
    assert "must be" in line or "cannot read" in line or "limit" in line or "cannot be negative" in line, line
