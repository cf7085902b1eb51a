"""MCP events: the MCP servers of a project as the tool runner sees them (seed 003 ``MCPToolPlugin``).

The tools themselves join the tool catalogue (``tools.mcp_tools``, ``ToolCatalog``) as
``mcp__<server>__<tool>``; this is the state of each server, for the plugin registry.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import Command, EventModel

__all__ = ["EVENTS", "ListMcpServers", "McpServerInfo", "McpServerList"]


class McpServerInfo(BaseModel):
    """One configured MCP server of a project, on the replica that answered."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    #: ``global`` (the user's ``.mcp.json``) or ``project`` (the project root's).
    layer: str
    #: ``stdio`` or ``http`` (empty for a server not started because the project is untrusted).
    transport: str = ""
    #: ``idle`` (not used yet), ``starting``, ``ready``, ``crashed``, ``closed``, ``untrusted`` or
    #: ``awaiting_approval`` (a project's HTTP server whose URL the user has not approved).
    state: str
    #: Its tools in the catalogue's names (``mcp__<server>__<tool>``), once it started.
    tools: list[str] = Field(default_factory=list)
    #: Why it is not running, when it is not.
    error: str = ""


class McpServerList(EventModel):
    """Reply of ``jido.tools.<p>.mcp_servers``."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.mcp_servers"] = "tool.mcp_servers"
    servers: list[McpServerInfo] = Field(default_factory=list)
    #: Problems of the ``.mcp.json`` files (a bad file or entry, named with its field).
    problems: list[str] = Field(default_factory=list)


class ListMcpServers(Command[McpServerList]):
    """Request body of ``jido.tools.<p>.mcp_servers``: the project's MCP servers (starts none)."""

    type: Literal["tool.list_mcp_servers"] = "tool.list_mcp_servers"


EVENTS: tuple[type[EventModel], ...] = (McpServerList, ListMcpServers)
