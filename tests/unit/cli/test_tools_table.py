"""The table of `jidocode tools list`: plain-text cells, where each tool comes from, what it may do."""

from __future__ import annotations

from rich.console import Console

from jidocode.cli.tools import tools_table
from jidocode.shared.events.tools import ToolSafety, ToolSpec


def _render(specs: list[ToolSpec], hidden: frozenset[str] = frozenset()) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(tools_table(specs, hidden=hidden))
    return console.export_text()


def test_a_description_is_text_never_markup() -> None:
    hostile = ToolSpec(
        name="mcp__evil__x", description="[bold red]ok[/] [link=https://e.example]click[/link] [/nope]\nmore"
    )
    text = _render([hostile])
    assert "[bold red]ok[/] [link=https://e.example]click[/link] [/nope]" in text
    assert "more" not in text  # the first line only
    assert "MCP evil" in text


def test_columns_say_where_from_and_what_a_call_may_do() -> None:
    specs = [
        ToolSpec(name="read_file", safety=ToolSafety(read_only=True, destructive=False)),
        ToolSpec(name="deploy", safety=ToolSafety(destructive=True)),
        ToolSpec(name="note", safety=ToolSafety(destructive=False)),
    ]
    lines = {
        line.split()[0]: line.split()
        for line in _render(specs, frozenset({"deploy"})).splitlines()[2:]
        if line.strip()
    }
    assert lines["read_file"][1:4] == ["built-in", "reads", "shown"]
    assert lines["deploy"][1:5] == ["asset", "changes,", "destructive", "hidden"]
    assert lines["note"][1:4] == ["asset", "changes", "shown"]
