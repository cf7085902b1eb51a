"""``jidocode chat``'s prompt for an approval that carries a form (an MCP server's elicitation).

Once the user says yes, each field is asked in turn: its name, the server's title and
description (untrusted: control characters stripped, markup escaped), what it takes (a number's
bounds, the numbered choices of an enum, yes/no for a boolean), and a typed value comes back
(``jidocode.shared.forms.value_of``). A value that does not fit says why, naming the field, and
the field is asked again; an optional field left empty is left out; Ctrl-D (no answer) denies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from jidocode.client import ApprovalAnswer
from jidocode.shared.errors import InvalidInput
from jidocode.shared.forms import FormField, form_fields, value_of

from .chat_markdown import strip_controls

__all__ = ["field_line", "fill_form"]

#: Reads one line after showing a prompt; ``None`` at the end of input.
ReadLine = Callable[[str], Awaitable[str | None]]
#: A field the user keeps getting wrong is asked this many times, then the form is denied.
MAX_TRIES = 5
#: The server's title or description is cut to this many characters.
_MAX_TEXT = 200


def _text(value: str) -> str:
    return escape(strip_controls(value).replace("\n", " ")[:_MAX_TEXT])


def _takes(field: FormField) -> str:
    if field.kind == "enum":
        return "  ".join(f"{n}) {c}" for n, c in enumerate(field.choices, 1))
    if field.kind == "boolean":
        return "y/n"
    parts = [{"integer": "an integer", "number": "a number"}.get(field.kind, field.format or "text")]
    if field.minimum is not None:
        parts.append(f"≥ {field.minimum:g}")
    if field.maximum is not None:
        parts.append(f"≤ {field.maximum:g}")
    return " ".join(parts)


def field_line(field: FormField) -> str:
    """The field's prompt as rich markup (the server's text escaped): name, title, description,
    what it takes, whether it is required."""
    named = f"[bold]{escape(field.name)}[/]"
    if field.title and field.title != field.name:
        named += f" ({_text(field.title)})"
    about = f" — {_text(field.description)}" if field.description else ""
    need = "" if field.required else ", optional"
    return f"  {named}{about} [dim]({_text(_takes(field))}{need})[/]"


async def _ask_field(field: FormField, read: ReadLine, err: Console) -> tuple[bool, Any]:
    """(answered, value) for ``field``: ``(True, None)`` for an optional field left empty,
    ``(False, None)`` at the end of input or after :data:`MAX_TRIES` wrong values."""
    err.print(field_line(field))
    for _ in range(MAX_TRIES):
        typed = await read("  > ")
        if typed is None:
            return False, None
        if not typed.strip() and not field.required:
            return True, None
        try:
            return True, value_of(field, typed)
        except InvalidInput as exc:
            err.print(f"  [red]{escape(strip_controls(exc.message))}[/]")
    return False, None


async def fill_form(form: dict[str, Any], read: ReadLine, err: Console) -> ApprovalAnswer:
    """The user's values for ``form``, asked field by field: an approve with that content, or
    a denial when the form cannot be asked, the input ends, or a field keeps not fitting."""
    try:
        fields = form_fields(form)
    except InvalidInput as exc:
        err.print(f"  [red]{escape(strip_controls(exc.message))}: denied[/]")
        return ApprovalAnswer(decision="deny")
    content: dict[str, Any] = {}
    for field in fields:
        answered, value = await _ask_field(field, read, err)
        if not answered:
            return ApprovalAnswer(decision="deny")
        if value is not None:
            content[field.name] = value
    return ApprovalAnswer(content=content)
