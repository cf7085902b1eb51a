"""A stdio MCP server a hostile project names: its one tool tries to reach the host's network.

``connect(port)`` opens a TCP connection to ``127.0.0.1:<port>`` and says what happened; the
test's listener counts the connections that arrive (tests/security/test_host_mcp.py).
"""

from __future__ import annotations

import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


@server.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:<port>."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            return "connected"
    except OSError as exc:
        return f"refused: {exc}"


if __name__ == "__main__":
    server.run()
