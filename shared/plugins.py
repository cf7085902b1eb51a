"""The plugins of seed 003's registry, as tool groups (pure): which plugin a tool belongs to.

A plugin is a group of the project's tools, named as permission rules name them:

- ``builtin``: the built-in tools (read_file, bash …);
- ``assets``: the tools derived from assets (run_command, run_workflow …);
- ``mcp__<server>``: every tool of one MCP server (``mcp__<server>__<tool>``).

A conversation's ``tools.expose`` / ``tools.unexpose`` lists (what the SDK's
``PluginRegistry.expose_tool`` / ``unexpose_tool`` write) hold plugin names or tool names:
:func:`covers` says whether an entry covers a tool.
"""

from __future__ import annotations

from functools import cache
from typing import Final

from jidocode.shared.tools import builtin_specs

__all__ = ["ASSETS", "BUILTIN", "MCP_PREFIX", "covers", "plugin_of"]

BUILTIN: Final = "builtin"
ASSETS: Final = "assets"
MCP_PREFIX: Final = "mcp__"


@cache
def _builtins() -> frozenset[str]:
    return frozenset(str(s["name"]) for s in builtin_specs())


def plugin_of(tool: str) -> str:
    """The plugin of ``tool``: ``mcp__<server>``, ``builtin`` or ``assets``."""
    if tool.startswith(MCP_PREFIX):
        server, sep, rest = tool[len(MCP_PREFIX) :].partition("__")
        if server and sep and rest:
            return MCP_PREFIX + server
    return BUILTIN if tool in _builtins() else ASSETS


def covers(entry: str, tool: str) -> bool:
    """Whether ``entry`` (a tool name or a plugin name) covers ``tool``."""
    return entry == tool or entry == plugin_of(tool)
