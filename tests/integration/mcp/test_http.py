"""The MCP server over streamable HTTP: ``asgi_app(build_server(...))`` under uvicorn on a random
loopback port, driven by the official SDK's ``Client``, against every service on a real
nats-server and the scripted model. One system for the whole module, one scenario: list, call, deny, ask (with and without elicitation, on
both protocol eras), chat with progress, cancel, skills and commands, the bus; and
``McpProjects``, every project behind the gateway's one route."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import mcp_types as types
import pytest
import uvicorn
from mcp import Client
from mcp.client.session import ClientRequestContext
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.services.mcp_gateway import McpProjects, asgi_app, build_server
from jidocode.shared import subjects
from jidocode.shared.clients import EngineClient
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import Cancel
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow


class Elicitor:
    """An elicitation callback that answers ``approve`` and records the questions."""

    def __init__(self, approve: bool | None) -> None:
        self.approve = approve
        self.questions: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.questions.append(params.message)
        if self.approve is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"approve": self.approve})


@asynccontextmanager
async def _uvicorn(app: Starlette) -> AsyncIterator[str]:
    """``app`` under uvicorn on a random loopback port: its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections made before uvicorn is up wait in the backlog: nothing to poll
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


@asynccontextmanager
async def _serve(system: McpSystem) -> AsyncIterator[str]:
    """One server's app mounted as a host mounts it: under ``/projects/<project_id>``, the host's
    lifespan running the server's session manager."""
    server = build_server(system.bus, system.project_id, call_timeout_s=90)
    inner = asgi_app(server, allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"])

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    host = Starlette(routes=[Mount(f"/projects/{system.project_id}", app=inner)], lifespan=lifespan)
    async with _uvicorn(host) as base:
        yield f"{base}/projects/{system.project_id}/mcp"


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_mcp_over_http(mcp_system: McpSystem, tmp_path: Path) -> None:
    system = mcp_system
    async with _serve(system) as url:
        # -- tools/list: the policy-filtered catalogue, schemas, chat and cancel
        async with Client(url) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert {"read_file", "write_file", "chat", "cancel"} <= set(listed)
            read_file = listed["read_file"]
            assert read_file.input_schema["properties"]["path"]["type"] == "string"
            assert read_file.output_schema is not None and "content" in read_file.output_schema["properties"]
            assert read_file.annotations is not None and read_file.annotations.read_only_hint is True
            assert listed["chat"].input_schema["required"] == ["message"]

            # -- tools/call through the tool runner; visible on the bus like any call
            result = await client.call_tool("read_file", {"path": "README.md"})
            assert result.is_error is False, _text(result)
            assert result.structured_content is not None
            assert result.structured_content["content"].strip() == "hello from the readme"
            done = await system.wait_signal(
                lambda e: e.type == "tool.completed" and e.data.get("name") == "read_file"
            )
            assert str(done.data["request_id"]).startswith("mcp-")
            assert done.data["conversation_id"] is None  # a client without elicitation: no conversation

            # -- a tool failure and a denied call are isError results saying why
            missing = await client.call_tool("read_file", {"path": "nope.txt"})
            assert missing.is_error is True and "read_file failed (" in _text(missing)
            denied = await client.call_tool("bash", {"command": "rm -rf src"})
            assert denied.is_error is True
            assert "permission_denied" in _text(denied) and "Bash(rm:*)" in _text(denied)
            assert (system.project / "src" / "a.py").exists()

            # -- a request the client cancels stops the call on the tool runner
            sleeping = asyncio.create_task(client.call_tool("bash", {"command": "sleep 60"}))
            started = await system.wait_signal(
                lambda e: e.type == "tool.started" and e.data.get("name") == "bash"
            )
            sleeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sleeping
            stopped = await system.wait_signal(
                lambda e: e.type == "tool.failed" and e.data["request_id"] == started.data["request_id"]
            )
            assert stopped.data["error"]["type"] == "cancelled"

            # -- an ask in a client without elicitation: refused at once, naming the rule
            asked = await client.call_tool("write_file", {"path": "ask/x.txt", "content": "after\n"})
            assert asked.is_error is True
            assert "Edit(ask/**)" in _text(asked) and "does not support elicitation" in _text(asked)
            assert (system.project / "ask" / "x.txt").read_text() == "before\n"

            # -- bad arguments of the server's own tools name the field
            bad = await client.call_tool("chat", {"message": "", "conversation_id": "a.b"})
            assert bad.is_error is True
            assert "message" in _text(bad) and "conversation_id" in _text(bad)

            # -- skills as resources, slash commands as prompts
            resources = (await client.list_resources()).resources
            assert [(str(r.uri), r.name) for r in resources] == [
                ("jidocode://skills/notes-reader", "notes-reader")
            ]
            read = await client.read_resource("jidocode://skills/notes-reader")
            [content] = read.contents
            assert isinstance(content, types.TextResourceContents) and content.text.startswith(
                "# Notes reader"
            )
            [prompt] = (await client.list_prompts()).prompts
            assert prompt.name == "review" and prompt.arguments is not None
            assert [(a.name, a.required) for a in prompt.arguments] == [("path", True)]
            rendered = await client.get_prompt("review", {"path": "src/a.py"})
            [message] = rendered.messages
            assert isinstance(message.content, types.TextContent)
            assert message.content.text.startswith("Review src/a.py carefully.")

        # -- an ask with elicitation (2026-07-28: an InputRequiredResult round): approve, then decline
        for approve, expected in ((True, "after\n"), (None, "after\n"), (False, "after\n")):
            elicitor = Elicitor(approve)
            content = "after\n" if approve else "never\n"
            async with Client(url, elicitation_callback=elicitor) as client:
                result = await client.call_tool("write_file", {"path": "ask/x.txt", "content": content})
            assert len(elicitor.questions) == 1 and "write_file" in elicitor.questions[0]
            assert "Edit(ask/**)" in elicitor.questions[0]
            assert result.is_error is (approve is not True), _text(result)
            if approve is not True:
                assert "denied" in _text(result)
            assert (system.project / "ask" / "x.txt").read_text() == expected

        # -- the same over a 2025 connection: a server-to-client elicitation request
        elicitor = Elicitor(True)
        async with Client(url, mode="legacy", elicitation_callback=elicitor) as client:
            result = await client.call_tool("write_file", {"path": "ask/x.txt", "content": "legacy\n"})
        assert result.is_error is False, _text(result)
        assert len(elicitor.questions) == 1
        assert (system.project / "ask" / "x.txt").read_text() == "legacy\n"
        approved = await system.wait_signal(
            lambda e: e.type == "tool.completed" and e.data.get("name") == "write_file"
        )
        assert str(approved.data["conversation_id"]).startswith("mcp-")  # asked in the approvals conversation

        # -- an ask inside a chat turn goes to the same client (2025 connection)
        system.llm.script(
            Reply.tools(call("write_file", path="ask/x.txt", content="from the turn\n")),
            Reply.answer("Written."),
        )
        elicitor = Elicitor(True)
        async with Client(url, mode="legacy", elicitation_callback=elicitor) as client:
            turn_result = await client.call_tool("chat", {"message": "write it"})
        assert turn_result.is_error is False, _text(turn_result)
        assert _text(turn_result) == "Written."
        assert len(elicitor.questions) == 1 and "write_file" in elicitor.questions[0]
        assert (system.project / "ask" / "x.txt").read_text() == "from the turn\n"
        await system.llm.wait_requests(2)

        # -- and on a 2026-07-28 connection, as a round of the chat request
        system.llm.script(
            Reply.tools(call("write_file", path="ask/x.txt", content="modern turn\n")), Reply.answer("Again.")
        )
        elicitor = Elicitor(True)
        async with Client(url, elicitation_callback=elicitor) as client:
            turn_result = await client.call_tool("chat", {"message": "write it again"})
        assert turn_result.is_error is False, _text(turn_result)
        assert _text(turn_result) == "Again."
        assert len(elicitor.questions) == 1 and "write_file" in elicitor.questions[0]
        assert (system.project / "ask" / "x.txt").read_text() == "modern turn\n"
        await system.llm.wait_requests(4)

        # -- chat: progress notifications stream the answer; the answer and the conversation id return
        system.llm.script(Reply.answer("The readme says hello.", chunk_chars=4))
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        async with Client(url) as client:
            chat = await client.call_tool(
                "chat", {"message": "What does the readme say?"}, progress_callback=on_progress
            )
            assert chat.is_error is False, _text(chat)
            assert chat.structured_content is not None
            assert chat.structured_content["answer"] == "The readme says hello."
            conversation_id = chat.structured_content["conversation_id"]
            assert len(progress) >= 2 and [v for v, _ in progress] == sorted(v for v, _ in progress)
            assert "".join(m or "" for _, m in progress) == "The readme says hello."

            # the same conversation again: the model sees the history
            system.llm.script(Reply.answer("Still hello."))
            again = await client.call_tool(
                "chat", {"message": "And now?", "conversation_id": conversation_id}
            )
            assert again.structured_content == {"conversation_id": conversation_id, "answer": "Still hello."}
            last = (await system.llm.wait_requests(6))[-1]
            assert [m["content"] for m in last["messages"] if m["role"] == "user"] == [
                "What does the readme say?",
                "And now?",
            ]

            # -- cancel: a slow turn is cancelled, the chat call returns saying so
            system.llm.script(Reply.answer("too late", delay_s=60))
            turn = asyncio.create_task(
                client.call_tool("chat", {"message": "take your time", "conversation_id": "mcp-cancel-me"})
            )
            await system.llm.wait_requests(7, timeout=60)
            cancelled = await client.call_tool(
                "cancel", {"conversation_id": "mcp-cancel-me", "reason": "test"}
            )
            assert cancelled.is_error is False, _text(cancelled)
            ended = await asyncio.wait_for(turn, 60)
            assert ended.is_error is True and "cancel" in _text(ended)
            assert ended.structured_content is None  # chat's output schema describes an answer
            assert (
                ended.meta is not None and ended.meta["jidocode/error"]["conversation_id"] == "mcp-cancel-me"
            )

            # -- a chat request the client cancels cancels the turn
            system.llm.script(Reply.answer("never heard", delay_s=60))
            out: asyncio.Queue[Envelope] = asyncio.Queue()
            sub = await system.bus.subscribe(
                subjects.conversation_out_filter(system.project_id, "mcp-abandon"), out.put
            )
            abandoned = asyncio.create_task(
                client.call_tool("chat", {"message": "slow", "conversation_id": "mcp-abandon"})
            )
            await system.llm.wait_requests(8, timeout=60)
            abandoned.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await abandoned
            async with asyncio.timeout(60):
                while (await out.get()).type != Cancel.TYPE:
                    pass
            await sub.unsubscribe()

    # -- every project behind one route (the same system, another server)
    await _every_project_behind_one_route(system, tmp_path)


async def _post(url: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        return await http.post(url, json=body, headers={"Accept": "application/json, text/event-stream"})


async def _every_project_behind_one_route(system: McpSystem, tmp_path: Path) -> None:
    """``McpProjects``, as the gateway routes ``/projects/{project_id}/mcp``: a project's server is
    built on first use; an unknown id is 404, a project past ``max_projects`` 503."""
    projects = McpProjects(system.bus, max_projects=1, allowed_hosts=["127.0.0.1:*"])
    app = Starlette(routes=[Route("/projects/{project_id}/mcp", projects, methods=["GET", "POST", "DELETE"])])
    other = tmp_path / "other"
    other.mkdir()
    other_id = (await EngineClient(system.bus, timeout=15).start_project(str(other))).project_id
    async with projects, _uvicorn(app) as base:
        async with Client(f"{base}/projects/{system.project_id}/mcp") as client:
            result = await client.call_tool("read_file", {"path": "README.md"})
            assert result.is_error is False, _text(result)
        assert projects.projects == [system.project_id]

        full = await _post(f"{base}/projects/{other_id}/mcp")
        assert full.status_code == 503 and full.json()["error"]["type"] == "quota_exceeded"
        assert "at most 1" in full.json()["error"]["message"]
        for bogus in ("nope", "a.b"):
            missing = await _post(f"{base}/projects/{bogus}/mcp")
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    assert projects.projects == []
