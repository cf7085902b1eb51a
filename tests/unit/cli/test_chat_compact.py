"""``/compact`` is one of the chat's own commands and passes its words on as what to keep."""

from __future__ import annotations

from jidocode.cli.chat import BUILTINS, ChatInput, parse_input


def test_compact_is_a_builtin_with_its_arguments() -> None:
    assert "compact" in BUILTINS
    assert parse_input("/compact") == ChatInput("builtin", text="/compact", name="compact")
    typed = parse_input("/compact keep the API names")
    assert (typed.kind, typed.name, typed.arguments) == ("builtin", "compact", "keep the API names")
