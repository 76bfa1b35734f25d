"""pydantic v2 schemas for the JSON files onnxpart reads back, and their one-line errors.

A file a user hands in may be anything: a list where an object belongs, ``{}``, a string where a number
belongs, ``NaN`` (which Python's json module accepts), a number where a count belongs. :class:`Schema`
is the strict base every such file's schema derives from — no coercion (``"1"`` is not a number, ``1.0``
is not a count, ``true`` is neither), no NaN or infinity, unknown keys kept (files may carry more than
a checker reads) — and :func:`validate_json` turns the first violation into a :class:`UserError` that
names the file and the field (``out/manifest.json: ops[3].start: Input should be a finite number``).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from onnxpart.errors import UserError

#: a finite number ≥ 0 (seconds, bytes, a bound)
NonNegative = Annotated[float, Field(ge=0)]
#: a count or an index
Count = Annotated[int, Field(ge=0)]


class Schema(BaseModel):
    """Strict, finite, open to extra keys: the base of every schema of a file onnxpart reads back."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", populate_by_name=True)


S = TypeVar("S", bound=Schema)

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def validate_json(schema: type[S], data: Any, where: str) -> S:
    """``data`` (parsed JSON) as ``schema``; a :class:`UserError` naming ``where`` and the first bad field
    (and how many more there are) otherwise."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        if not first["loc"]:
            what = f"must be a JSON object, not {_JSON_TYPES.get(type(data), type(data).__name__)}"
        else:
            what = f"{field_path(first['loc'])}: {first['msg']}"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise UserError(f"{where}: {what}{more}") from None


def field_path(loc: tuple) -> str:
    """``("ops", 3, "start")`` -> ``ops[3].start``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
