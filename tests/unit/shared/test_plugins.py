"""Plugins as tool groups: which plugin a tool is in, and exposure lists naming plugins."""

from __future__ import annotations

import pytest

from jidocode.services.conversation.llm.options import ToolExposure
from jidocode.shared.plugins import covers, plugin_of


@pytest.mark.parametrize(
    ("tool", "plugin"),
    [
        ("read_file", "builtin"),
        ("bash", "builtin"),
        ("run_command", "assets"),
        ("mcp__time__get_current_time", "mcp__time"),
        ("mcp__time", "assets"),  # not a tool of a server: an odd asset name at most
    ],
)
def test_plugin_of(tool: str, plugin: str) -> None:
    assert plugin_of(tool) == plugin


def test_covers_names_and_plugins() -> None:
    assert covers("mcp__time", "mcp__time__get_current_time")
    assert covers("mcp__time__get_current_time", "mcp__time__get_current_time")
    assert not covers("mcp__time", "mcp__timex__a")
    assert covers("builtin", "grep") and not covers("builtin", "mcp__time__x")


def test_a_conversations_exposure_takes_plugin_names() -> None:
    only = ToolExposure(expose=["builtin", "mcp__time"])
    assert only.shown("read_file") and only.shown("mcp__time__convert_time")
    assert not only.shown("mcp__git__git_log") and not only.shown("run_command")
    but = ToolExposure(unexpose=["mcp__git"])
    assert but.shown("read_file") and not but.shown("mcp__git__git_status")
