"""`jidocode mcp <dir>` offers MCP logging and completions, driven by the official Python SDK's ``Client``
over stdio against every service on a real nats-server and the scripted model.

Subscriptions: a skill subscribed to tells when it changes on disk.

Logging: a ``chat`` turn's conversation events arrive as log messages at the client's level
(``logging/setLevel`` on a 2025 connection, the request's ``_meta`` opt-in on a 2026-07-28 one),
none before the client asks. Completions: a slash command's path argument completes to the
project's paths (through the tool runner's ``list_dir``), the skills' template to skill names."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from jidocode.cli.dev.scripted_llm import Reply, call
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow

SEVERITY = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


def _server(system: McpSystem) -> StdioServerParameters:
    env = {**os.environ, "NATS_URL": system.config.nats_url}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "jidocode.cli.main", "mcp", str(system.project)], env=env
    )


class Logs:
    """A logging callback that keeps what arrived."""

    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)

    def types(self) -> list[str]:
        return [str(m.data["type"]) for m in self.messages if isinstance(m.data, dict)]

    def take(self) -> list[types.LoggingMessageNotificationParams]:
        taken, self.messages = self.messages, []
        return taken


def _script_turn(system: McpSystem, answer: str) -> None:
    system.llm.script(Reply.tools(call("read_file", path="README.md")), Reply.answer(answer))


async def test_a_chat_turns_events_arrive_as_logs_at_the_clients_level(mcp_system: McpSystem) -> None:
    system = mcp_system
    logs = Logs()
    async with Client(
        _server(system), read_timeout_seconds=90, mode="legacy", logging_callback=logs
    ) as client:
        assert client.server_capabilities is not None and client.server_capabilities.logging is not None

        _script_turn(system, "Quiet.")  # no level set yet: nothing is sent
        quiet = await client.call_tool("chat", {"message": "read it"})
        assert quiet.is_error is False and logs.take() == []

        with pytest.warns(MCPDeprecationWarning):  # deprecated by 2026-07-28, alive on 2025 connections
            await client.set_logging_level("info")
        _script_turn(system, "Read.")
        chat = await client.call_tool("chat", {"message": "read it again"})
        assert chat.is_error is False
        received = logs.take()
        assert received and {m.logger for m in received} == {"jidocode.conversation"}
        assert all(SEVERITY.index(m.level) >= SEVERITY.index("info") for m in received)
        seen = [str(m.data["type"]) for m in received if isinstance(m.data, dict)]
        assert "conversation.tool.completed" in seen and "conversation.assistant.delta" not in seen
        [completed] = [
            m for m in received if isinstance(m.data, dict) and m.data["type"].endswith("tool.completed")
        ]
        assert isinstance(completed.data, dict) and "hello from the readme" in str(completed.data["data"])

        with pytest.warns(MCPDeprecationWarning):
            await client.set_logging_level("warning")
        system.llm.script(Reply.tools(call("read_file", path="nope.txt")), Reply.answer("Missing."))
        missing = await client.call_tool("chat", {"message": "read the missing one"})
        assert missing.is_error is False
        warned = [(m.level, m.data["type"]) for m in logs.take() if isinstance(m.data, dict)]
        assert warned == [("warning", "conversation.tool.failed")]  # the info ones stay home

    # a 2026-07-28 connection: each request opts in with the reserved _meta key (Client(log_level=...))
    modern, silent = Logs(), Logs()
    async with Client(_server(system), read_timeout_seconds=90, logging_callback=silent) as client:
        _script_turn(system, "Not asked.")  # no opt-in on the request: nothing is sent
        assert (await client.call_tool("chat", {"message": "hello"})).is_error is False
    assert silent.messages == []
    async with Client(
        _server(system), read_timeout_seconds=90, logging_callback=modern, log_level="debug"
    ) as client:
        _script_turn(system, "Modern.")
        chat = await client.call_tool("chat", {"message": "and now"})
        assert chat.is_error is False
    assert {"conversation.user.message", "conversation.llm.requested", "conversation.tool.completed"} <= set(
        modern.types()
    )
    assert "debug" in {m.level for m in modern.messages}


async def test_command_arguments_and_skill_names_complete(mcp_system: McpSystem) -> None:
    system = mcp_system
    async with Client(_server(system), read_timeout_seconds=90) as client:
        assert client.server_capabilities is not None and client.server_capabilities.completions is not None
        review = types.PromptReference(name="review")  # its argument `path`: "the file to review"

        async def values(
            ref: types.PromptReference | types.ResourceTemplateReference, name: str, value: str
        ) -> list[str]:
            return (await client.complete(ref, {"name": name, "value": value})).completion.values

        top = await values(review, "path", "")
        assert {"README.md", "src/", "ask/"} <= set(top) and ".jido/" not in top  # hidden only when asked
        assert await values(review, "path", "sr") == ["src/"]
        assert await values(review, "path", "src/") == ["src/a.py"]
        assert await values(review, "path", ".ji") == [".jido/"]
        assert await values(review, "path", "nowhere/x") == []  # no such directory: nothing to offer
        assert await values(review, "path", "../") == []  # outside the project: the runner refuses

        [template] = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == "jidocode://skills/{name}"
        skills = types.ResourceTemplateReference(uri=template.uri_template)
        assert await values(skills, "name", "no") == ["notes-reader"]
        assert await values(skills, "name", "x") == []

        with pytest.raises(MCPError, match="no prompt named 'nope'"):
            await values(types.PromptReference(name="nope"), "path", "")
        with pytest.raises(MCPError, match="has no argument 'file'"):
            await values(review, "file", "")


def _updates() -> tuple[asyncio.Queue[str], Callable[[Any], Awaitable[None]]]:
    """A message handler that keeps the URIs of ``notifications/resources/updated``."""
    queue: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            queue.put_nowait(str(message.params.uri))

    return queue, on_message


async def test_a_subscribed_skill_tells_when_it_changes(mcp_system: McpSystem) -> None:
    system = mcp_system
    uri = "jidocode://skills/notes-reader"
    left, on_left = _updates()
    stayed, on_stayed = _updates()
    async with (
        Client(_server(system), read_timeout_seconds=90, mode="legacy", message_handler=on_left) as leaving,
        Client(_server(system), read_timeout_seconds=90, mode="legacy", message_handler=on_stayed) as staying,
    ):
        assert staying.server_capabilities is not None and staying.server_capabilities.resources is not None
        assert staying.server_capabilities.resources.subscribe is True
        with pytest.warns(
            MCPDeprecationWarning
        ):  # 2025 connections only: 2026-07-28 has subscriptions/listen
            await leaving.subscribe_resource(uri)
            await staying.subscribe_resource(uri)
            await leaving.unsubscribe_resource(uri)
            with pytest.raises(MCPError, match="no skill 'nope'") as missing:
                await staying.subscribe_resource("jidocode://skills/nope")
            assert missing.value.error.code == -32002
            with pytest.raises(MCPError, match="cannot subscribe to 'file:///etc/passwd'"):
                await staying.subscribe_resource("file:///etc/passwd")

        skill = system.project / ".jido" / "skills" / "notes-reader" / "SKILL.md"
        skill.write_text(skill.read_text().replace("Reads notes.", "Reads notes, newer."))
        assert await asyncio.wait_for(stayed.get(), 60) == uri  # the watcher saw it, the assets reloaded
        [content] = (await staying.read_resource(uri)).contents
        assert isinstance(content, types.TextResourceContents) and "Reads notes, newer." in content.text

        with pytest.warns(MCPDeprecationWarning):
            await leaving.send_ping()  # a round trip: a notification sent before it has arrived
        assert left.empty()
