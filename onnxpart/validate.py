"""Input files, checked before anything reads them: JSON and YAML parsed within limits, and validated against
their pydantic schemas with one-line errors.

- :func:`parse_json` and :func:`compose_yaml` parse text, refusing a document nested deeper than
  :data:`~onnxpart.units.MAX_DEPTH` (checked before parsing, so no RecursionError) and a YAML document
  whose aliases expand to more than :data:`~onnxpart.units.MAX_YAML_NODES` nodes (a "billion laughs"
  file is refused after reading a few of its lines).
- :class:`Schema` is the base of every input file's schema (the schemas live beside their readers:
  ``costs_io``, ``readers``, ``cost_models.device``, ``schedule.system.system_file``, ``tile.program``);
  :func:`number` makes the field type of a number checked against a :class:`~onnxpart.units.Range` by the
  one numeric parser of :mod:`onnxpart.units`.
- :func:`validate` runs a schema and turns the first pydantic error into one :class:`UserError` naming the
  file, the field path, the YAML line where known, and what was wrong:
  ``costs.json: ops[3].work: must be a duration from 0 s to 1e+15 s, got -1``.
"""

from __future__ import annotations

import contextlib
import json
import re
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError
from pydantic_core import PydanticCustomError

from onnxpart.errors import UserError
from onnxpart.units import MAX_DEPTH, MAX_YAML_NODES, NumberError, Range, quoted

M = TypeVar("M", bound=BaseModel)
Loc = tuple  # a field path: mapping keys (str) and list indices (int)


# --------------------------------------------------------------------------------------------- parsing
_KIND = np.zeros(256, dtype=np.int8)  # per byte: 1 a quote, 2 an opening bracket, 3 a closing one
_KIND[ord('"')] = 1
_KIND[[ord("["), ord("{")]] = 2
_KIND[[ord("]"), ord("}")]] = 3
_ESCAPE = re.compile(r"\\.", re.DOTALL)


def json_too_deep(text: str) -> bool:
    """True when the arrays and objects of JSON ``text`` nest deeper than :data:`MAX_DEPTH`, found without
    recursion and at numpy speed (0.3 s for 22 MB): escapes removed, the quotes and brackets kept, the
    brackets outside strings summed as +1 (``[{``) and −1 (``]}``), the running sum's maximum taken."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    if "\\" in text:
        text = _ESCAPE.sub("", text)
    kind = _KIND[np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)]
    kind = kind[kind != 0]
    quote = kind == 1
    outside = (np.cumsum(quote) & 1) == 0  # an even number of quotes so far
    steps = np.where(quote | ~outside, 0, np.where(kind == 2, 1, -1)).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0)) > MAX_DEPTH


def parse_json(text: str, source: str) -> Any:
    """The JSON document ``text`` (``source`` names it in errors), refused when nested deeper than
    :data:`MAX_DEPTH`. ``NaN``, ``Infinity`` and numbers past the float range read as floats; the
    schemas refuse them, naming the field."""
    if json_too_deep(text):
        raise UserError(f"{source}: nested too deeply: more than {MAX_DEPTH} levels (the limit for input files)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise UserError(f"{source}: not valid JSON: {exc}") from None


def compose_yaml(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of ``text`` (safe schema; None for an empty document), refused when nested
    deeper than :data:`MAX_DEPTH` or when its aliases expand to more than :data:`MAX_YAML_NODES` nodes —
    both checked on the parser's events, before anything is built."""
    with _yaml_errors(source):
        _check_yaml_events(yaml.parse(text, Loader=yaml.SafeLoader), source)
        return yaml.compose(text, Loader=yaml.SafeLoader)


@contextlib.contextmanager
def _yaml_errors(source: str):
    """A YAML error as one line naming ``source`` and the line."""
    try:
        yield
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise UserError(f"{source}: {where}not valid YAML: {getattr(exc, 'problem', None) or exc}") from None


def _check_yaml_events(events, source: str) -> None:
    """Depth and expanded size of a YAML event stream: each alias counts the nodes of its anchor."""
    sizes: dict[str, int] = {}  # anchor -> nodes under it, aliases expanded
    open_sizes: list[list] = []  # per open collection: [nodes so far, anchor]
    expanded = 0
    for event in events:
        if isinstance(event, yaml.CollectionStartEvent):
            open_sizes.append([1, event.anchor])
            if len(open_sizes) > MAX_DEPTH:
                raise UserError(f"{source}: line {event.start_mark.line + 1}: nested too deeply: more than "
                                f"{MAX_DEPTH} levels (the limit for input files)")
            added = 1
        elif isinstance(event, yaml.CollectionEndEvent):
            nodes, anchor = open_sizes.pop()
            if anchor is not None:
                sizes[anchor] = nodes
            if open_sizes:
                open_sizes[-1][0] += nodes
            continue
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            added = sizes.get(event.anchor, 1) if isinstance(event, yaml.AliasEvent) else 1
            if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                sizes[event.anchor] = 1
            if open_sizes:
                open_sizes[-1][0] += added
        else:
            continue
        expanded += added
        if expanded > MAX_YAML_NODES:
            raise UserError(f"{source}: line {event.start_mark.line + 1}: its aliases expand to more than "
                            f"{MAX_YAML_NODES:,} nodes (the limit for input files)")


def load_yaml(text: str, source: str) -> Any:
    """The Python data of YAML ``text`` (safe schema), within the limits of :func:`compose_yaml`."""
    compose_yaml(text, source)
    with _yaml_errors(source):
        return yaml.safe_load(text)


# --------------------------------------------------------------------------------------------- schemas
class Schema(BaseModel):
    """Base of the schemas of onnxpart's own input files: strict types (no ``"3"`` for 3, no 1 for true),
    unknown keys refused (a typo is an error, not a silent default)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class OpenSchema(Schema):
    """A schema for a file other tools write or extend (costs files, graph files, device specs): the keys
    onnxpart does not read are ignored."""

    model_config = ConfigDict(extra="ignore")


class ReadBackSchema(BaseModel):
    """A schema for a file onnxpart wrote and reads back to check it (manifests, sequences, certificates,
    plans): strict types, no NaN or infinity, unknown keys kept (a file may carry more than its checker
    reads)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", populate_by_name=True)


#: a finite number ≥ 0 in a file read back (seconds, bytes, a bound)
NonNegative = Annotated[float, Field(ge=0)]
#: a count or an index in a file read back
Count = Annotated[int, Field(ge=0)]


def number(allowed: Range, parse: Callable[[str, str], float] | None = None) -> Any:
    """The field type of a number checked against ``allowed`` (an int for an integer range, else a
    float): a JSON/YAML number, or with ``parse`` (a unit parser of :mod:`onnxpart.units`, such as
    ``parse_bandwidth``) also text such as ``"16GB/s"``."""
    exact = int if allowed.integer else float
    contains = allowed.contains

    def check(value: Any) -> int | float:
        if contains(value):  # the common case first: input files hold millions of numbers
            return exact(value)
        try:
            if isinstance(value, str) and parse is not None:
                return parse(value, "")
            return allowed.check(value, "")
        except NumberError as exc:
            raise PydanticCustomError("number", "{problem}", {"problem": exc.problem}) from None

    return Annotated[float, PlainValidator(check)]


def identifier(pattern: str, words: str) -> Any:
    """The field type of a name that fully matches ``pattern``; ``words`` says in errors what it must be."""
    compiled = re.compile(pattern)

    def check(value: Any) -> str:
        if isinstance(value, str) and compiled.fullmatch(value):
            return value
        raise PydanticCustomError("name", "must be {words}, got {got}", {"words": words, "got": quoted(value)})

    return Annotated[str, PlainValidator(check)]


def validate(schema: type[M], data: Any, source: str, *, at: Loc = (), lines: Mapping[Loc, int] | None = None) -> M:
    """``data`` as ``schema``; the first problem as one UserError naming ``source``, the field path
    (below ``at``, where ``data`` sits in the file) and, with ``lines`` (field path -> line), the line."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = at + tuple(p for p in error["loc"] if p != "[key]")
        raise located(source, loc, _problem(error, schema, tuple(error["loc"])), lines) from None


def field_path(loc: Loc) -> str:
    """``("ops", 3, "work")`` -> ``ops[3].work``."""
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p)) for n, p in enumerate(loc))


def located(source: str, loc: Loc, problem: str, lines: Mapping[Loc, int] | None = None) -> UserError:
    """The one-line error ``source: path (line N): problem`` for the field at ``loc``."""
    path = field_path(loc)
    line = next((lines[loc[:m]] for m in range(len(loc), -1, -1) if loc[:m] in lines), None) if lines else None
    where = (path or "(top level)") + (f" (line {line})" if line is not None else "")
    return UserError(f"{source}: {where}: {problem}")


def _problem(error: dict, schema: type[BaseModel], loc: Loc) -> str:
    """What a pydantic error says, in the words of onnxpart's messages."""
    kind = error["type"]
    if kind == "number":
        return error["ctx"]["problem"]
    if kind == "missing":
        return "missing"
    if kind in ("model_type", "dict_type"):
        return f"expected a mapping, got {quoted(error['input'])}"
    if kind == "too_short":
        return f"expected at least {error['ctx']['min_length']} entry, got none"
    if kind == "extra_forbidden":
        known = _fields_at(schema, loc[:-1])
        return "unknown key" + (f" (expected {', '.join(known)})" if known else "")
    message = re.sub(r"^(Value error|Assertion failed), ", "", error["msg"])
    if message.startswith("Input should be"):
        return "must be" + message[len("Input should be"):] + f", got {quoted(error['input'])}"
    return message


def _fields_at(schema: Any, loc: Loc) -> list[str]:
    """The keys the schema allows at ``loc`` (by alias), [] where it cannot tell."""
    for part in loc:
        if isinstance(schema, type) and issubclass(schema, BaseModel) and isinstance(part, str):
            field = next((f for name, f in schema.model_fields.items() if (f.alias or name) == part), None)
            schema = field.annotation if field is not None else None
        else:
            args = [a for a in typing.get_args(schema) if a is not type(None)]
            schema = args[-1] if args else None
        while typing.get_origin(schema) in (typing.Union, Annotated) or type(schema).__name__ == "UnionType":
            args = [a for a in typing.get_args(schema) if a is not type(None)]
            schema = args[0] if args else None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return [f.alias or name for name, f in schema.model_fields.items()]
    return []
