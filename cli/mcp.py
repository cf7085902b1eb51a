"""`jidocode mcp <project-dir>`: one project as an MCP server on stdio.

The line an MCP client (Claude Desktop, Claude Code, Cursor) puts in its configuration::

    {"mcpServers": {"myproject": {"command": "jidocode", "args": ["mcp", "/path/to/myproject"]}}}

It connects to the running system (``NATS_URL``, else the one ``jidocode up`` started, as
every command does) and serves the server of ``services/mcp_gateway`` until the client
closes stdin. With no system running it exits at once with a message on stderr saying to
start ``jidocode up`` (decision 0200): it never starts services of its own. stdout carries
protocol bytes only; logs go to stderr (``JIDO_LOG_LEVEL``, WARNING by default).
"""

from __future__ import annotations

import logging
import os

import typer

from jidocode.shared.runner import configure_logging

from .common import cli_bus, resolve_project, run

__all__ = ["mcp"]

log = logging.getLogger("jidocode.cli.mcp")


def mcp(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    data_dir: str = typer.Option(".jido", "--data-dir", help="the project's data dir, relative to its root"),
    call_timeout: float = typer.Option(
        300.0,  # mcp_gateway.DEFAULT_CALL_TIMEOUT_S (not imported here: see main)
        "--call-timeout",
        help="seconds a tools/call may take (a wait for approval included)",
    ),
) -> None:
    """Serve one project over MCP on stdio (for Claude Desktop, Claude Code, Cursor …)."""
    configure_logging(os.environ.get("JIDO_LOG_LEVEL", "WARNING"))

    async def main() -> None:
        async with cli_bus("mcp") as bus:
            # The MCP SDK takes seconds to import: only this command pays, once it found the system.
            from jidocode.services.mcp_gateway import build_server, serve_stdio

            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            log.info("serving project %s (%s) over MCP on stdio", info.project_id, info.root_path)
            await serve_stdio(build_server(bus, info.project_id, call_timeout_s=call_timeout))

    run(main)
