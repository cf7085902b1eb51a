"""The two places the one server is served: stdio (``jidocode mcp``) and streamable HTTP (the gateway).

:func:`asgi_app` returns the SDK's Starlette app for a server built by
:func:`~jidocode.services.mcp_gateway.build_server`. The HTTP gateway mounts it under
``/projects/<project_id>`` (its route is ``path``, ``/mcp`` by default, so the endpoint is
``/projects/<project_id>/mcp``) behind its own bearer-token auth. A mounted Starlette app's
lifespan does not run by itself: the gateway runs ``server.session_manager.run()`` in its
own lifespan (or serves the app directly, as the tests do, where uvicorn runs it).
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

__all__ = ["asgi_app", "serve_stdio"]


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes stdin.

    While it serves, the SDK points fd 1 at stderr, so nothing but protocol bytes reaches stdout.
    """
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def asgi_app(
    server: Server[Any],
    *,
    path: str = "/mcp",
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
) -> Starlette:
    """The streamable-HTTP ASGI app of ``server`` (one per server: the SDK keeps one session manager).

    ``allowed_hosts``/``allowed_origins`` turn on the SDK's DNS-rebinding protection (the
    ``Host``/``Origin`` values accepted, ``*`` for any port: ``["127.0.0.1:*"]``; a bad
    ``Origin`` is 403, a bad ``Host`` 421). Without them nothing checks either: a host that
    serves this app must check them itself, as the gateway does for every project's server
    (:class:`~.projects.McpProjects`, decision 0305).
    """
    if not path.startswith("/"):
        raise ValueError(f"path must start with '/', got {path!r}")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=allowed_hosts is not None,
        allowed_hosts=list(allowed_hosts or []),
        allowed_origins=list(allowed_origins or []),
    )
    return server.streamable_http_app(streamable_http_path=path, transport_security=security)
