"""A form an approval question may carry (an MCP elicitation's ``requestedSchema``), and its answer.

The MCP specification restricts an elicitation's form to a flat object whose properties are
primitives: ``string`` (optionally ``format`` ``email``, ``uri``, ``date`` or ``date-time``,
``minLength``/``maxLength``), ``number``/``integer`` (``minimum``/``maximum``), ``boolean``, and
string enums (``enum``, or ``oneOf`` of ``{"const", "title"}``), with a ``required`` list.
:func:`form_fields` reads such a schema (anything else is refused: the tool runner then answers
``cancel`` without asking); :func:`check_content` checks an answer's content against it, naming
the field that does not fit; :func:`value_of` turns what a user typed into a field's typed value
(``jidocode chat``'s prompt).

Both sides check: a client before it sends (a clear error at once), the tool runner before it
forwards anything to the server (a client is not trusted to have checked). The form's text
(titles, descriptions, choices) comes from the server: untrusted, shown as text.

Pure functions, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Final
from urllib.parse import urlsplit

from jidocode.shared.errors import InvalidInput

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_FIELDS",
    "MAX_STRING_CHARS",
    "FormField",
    "bounded_content",
    "check_content",
    "form_fields",
    "value_of",
]

#: An answer's content, encoded as JSON, is at most this many bytes.
MAX_CONTENT_BYTES: Final = 16 * 1024
#: A string value is at most this many characters (less when the form says ``maxLength``).
MAX_STRING_CHARS: Final = 4096
#: A form with more fields than this is refused.
MAX_FIELDS: Final = 64

_FORMATS: Final = frozenset({"email", "uri", "date", "date-time"})
_EMAIL: Final = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_TRUE: Final = frozenset({"y", "yes", "true", "1"})
_FALSE: Final = frozenset({"n", "no", "false", "0"})


@dataclass(frozen=True)
class FormField:
    """One field of a form: its name, kind (``string``, ``number``, ``integer``, ``boolean`` or
    ``enum``), the server's title and description, and its bounds."""

    name: str
    kind: str
    required: bool = False
    title: str = ""
    description: str = ""
    choices: tuple[str, ...] = ()
    format: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int = MAX_STRING_CHARS
    default: Any = None


def _number(spec: dict[str, Any], key: str) -> float | None:
    value = spec.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _choices(name: str, spec: dict[str, Any]) -> tuple[str, ...]:
    if "enum" in spec:
        found = spec["enum"]
    else:
        found = [o.get("const") if isinstance(o, dict) else None for o in spec.get("oneOf", [])]
    if not isinstance(found, list) or not found or not all(isinstance(c, str) for c in found):
        raise InvalidInput(f"the form's field {name!r}: its choices are not a list of strings")
    return tuple(found)


def _field(name: str, spec: Any, required: bool) -> FormField:
    if not isinstance(spec, dict):
        raise InvalidInput(f"the form's field {name!r} is not an object")
    kind = spec.get("type")
    if kind == "string" and ("enum" in spec or "oneOf" in spec):
        kind = "enum"
    if kind not in ("string", "number", "integer", "boolean", "enum"):
        raise InvalidInput(f"the form's field {name!r} has type {kind!r}, not a primitive a form allows")
    fmt = spec.get("format")
    if kind == "string" and fmt is not None and fmt not in _FORMATS:
        raise InvalidInput(f"the form's field {name!r} has format {fmt!r}, which a form does not allow")
    max_length = spec.get("maxLength")
    min_length = spec.get("minLength")
    return FormField(
        name=name,
        kind=kind,
        required=required,
        title=str(spec.get("title") or ""),
        description=str(spec.get("description") or ""),
        choices=_choices(name, spec) if kind == "enum" else (),
        format=fmt if kind == "string" else None,
        minimum=_number(spec, "minimum"),
        maximum=_number(spec, "maximum"),
        min_length=min_length if isinstance(min_length, int) else None,
        max_length=min(max_length, MAX_STRING_CHARS) if isinstance(max_length, int) else MAX_STRING_CHARS,
        default=spec.get("default"),
    )


def form_fields(schema: Any) -> list[FormField]:
    """The fields of the form ``schema``, in its order; :class:`InvalidInput` when it is not a
    flat object of primitives (the MCP elicitation form)."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise InvalidInput("the form is not a JSON object schema")
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        raise InvalidInput("the form's properties or required list are malformed")
    if len(props) > MAX_FIELDS:
        raise InvalidInput(f"the form has {len(props)} fields, more than {MAX_FIELDS}")
    unknown = [r for r in required if r not in props]
    if unknown:
        raise InvalidInput(f"the form requires {unknown[0]!r}, which it does not define")
    return [_field(str(name), spec, name in required) for name, spec in props.items()]


def _check_text(field: FormField, value: str) -> str:
    if len(value) > field.max_length:
        raise InvalidInput(f"field {field.name!r}: longer than {field.max_length} characters")
    if field.min_length is not None and len(value) < field.min_length:
        raise InvalidInput(f"field {field.name!r}: shorter than {field.min_length} characters")
    if field.kind == "enum" and value not in field.choices:
        raise InvalidInput(f"field {field.name!r}: {value!r} is not one of {', '.join(field.choices)}")
    if field.format is not None and not _fits_format(field.format, value):
        raise InvalidInput(f"field {field.name!r}: {value!r} is not a valid {field.format}")
    return value


def _fits_format(fmt: str, value: str) -> bool:
    try:
        if fmt == "date":
            date.fromisoformat(value)
        elif fmt == "date-time":
            datetime.fromisoformat(value)
        elif fmt == "uri":
            return bool(urlsplit(value).scheme)
        else:
            return _EMAIL.fullmatch(value) is not None
    except ValueError:
        return False
    return True


def _check_number(field: FormField, value: int | float) -> int | float:
    if not math.isfinite(value):
        raise InvalidInput(f"field {field.name!r}: not a finite number")
    if field.minimum is not None and value < field.minimum:
        raise InvalidInput(f"field {field.name!r}: {value} is below the minimum {field.minimum:g}")
    if field.maximum is not None and value > field.maximum:
        raise InvalidInput(f"field {field.name!r}: {value} is above the maximum {field.maximum:g}")
    return value


def bounded_content(content: dict[str, Any] | None) -> dict[str, Any] | None:
    """``content`` when it is at most :data:`MAX_CONTENT_BYTES` as JSON, else :class:`ValueError`
    (a model's field validator: the answer is refused before it is read)."""
    if content is not None and len(json.dumps(content, default=str).encode()) > MAX_CONTENT_BYTES:
        raise ValueError(f"the answer's content is larger than {MAX_CONTENT_BYTES} bytes")
    return content


def check_value(field: FormField, value: Any) -> Any:
    """``value`` when it fits ``field`` (its type and bounds); else :class:`InvalidInput` naming it."""
    if field.kind == "boolean":
        if not isinstance(value, bool):
            raise InvalidInput(f"field {field.name!r}: expected a boolean, got {type(value).__name__}")
        return value
    if field.kind in ("string", "enum"):
        if not isinstance(value, str):
            raise InvalidInput(f"field {field.name!r}: expected a string, got {type(value).__name__}")
        return _check_text(field, value)
    integral = isinstance(value, int) or (field.kind == "number" and isinstance(value, float))
    if isinstance(value, bool) or not integral:
        wanted = "an integer" if field.kind == "integer" else "a number"
        raise InvalidInput(f"field {field.name!r}: expected {wanted}, got {type(value).__name__}")
    return _check_number(field, value)


def check_content(schema: Any, content: Any) -> dict[str, Any]:
    """``content`` when it answers the form ``schema``: an object of its fields only, every
    required one present, each value of the field's type within its bounds, at most
    :data:`MAX_CONTENT_BYTES` as JSON. Else :class:`InvalidInput` naming what does not fit."""
    if not isinstance(content, dict):
        raise InvalidInput("the answer's content is not an object")
    if len(json.dumps(content, default=str).encode()) > MAX_CONTENT_BYTES:
        raise InvalidInput(f"the answer's content is larger than {MAX_CONTENT_BYTES} bytes")
    fields = {f.name: f for f in form_fields(schema)}
    extra = [name for name in content if name not in fields]
    if extra:
        raise InvalidInput(f"field {extra[0]!r} is not in the form")
    missing = [f.name for f in fields.values() if f.required and f.name not in content]
    if missing:
        raise InvalidInput(f"field {missing[0]!r} is required")
    return {name: check_value(fields[name], value) for name, value in content.items()}


def value_of(field: FormField, text: str) -> Any:
    """What the user typed for ``field`` as its typed value (checked); :class:`InvalidInput`
    naming the field when it is not one. A choice may be typed as its number (1-based)."""
    text = text.strip()
    if field.kind == "boolean":
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise InvalidInput(f"field {field.name!r}: answer yes or no")
    if field.kind == "enum" and text.isdigit() and 1 <= int(text) <= len(field.choices):
        return field.choices[int(text) - 1]
    if field.kind in ("integer", "number"):
        try:
            number: int | float = int(text) if field.kind == "integer" else float(text)
        except ValueError:
            wanted = "an integer" if field.kind == "integer" else "a number"
            raise InvalidInput(f"field {field.name!r}: {text!r} is not {wanted}") from None
        return check_value(field, number)
    return check_value(field, text)
