"""`jidocode mcp <dir>` end to end: the official SDK's ``Client`` spawns the command (stdio) against
every service on a real nats-server and the scripted model, as Claude Desktop or Claude Code do
with the configuration line of docs/mcp.md. First a session typed by hand (stdout carries
JSON-RPC only, logs go to stderr), then the SDK's clients: list, call, deny, ask (without and
with elicitation), chat with progress, cancel."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

from jidocode.cli.dev.scripted_llm import Reply
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow


def _server(system: McpSystem) -> StdioServerParameters:
    env = {
        **os.environ,
        "NATS_URL": system.config.nats_url,
        "JIDO_LOG_LEVEL": "INFO",  # logs must reach stderr only, or the protocol breaks
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "jidocode.cli.main", "mcp", str(system.project)], env=env
    )


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _raw_session(system: McpSystem) -> tuple[list[dict[str, Any]], str]:
    """A session typed by hand on the command's stdin: what stdout and stderr carried."""
    params = _server(system)
    proc = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=params.env,
    )
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    assert proc.stdin is not None and proc.stdout is not None
    for message in messages:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
    await proc.stdin.drain()
    lines: list[dict[str, Any]] = []
    async with asyncio.timeout(90):
        while len(lines) < 2:  # the two answers; then stdin closes and the command ends
            lines.append(json.loads(await proc.stdout.readline()))
        proc.stdin.close()
        rest, err = await proc.communicate()
    assert rest == b""
    return lines, err.decode()


async def test_jidocode_mcp_over_stdio(mcp_system: McpSystem) -> None:
    system = mcp_system

    # stdout carries protocol messages only (every line JSON-RPC), even with logs at INFO
    answers, stderr = await _raw_session(system)
    assert [a["id"] for a in answers] == [1, 2] and all(a["jsonrpc"] == "2.0" for a in answers)
    assert answers[0]["result"]["serverInfo"]["name"] == "jidocode"
    assert "read_file" in {t["name"] for t in answers[1]["result"]["tools"]}
    assert "serving project" in stderr
    questions: list[str] = []

    async def approve(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Client(_server(system), read_timeout_seconds=90) as plain:
        names = {t.name for t in (await plain.list_tools()).tools}
        assert {"read_file", "write_file", "bash", "chat", "cancel"} <= names

        read = await plain.call_tool("read_file", {"path": "src/a.py"})
        assert read.is_error is False and read.structured_content is not None
        assert read.structured_content["content"].strip() == "print('a')"
        seen = await system.wait_signal(
            lambda e: e.type == "tool.completed" and e.data.get("name") == "read_file"
        )
        assert str(seen.data["request_id"]).startswith("mcp-")

        denied = await plain.call_tool("bash", {"command": "rm -rf src"})
        assert denied.is_error is True and "Bash(rm:*)" in _text(denied)
        failed = await system.wait_signal(lambda e: e.type == "tool.failed" and e.data.get("name") == "bash")
        assert failed.data["error"]["type"] == "permission_denied"

        asked = await plain.call_tool("write_file", {"path": "ask/x.txt", "content": "after\n"})
        assert asked.is_error is True and "does not support elicitation" in _text(asked)
        assert "Edit(ask/**)" in _text(asked)
        assert (system.project / "ask" / "x.txt").read_text() == "before\n"

        # chat with progress, then cancel a slow turn
        system.llm.script(Reply.answer("Hello over stdio.", chunk_chars=3))
        pieces: list[str] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            pieces.append(message or "")

        chat = await plain.call_tool("chat", {"message": "hi"}, progress_callback=on_progress)
        assert chat.is_error is False, _text(chat)
        assert (
            chat.structured_content is not None and chat.structured_content["answer"] == "Hello over stdio."
        )
        assert len(pieces) >= 2 and "".join(pieces) == "Hello over stdio."

        system.llm.script(Reply.answer("too late", delay_s=60))
        turn = asyncio.create_task(
            plain.call_tool("chat", {"message": "slow", "conversation_id": "stdio-cancel"})
        )
        await system.llm.wait_requests(2, timeout=60)
        cancel = await plain.call_tool("cancel", {"conversation_id": "stdio-cancel"})
        assert cancel.is_error is False, _text(cancel)
        ended = await asyncio.wait_for(turn, 60)
        assert ended.is_error is True and "cancel" in _text(ended)

    async with Client(_server(system), read_timeout_seconds=90, elicitation_callback=approve) as asking:
        approved = await asking.call_tool("write_file", {"path": "ask/x.txt", "content": "after\n"})
        assert approved.is_error is False, _text(approved)
    assert len(questions) == 1 and "Edit(ask/**)" in questions[0]
    assert (system.project / "ask" / "x.txt").read_text() == "after\n"
