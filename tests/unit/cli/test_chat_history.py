"""chat's /history line: tool-call turns show their calls, not ``None``."""

from __future__ import annotations

from rich.console import Console

from jidocode.cli.chat_lines import history_line


def _render(markup: str) -> str:
    console = Console(width=200, no_color=True)
    with console.capture() as cap:
        console.print(markup)
    return cap.get().strip()


def test_tool_call_turn_shows_calls() -> None:
    line = _render(
        history_line(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    }
                ],
            }
        )
    )
    assert "None" not in line
    assert line.startswith("assistant:")
    assert 'read_file({"path": "a.py"})' in line


def test_text_turn_shows_text() -> None:
    assert _render(history_line({"role": "user", "content": "hi [there]"})) == "user: hi [there]"
