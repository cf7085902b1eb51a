"""JidoCode as an MCP server: one project's tools, chat, skills and slash commands over MCP.

A library, not a bus service: ``jidocode mcp <dir>`` serves it over stdio, the HTTP
gateway routes ``/projects/{project_id}/mcp`` to :class:`McpProjects` (every project's
server, built on first use), or mounts one server's :func:`asgi_app`. It talks to the
system only through the typed clients of ``shared.clients`` and the client SDK, and
speaks MCP only through the official ``mcp`` SDK. See ``docs/mcp.md``.
"""

from __future__ import annotations

from .projects import MAX_PROJECTS, McpProjects
from .server import DEFAULT_CALL_TIMEOUT_S, SERVER_NAME, build_server
from .transports import asgi_app, serve_stdio

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "MAX_PROJECTS",
    "SERVER_NAME",
    "McpProjects",
    "asgi_app",
    "build_server",
    "serve_stdio",
]
