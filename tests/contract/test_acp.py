"""`jidocode acp` end to end: the official ACP SDK's client side spawns the command (stdio), as Zed
does with the ``agent_servers`` entry of docs/acp.md, against every service on a real nats-server
and the scripted model: a prompt that reads a file, an edit that asks and is allowed (once, then
always), a cancel, a resumed session, an untrusted folder, and a file sent as the editor has it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.core import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    FileEditToolCallContent,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.shared.trust import untrust_project
from tests.e2e.test_chat import System, llm_server, system

__all__ = ["llm_server", "system"]

pytestmark = pytest.mark.slow

#: Seconds anything may take on a loaded machine.
WAIT = 90.0


class EditorClient:
    """What an editor answers: permission requests with ``choose``, buffers from ``buffers``."""

    def __init__(self, choose: str = "allow_once", buffers: dict[str, str] | None = None) -> None:
        self.choose = choose
        self.buffers = dict(buffers or {})
        self.updates: list[Any] = []
        self.asked: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.reads: list[str] = []
        self.changed = asyncio.Condition()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        async with self.changed:
            self.updates.append(update)
            self.changed.notify_all()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.choose))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content=self.buffers[path])

    async def wait_for(self, found: Callable[[list[Any]], Any]) -> Any:
        """The first truthy ``found(updates)``, waiting for more updates until then."""
        async with asyncio.timeout(WAIT), self.changed:
            while not (value := found(self.updates)):
                await self.changed.wait()
            return value

    def of(self, kind: type[Any]) -> list[Any]:
        return [u for u in self.updates if isinstance(u, kind)]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of(AgentMessageChunk))


@asynccontextmanager
async def acp_agent(
    system: System, editor: EditorClient, *, read_files: bool = False
) -> AsyncIterator[ClientSideConnection]:
    """``jidocode acp`` spawned by the SDK, initialized; its stderr kept in ``system.project/../acp.err``."""
    env = {**os.environ, "NATS_URL": system.config.nats_url, "JIDO_LOG_LEVEL": "INFO"}
    err = os.open(system.project.parent / "acp.err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        async with spawn_agent_process(
            editor,
            sys.executable,
            "-m",
            "jidocode.cli.main",
            "acp",
            env=env,
            transport_kwargs={"stderr": err, "shutdown_timeout": 30.0},
        ) as (conn, process):
            hello = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=read_files)
                    ),
                    client_info=Implementation(name="test-editor", version="1"),
                ),
                WAIT,
            )
            assert hello.agent_capabilities is not None and hello.agent_capabilities.load_session is True
            assert hello.agent_info is not None and hello.agent_info.name == "jidocode"
            yield conn
        assert process.returncode == 0, _stderr(system)
    finally:
        os.close(err)


def _stderr(system: System) -> str:
    return (system.project.parent / "acp.err").read_text(errors="replace")


async def _prompt(conn: ClientSideConnection, session_id: str, text: str) -> str:
    answer = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block(text)]), WAIT)
    return answer.stop_reason


def _ended(editor: EditorClient, tool_call_id: str) -> ToolCallProgress | None:
    ends = [u for u in editor.of(ToolCallProgress) if u.tool_call_id == tool_call_id and u.status]
    return ends[-1] if ends else None


async def test_a_prompt_that_reads_a_file(system: System) -> None:
    (system.project / ".jido" / "commands").mkdir()
    (system.project / ".jido" / "commands" / "review.md").write_text(
        "---\ndescription: Review a file\n---\nReview $ARGUMENTS carefully.\n"
    )
    system.llm.script(
        Reply.tools(call("read_file", path="README.md")),
        Reply.answer("The readme says hello.", chunk_chars=5),
    )
    editor = EditorClient()
    async with acp_agent(system, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        # the project's slash commands are offered
        (commands,) = await editor.wait_for(lambda _: editor.of(AvailableCommandsUpdate))
        review = {c.name: c for c in commands.available_commands}["review"]
        assert review.description == "Review a file"

        assert await _prompt(conn, session.session_id, "What does the readme say?") == "end_turn"
        # the answer streamed in pieces, the read shown as a tool call with its location and result
        chunks = editor.of(AgentMessageChunk)
        assert len(chunks) > 1 and editor.text() == "The readme says hello."
        (read,) = editor.of(ToolCallStart)
        assert read.kind == "read" and read.title == "read_file README.md"
        assert [loc.path for loc in read.locations or []] == [str(system.project / "README.md")]
        ended = await editor.wait_for(lambda _: _ended(editor, read.tool_call_id))
        assert ended.status == "completed"
        assert "hello from the readme" in ended.content[0].content.text
        # the session is the conversation: its id names the user's message in the model's request
        first, _ = await system.llm.wait_requests(2)
        assert first["messages"][-1] == {"role": "user", "content": "What does the readme say?"}
        seen = await system.wait_signal("tool.completed")
        assert seen.conversation_id == session.session_id
    # logs went to stderr (at INFO), never to stdout: the SDK parsed every stdout line above
    assert "session " + session.session_id in _stderr(system)


async def test_an_edit_that_asks_is_allowed_once_then_always(system: System) -> None:
    system.llm.script(
        Reply.tools(call("edit_file", path="ask/x.txt", old_string="before", new_string="after")),
        Reply.answer("Edited once."),
    )
    editor = EditorClient(choose="allow_once")
    async with acp_agent(system, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        assert await _prompt(conn, session.session_id, "Edit x") == "end_turn"
        assert (system.project / "ask" / "x.txt").read_text() == "after\n"
        ((asked, options),) = editor.asked
        assert {o.kind for o in options} == {"allow_once", "allow_always", "reject_once"}
        (diff,) = asked.content or []
        assert isinstance(diff, FileEditToolCallContent)
        assert (diff.path, diff.old_text, diff.new_text) == (
            str(system.project / "ask" / "x.txt"),
            "before",
            "after",
        )
        (start,) = editor.of(ToolCallStart)
        assert start.tool_call_id == asked.tool_call_id and start.kind == "edit"
        ended = await editor.wait_for(lambda _: _ended(editor, start.tool_call_id))
        assert ended.status == "completed"
        statuses = [u.status for u in editor.of(ToolCallProgress) if u.tool_call_id == start.tool_call_id]
        assert statuses == ["in_progress", "completed"]

        # "always": the second write of the same file in this session is not asked again
        editor.choose = "allow_always"
        system.llm.script(
            Reply.tools(call("write_file", path="ask/x.txt", content="one\n")),
            Reply.tools(call("write_file", path="ask/x.txt", content="two\n")),
            Reply.answer("Written twice."),
        )
        assert await _prompt(conn, session.session_id, "Write x twice") == "end_turn"
        assert len(editor.asked) == 2
        assert (system.project / "ask" / "x.txt").read_text() == "two\n"

        # a rejection leaves the file as it is
        editor.choose = "reject_once"
        system.llm.script(
            Reply.tools(call("write_file", path="ask/y.txt", content="no\n")),
            Reply.answer("Not written."),
        )
        assert await _prompt(conn, session.session_id, "Write y") == "end_turn"
        assert len(editor.asked) == 3 and not (system.project / "ask" / "y.txt").exists()


async def test_a_cancel_stops_the_turn_and_the_next_prompt_is_answered(system: System) -> None:
    system.llm.script(Reply.tools(call("bash", command="sleep 60")))
    editor = EditorClient()
    async with acp_agent(system, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        turn = asyncio.create_task(_prompt(conn, session.session_id, "Wait a minute"))
        await system.wait_signal("tool.started", timeout=WAIT)
        await conn.cancel(session_id=session.session_id)
        assert await turn == "cancelled"
        failed = await system.wait_signal("tool.failed", timeout=WAIT)
        assert failed.data["error"]["type"] == "cancelled"
        (start,) = editor.of(ToolCallStart)
        assert start.kind == "execute" and start.title == "bash sleep 60"
        # the conversation goes on: the next prompt is an ordinary one
        system.llm.script(Reply.answer("back"))
        assert await _prompt(conn, session.session_id, "still there?") == "end_turn"
        assert editor.text().endswith("back")


async def test_a_session_is_resumed_by_another_agent_process(system: System) -> None:
    system.llm.script(Reply.answer("one"))
    async with acp_agent(system, EditorClient()) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        assert await _prompt(conn, session.session_id, "first") == "end_turn"

    editor = EditorClient()
    async with acp_agent(system, editor) as conn:
        with pytest.raises(RequestError) as unknown:
            await conn.load_session(cwd=str(system.project), session_id="no-such-conversation")
        assert "no conversation 'no-such-conversation'" in str(unknown.value)

        await asyncio.wait_for(
            conn.load_session(cwd=str(system.project), session_id=session.session_id), WAIT
        )
        # the conversation so far is replayed
        await editor.wait_for(lambda _: editor.of(AgentMessageChunk))
        assert [u.content.text for u in editor.of(UserMessageChunk)] == ["first"]
        assert editor.text() == "one"
        system.llm.script(Reply.answer("two"))
        assert await _prompt(conn, session.session_id, "second") == "end_turn"
        last = system.llm.requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] in ("user", "assistant")] == [
            "first",
            "one",
            "second",
        ]


async def test_an_untrusted_folder_is_said_so_and_read_only(system: System, tmp_path: Path) -> None:
    untrust_project(tmp_path, home=system.config.jido_home)
    system.llm.script(Reply.answer("hi"))
    editor = EditorClient()
    async with acp_agent(system, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        assert await _prompt(conn, session.session_id, "hello") == "end_turn"
    first = editor.of(AgentMessageChunk)[0].content.text
    assert first.startswith("project is untrusted") and "jidocode projects trust" in first
    assert editor.text().endswith("hi")
    (request,) = await system.llm.wait_requests(1)
    offered = {t["function"]["name"] for t in request.get("tools", [])}
    assert not {"edit_file", "write_file", "bash"} & offered  # untrusted: the assistant may not change it
    assert "project is untrusted" in _stderr(system)


async def test_a_linked_file_is_sent_as_the_editor_has_it(system: System) -> None:
    path = str(system.project / "src" / "a.py")
    editor = EditorClient(buffers={path: "print('unsaved')\n"})
    system.llm.script(Reply.answer("seen"))
    async with acp_agent(system, editor, read_files=True) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        blocks = [
            TextContentBlock(type="text", text="What does this print?"),
            ResourceContentBlock(type="resource_link", name="a.py", uri=f"file://{path}"),
            ResourceContentBlock(type="resource_link", name="passwd", uri="file:///etc/passwd"),
        ]
        answer = await asyncio.wait_for(conn.prompt(session_id=session.session_id, prompt=blocks), WAIT)
        assert answer.stop_reason == "end_turn"
    assert editor.reads == [path]  # only a file inside the project is asked for
    (request,) = await system.llm.wait_requests(1)
    sent = request["messages"][-1]["content"]
    assert "print('unsaved')" in sent and "What does this print?" in sent
    assert "@file:///etc/passwd" in sent


async def test_stdout_carries_protocol_messages_only(system: System) -> None:
    """A session typed by hand with logs at INFO: every stdout line is a JSON-RPC message."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NATS_URL": system.config.nats_url, "JIDO_LOG_LEVEL": "DEBUG"},
    )
    hello = {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": str(system.project), "mcpServers": []},
        },
        {"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "relative", "mcpServers": []}},
    ]
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    await proc.stdin.drain()
    lines: list[dict[str, Any]] = []
    async with asyncio.timeout(WAIT):
        # the three answers and the commands update; then stdin closes and the command ends
        while len([m for m in lines if "id" in m]) < 3 or not any("method" in m for m in lines):
            lines.append(json.loads(await proc.stdout.readline()))
        proc.stdin.close()
        rest, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines())
    answers = {m["id"]: m for m in lines if "id" in m}
    assert answers[1]["result"]["agentCapabilities"]["loadSession"] is True
    assert answers[2]["result"]["sessionId"]
    assert answers[3]["error"]["message"] == "cwd must be an absolute path, not 'relative'"
    assert "session " + answers[2]["result"]["sessionId"] in err.decode()


async def test_a_failed_turn_is_an_error_naming_its_cause(system: System) -> None:
    system.llm.script(Reply.error(401))
    async with acp_agent(system, EditorClient()) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        with pytest.raises(RequestError) as failed:
            await _prompt(conn, session.session_id, "hi")
        assert str(failed.value).startswith("llm_auth: ")
        with pytest.raises(RequestError) as unknown:
            await _prompt(conn, "no-such-session", "hi")
        assert "no session 'no-such-session' here" in str(unknown.value)


async def test_rewind_lists_the_messages_then_restores_files_the_editor_allowed(system: System) -> None:
    """``/rewind`` (docs/rewind.md): offered among the commands, lists the user's messages; with a
    number it puts the files' diff to the editor's user and restores only when allowed, keeping
    the file the user changed since; the conversation goes back too."""
    src = system.project / "src"
    system.llm.script(
        Reply.tools(
            call("write_file", path="src/a.py", content="print('agent')\n"),
            call("write_file", path="src/c.py", content="made by the agent\n"),
        ),
        Reply.answer("changed"),
    )
    editor = EditorClient(choose="leave")
    async with acp_agent(system, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(system.project)), WAIT)
        (commands,) = await editor.wait_for(lambda _: editor.of(AvailableCommandsUpdate))
        offered = {c.name: c for c in commands.available_commands}["rewind"]
        assert offered.input is not None and "files|conversation|both" in offered.input.root.hint
        assert await _prompt(conn, session.session_id, "change the *files*") == "end_turn"

        assert await _prompt(conn, session.session_id, "/rewind") == "end_turn"
        assert "1. change the \\*files\\*" in editor.text()  # the message as plain text
        # declined: the diff was asked about, nothing changed
        assert await _prompt(conn, session.session_id, "/rewind 1 both") == "end_turn"
        ((asked, options),) = editor.asked
        assert {o.option_id for o in options} == {"restore", "leave"} and asked.kind == "edit"
        shown = asked.content[0].content.text if asked.content else ""
        assert "restore src/a.py" in shown and "delete src/c.py" in shown
        assert editor.text().endswith("Nothing rewound.")
        assert (src / "a.py").read_text() == "print('agent')\n" and (src / "c.py").exists()

        (src / "b.py").write_text("print('user')\n")  # the user's own change, after the turn
        editor.choose = "restore"
        assert await _prompt(conn, session.session_id, "/rewind 1") == "end_turn"
        assert len(editor.asked) == 2 and "src/b.py (changed since by you: kept)" in (
            editor.asked[1][0].content[0].content.text if editor.asked[1][0].content else ""
        )
        assert "Kept, changed since by you: src/b\\.py" in editor.text()
        assert "Conversation: back before that message" in editor.text()
    assert (src / "a.py").read_text() == "print('a')\n" and not (src / "c.py").exists()
    assert (src / "b.py").read_text() == "print('user')\n"
    assert len(await system.llm.wait_requests(2)) == 2  # /rewind never reached the model
