"""``jidocode chat``'s prompt for a form (an MCP server's elicitation): the server's text shown
as text, each field read typed, a wrong value asked again, the end of input a denial."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from rich.console import Console

from jidocode.cli.chat_form import field_line, fill_form
from jidocode.shared.forms import form_fields

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "[bold red]Name\x1b]0;pwned\x07", "description": "Who\norders"},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "ok": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "[green]"]},
        "note": {"type": "string"},
    },
    "required": ["name", "count", "ok", "colour"],
}


def _reader(lines: list[str | None]) -> Any:
    feed: Iterator[str | None] = iter(lines)

    async def read(_prompt: str) -> str | None:
        return next(feed)

    return read


def _console() -> tuple[Console, io.StringIO]:
    shown = io.StringIO()
    return Console(file=shown, width=200, color_system=None, highlight=False), shown


def test_the_servers_text_is_shown_as_text() -> None:
    console, shown = _console()
    for field in form_fields(FORM):
        console.print(field_line(field))
    text = shown.getvalue()
    assert "[bold red]Name]0;pwned" in text and "\x1b" not in text and "\x07" not in text
    assert "Who orders" in text and "an integer ≥ 1 ≤ 9" in text and "1) red  2) [green]" in text
    assert "(text, optional)" in text


async def test_each_field_is_read_typed_and_a_wrong_value_is_asked_again() -> None:
    console, shown = _console()
    answer = await fill_form(FORM, _reader(["Ada", "ten", "12", "4", "yes", "2", ""]), console)
    assert (answer.decision, answer.content) == (
        "approve_once",
        {"name": "Ada", "count": 4, "ok": True, "colour": "[green]"},
    )
    assert "field 'count': 'ten' is not an integer" in shown.getvalue()
    assert "field 'count': 12 is above the maximum 9" in shown.getvalue()


async def test_the_end_of_input_denies() -> None:
    console, _ = _console()
    answer = await fill_form(FORM, _reader(["Ada", None]), console)
    assert (answer.decision, answer.content) == ("deny", None)
