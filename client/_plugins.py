"""Seed 003's plugin registry over the bus: ``discover``, ``expose_tool``, ``unexpose_tool``,
``call_mcp_tool``.

A plugin is a group of the project's tools (:mod:`jidocode.shared.plugins`): ``builtin``,
``assets`` and one ``mcp__<server>`` per MCP server. ``discover()`` asks the project service
for the policy-filtered catalogue and the tool runner for its MCP servers' state;
``expose_tool`` / ``unexpose_tool`` change which plugins (or single tools) the model of this
client's conversation is shown — the conversation's ``tools`` settings, applied from its next
model call. The policy still decides every call: exposing never allows anything.

::

    registry = client.plugins
    for plugin in await registry.discover():
        print(plugin.name, plugin.kind, plugin.state, len(plugin.tools))
    await registry.unexpose_tool("mcp__git")     # every tool but the git server's
    await registry.expose_tool("builtin")        # only the built-ins (and what else is exposed)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient, ToolsClient
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from jidocode.shared.plugins import ASSETS, BUILTIN, MCP_PREFIX, plugin_of

__all__ = ["Plugin", "PluginRegistry"]

#: How long ``discover`` waits (its first listing starts the project's MCP servers).
DISCOVER_TIMEOUT_S: Final = 30.0
_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")


class Plugin(BaseModel):
    """One plugin of the project, and whether this client's conversation is shown its tools."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["builtin", "assets", "mcp"]
    #: Its tools the policy shows (for an MCP server not started yet: none).
    tools: list[str] = Field(default_factory=list)
    #: ``ready`` for built-ins and assets; an MCP server's state (``idle``, ``starting``,
    #: ``ready``, ``crashed``, ``closed``, ``untrusted``, ``awaiting_approval``).
    state: str = "ready"
    #: An MCP server's layer (``global`` or ``project``).
    layer: str = ""
    error: str = ""
    exposed: bool = True


class _Client(Protocol):
    """What the registry needs of :class:`~jidocode.client.JidoClient`."""

    bus: Bus
    project_id: str
    conversation_id: str | None

    @property
    def tool_exposure(self) -> tuple[list[str], list[str]]: ...

    async def configure_tools(
        self, expose: Sequence[str] | None = None, unexpose: Sequence[str] | None = None
    ) -> None: ...


def _check(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"invalid plugin or tool name {name!r} (builtin, assets, mcp__<server>, or a tool's name)",
            details={"name": name},
        )
    return name


class PluginRegistry:
    """The plugins of one client's project, exposed or not in its conversation."""

    def __init__(self, client: _Client) -> None:
        self.client = client

    def _exposed(self, name: str) -> bool:
        expose, unexpose = self.client.tool_exposure
        return (not expose or name in expose) and name not in unexpose

    async def discover(self) -> list[Plugin]:
        """Every plugin: the built-ins, the asset tools (when there are any), each MCP server."""
        bus, pid = self.client.bus, self.client.project_id
        catalog = await ProjectClient(bus, pid, timeout=DISCOVER_TIMEOUT_S).list_tools()
        groups: dict[str, list[str]] = {}
        for spec in catalog.tools:
            groups.setdefault(plugin_of(spec.name), []).append(spec.name)
        plugins = [
            Plugin(
                name=BUILTIN, kind="builtin", tools=groups.get(BUILTIN, []), exposed=self._exposed(BUILTIN)
            )
        ]
        if groups.get(ASSETS):
            plugins.append(
                Plugin(name=ASSETS, kind="assets", tools=groups[ASSETS], exposed=self._exposed(ASSETS))
            )
        try:
            servers = (await ToolsClient(bus, pid, timeout=DISCOVER_TIMEOUT_S).mcp_servers()).servers
        except JidoError:
            servers = []  # no tool runner answers: the catalogue's MCP tools still show
        seen = set()
        for server in servers:
            name = MCP_PREFIX + server.name
            seen.add(name)
            plugins.append(
                Plugin(
                    name=name,
                    kind="mcp",
                    tools=groups.get(name, []),
                    state=server.state,
                    layer=server.layer,
                    error=server.error,
                    exposed=self._exposed(name),
                )
            )
        for name, tools in sorted(groups.items()):
            if name.startswith(MCP_PREFIX) and name not in seen:
                plugins.append(Plugin(name=name, kind="mcp", tools=tools, exposed=self._exposed(name)))
        return plugins

    async def expose_tool(self, name: str) -> None:
        """Show the model ``name`` (a plugin or a tool); once anything is exposed this way, only
        what is exposed is shown."""
        expose, unexpose = self.client.tool_exposure
        _check(name)
        await self.client.configure_tools(
            expose=[*[e for e in expose if e != name], name], unexpose=[u for u in unexpose if u != name]
        )

    async def unexpose_tool(self, name: str) -> None:
        """Stop showing the model ``name`` (a plugin or a tool)."""
        expose, unexpose = self.client.tool_exposure
        _check(name)
        await self.client.configure_tools(
            expose=[e for e in expose if e != name], unexpose=[*[u for u in unexpose if u != name], name]
        )

    async def call_mcp_tool(
        self, server: str, tool: str, args: dict[str, Any] | None = None, *, timeout: float = 120.0
    ) -> ToolResult:
        """Seed 003's ``call_mcp_tool``: run tool ``tool`` of MCP server ``server`` through the tool
        runner, under the project's policy, as a call of this client's conversation (an ``ask``
        goes to it; without a conversation an ``ask`` is refused)."""
        _check(server)
        _check(tool)
        meta = ToolCallMeta(request_id=new_id().lower(), conversation_id=self.client.conversation_id)
        tools = ToolsClient(self.client.bus, self.client.project_id)
        return await tools.run(f"{MCP_PREFIX}{server}__{tool}", args or {}, meta=meta, timeout=timeout)
