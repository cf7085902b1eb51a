"""Each scenario of the MCP conformance suite that applies to a server of a project's tools, run with
the official Python SDK's ``Client`` against one project's server over streamable HTTP (the suite's
transport; it runs by hand, see docs/mcp.md "Conformance"). The scenarios that call the suite's own
fixture tools, prompts and resources do not apply; docs/mcp.md lists them and why."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import mcp_types as types
import pytest
import uvicorn
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from jidocode.services.mcp_gateway import asgi_app, build_server
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


@asynccontextmanager
async def _served(system: McpSystem) -> AsyncIterator[str]:
    """The project's server under uvicorn on a random loopback port, checking Host and Origin as
    the gateway does: its URL."""
    server = build_server(system.bus, system.project_id, call_timeout_s=90)
    app = asgi_app(
        server,
        allowed_hosts=["127.0.0.1:*", "localhost:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections made before uvicorn is up wait in the backlog
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        web.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


async def _initialize(url: str, host: str) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream", "Host": host, "Origin": f"http://{host}"}
    async with httpx.AsyncClient() as http:
        return await http.post(url, json=INIT, headers=headers)


async def test_the_applicable_conformance_scenarios(mcp_system: McpSystem) -> None:
    system = mcp_system
    async with _served(system) as url, Client(url, mode="legacy") as client:
        # server-initialize: the handshake, and what the server offers
        caps = client.server_capabilities
        assert caps is not None and caps.tools is not None and caps.prompts is not None
        assert caps.resources is not None and caps.resources.subscribe is True
        assert caps.logging is not None and caps.completions is not None

        # ping, logging-set-level: an empty result each
        with pytest.warns(MCPDeprecationWarning):
            assert await client.send_ping() == types.EmptyResult()
            assert await client.set_logging_level("info") == types.EmptyResult()

        # tools-list: names, input schemas, output schemas when objects
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"read_file", "chat", "cancel"} <= set(tools)
        assert all(t.input_schema.get("type") == "object" for t in tools.values())

        # tools-call-simple-text and tools-call-error, with the project's tools
        ok = await client.call_tool("read_file", {"path": "README.md"})
        assert ok.is_error is False and isinstance(ok.content[0], types.TextContent)
        failed = await client.call_tool("read_file", {"path": "nope.txt"})
        assert failed.is_error is True and failed.structured_content is None
        assert isinstance(failed.content[0], types.TextContent) and "nope.txt" in failed.content[0].text

        # resources-list, prompts-list, completion-complete (on the project's command)
        assert [r.name for r in (await client.list_resources()).resources] == ["notes-reader"]
        assert [p.name for p in (await client.list_prompts()).prompts] == ["review"]
        done = await client.complete(types.PromptReference(name="review"), {"name": "path", "value": "READ"})
        assert done.completion.values == ["README.md"]

        # resources-subscribe, resources-unsubscribe (on a skill)
        with pytest.warns(MCPDeprecationWarning):
            assert await client.subscribe_resource("jidocode://skills/notes-reader") == types.EmptyResult()
            assert await client.unsubscribe_resource("jidocode://skills/notes-reader") == types.EmptyResult()

        # dns-rebinding-protection: another Host is refused, a loopback one served
        port = url.split(":")[2].split("/")[0]
        refused = await _initialize(url, "evil.example.com")
        assert 400 <= refused.status_code < 500
        served = await _initialize(url, f"localhost:{port}")
        assert 200 <= served.status_code < 300, served.text
