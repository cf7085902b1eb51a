"""What a line typed at `jidocode chat` is: a built-in, a project slash command, or a message (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.cli.chat import BUILTINS, ChatInput, parse_input
from jidocode.client import is_command_name, parse_slash_command


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", ChatInput("empty")),
        ("   ", ChatInput("empty")),
        ("/usage", ChatInput("builtin", text="/usage", name="usage")),
        (" /quit ", ChatInput("builtin", text="/quit", name="quit")),
        ("/exit", ChatInput("builtin", text="/exit", name="exit")),
        ("/review", ChatInput("command", text="/review", name="review")),
        (
            "/review src/a.py  --deep",
            ChatInput(
                "command", text="/review src/a.py  --deep", name="review", arguments="src/a.py  --deep"
            ),
        ),
        (
            "/fix-bug 12\nmore",
            ChatInput("command", text="/fix-bug 12\nmore", name="fix-bug", arguments="12\nmore"),
        ),
        ("/Review", ChatInput("unknown", text="/Review", name="Review")),
        ("/", ChatInput("unknown", text="/", name="")),
        ("/etc/hosts", ChatInput("unknown", text="/etc/hosts", name="etc/hosts")),
        ("/etc/hosts is empty?", ChatInput("message", text="/etc/hosts is empty?")),
        ("what does /review do?", ChatInput("message", text="what does /review do?")),
        ("hello", ChatInput("message", text="hello")),
    ],
)
def test_lines(line: str, expected: ChatInput) -> None:
    assert parse_input(line) == expected


def test_every_builtin_is_a_valid_name_so_no_project_command_can_shadow_it() -> None:
    assert all(is_command_name(name) for name in BUILTINS)
    assert parse_input("/history now").kind == "builtin"  # arguments of a built-in are ignored


def test_command_names_follow_the_asset_slug_rule() -> None:
    assert is_command_name("a") and is_command_name("a-1") and is_command_name("x" * 64)
    for bad in ("", "A", "a--b", "-a", "a-", "a_b", "a.b", "x" * 65):
        assert not is_command_name(bad), bad


_names = st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}", fullmatch=True)
_args = st.text(max_size=40).filter(lambda t: t.strip() != "")


@given(_names, _args, st.sampled_from([" ", "  ", "\t", "\n"]))
def test_a_command_line_round_trips(name: str, arguments: str, gap: str) -> None:
    parsed = parse_slash_command(f"/{name}{gap}{arguments}")
    assert parsed is not None
    assert (parsed.name, parsed.arguments) == (name, arguments.strip())
    kind = parse_input(f"/{name}{gap}{arguments}").kind
    assert kind == ("builtin" if name in BUILTINS else "command")


@given(st.text(max_size=60))
def test_anything_not_starting_with_a_slash_is_a_message(text: str) -> None:
    typed = parse_input(text)
    if not text.strip():
        assert typed.kind == "empty"
    elif not text.strip().startswith("/"):
        assert typed == ChatInput("message", text=text.strip())
        assert parse_slash_command(text) is None
