"""`/help` in `jidocode chat`: the built-in commands, then the project's, shown as text."""

from __future__ import annotations

import io

from rich.console import Console

from jidocode.cli.chat_lines import BUILTIN_HELP, BUILTINS, ChatInput, help_lines, parse_input


def _shown(lines: list[str]) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None)
    for line in lines:
        console.print(line)
    return buffer.getvalue()


def test_help_is_a_builtin_and_every_builtin_is_listed() -> None:
    assert parse_input("/help") == ChatInput("builtin", text="/help", name="help")
    listed = {name.split()[0].lstrip("/") for name, _ in BUILTIN_HELP}
    assert listed == set(BUILTINS) - {"exit"}


def test_project_commands_are_listed_as_text() -> None:
    shown = _shown(
        help_lines(
            [
                {
                    "name": "review",
                    "description": "Review the [bold]staged[/] changes\x1b[2J",
                    "layer": "project",
                },
                {"name": "help", "description": "a project help", "layer": "claude"},
            ]
        )
    )
    assert "built-in commands" in shown and "/compact [what to keep]" in shown
    assert "/review" in shown and "Review the [bold]staged[/] changes[2J" in shown and "\x1b" not in shown
    assert "[project]" in shown
    assert "(shadowed by the built-in)" in shown


def test_no_project_commands_or_none_available() -> None:
    assert "add .jido/commands/<name>.md or .claude/commands/<name>.md" in _shown(help_lines([]))
    assert "the project's commands are unavailable right now" in _shown(help_lines(None))
