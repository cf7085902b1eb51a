"""Stopping ends what runs (issue 12 items 1 and 3), on the whole system with a scripted model.

Stopping a conversation, or ``reset_session`` (which stops the old one), cancels
its running tool calls, whose processes end, and its LLM call, as a user's
cancel does; started again, the conversation carries on with its history.
Stopping a project stops its conversations that way; starting its root again
gives back the same project id and its conversations.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.client import ApprovalRequest, TurnFailed
from jidocode.shared.clients import EngineClient
from jidocode.shared.errors import Conflict
from tests.e2e.test_chat import System
from tests.security.sandbox_support import processes_with

pytestmark = pytest.mark.slow

#: Bounds of waits on conditions (a loaded machine); the kill itself is measured and reported.
PATIENCE_S = 20.0


async def _until_alive(marker: str) -> None:
    async def poll() -> None:
        while not processes_with(marker):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    await asyncio.wait_for(poll(), PATIENCE_S)


async def _gone_within(marker: str) -> float:
    """Seconds until no process holds ``marker`` (fails past :data:`PATIENCE_S`)."""
    start = time.monotonic()

    async def poll() -> None:
        while processes_with(marker):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    await asyncio.wait_for(poll(), PATIENCE_S)
    return time.monotonic() - start


async def test_stopping_a_conversation_ends_its_running_tool_and_start_carries_on(system: System) -> None:
    marker = f"59.{os.getpid()}31"
    system.llm.script(Reply.tools(call("bash", command=f"sleep {marker}")))
    client = await system.client()
    cid = await client.start_conversation()
    turn = asyncio.create_task(client.send_message("Wait a minute", timeout=60))
    await system.wait_signal("tool.started")
    await _until_alive(marker)
    info = await client.conversations.stop(cid, reason="user")
    assert info.status == "stopped"
    with pytest.raises(TurnFailed) as failed:
        await asyncio.wait_for(turn, PATIENCE_S)
    assert failed.value.type == "cancelled"
    await _gone_within(marker)
    tool = await system.wait_signal("tool.failed")
    assert tool.data["error"]["type"] == "cancelled"
    # started again: the history is there and it answers (no resume needed)
    reopened = await client.conversations.start(cid)
    assert reopened.reopened and reopened.status == "active"
    system.llm.script(Reply.answer("back again"))
    assert await client.send_message("still there?", timeout=60) == "back again"
    history = [m for m in await client.get_history() if m.get("role") == "user"]
    assert [m["content"] for m in history] == ["Wait a minute", "still there?"]


async def test_reset_session_ends_the_running_tool_and_llm_call(system: System) -> None:
    marker = f"59.{os.getpid()}32"
    system.llm.script(Reply.tools(call("bash", command=f"sleep {marker}")))
    client = await system.client()
    old = client.conversation_id
    turn = asyncio.create_task(client.send_message("Wait a minute", timeout=60))
    await system.wait_signal("tool.started")
    await _until_alive(marker)
    new = await client.reset_session()
    assert new != old
    with pytest.raises(TurnFailed):
        await asyncio.wait_for(turn, PATIENCE_S)
    await _gone_within(marker)

    # an LLM call in flight: the stop cancels it (the turn fails at once, not after the reply)
    # (streamed slowly: a chunk every 0.2 s for 60 s; the server's handler ends when the
    # client is gone, at its next write)
    system.llm.script(Reply.answer("x" * 300, chunk_chars=1, chunk_delay_s=0.2))
    streaming = asyncio.Event()
    turn = asyncio.create_task(
        client.send_message("think slowly", timeout=120, on_delta=lambda _piece: streaming.set())
    )
    await asyncio.wait_for(streaming.wait(), PATIENCE_S)  # the answer is being streamed
    await client.reset_session()
    with pytest.raises(TurnFailed) as failed:
        await asyncio.wait_for(turn, PATIENCE_S)
    assert failed.value.type == "cancelled"


async def test_stopping_the_project_stops_its_conversations_and_starting_it_gives_them_back(
    system: System,
) -> None:
    marker = f"59.{os.getpid()}33"
    system.llm.script(Reply.tools(call("bash", command=f"sleep {marker}")))
    client = await system.client()
    cid = await client.start_conversation()
    project_id = client.project_id
    turn = asyncio.create_task(client.send_message("Wait a minute", timeout=60))
    await system.wait_signal("tool.started")
    await _until_alive(marker)

    engine = EngineClient(system.bus)
    stopped = await engine.stop_project(project_id)
    assert stopped.status == "stopped"
    with pytest.raises(TurnFailed) as failed:
        await asyncio.wait_for(turn, PATIENCE_S)
    assert failed.value.type == "cancelled"
    await _gone_within(marker)
    # a stopped project takes no input and starts no conversation, and says how to go on
    with pytest.raises(Conflict, match="is stopped: start it again"):
        await client.conversations.send_message(cid, "anyone?")
    with pytest.raises(Conflict, match="is stopped"):
        await client.conversations.start("another")
    info = await client.conversations.get_projection(cid, "diagnostics")  # its history stays readable
    assert isinstance(info.value, dict)
    # looking at it from the CLI does not start it again
    code, out, err = await _cli(system, "conversations", "list", str(system.project), "--json")
    assert code == 0 and cid in out, err
    [listed] = (await engine.list_projects()).projects
    assert listed.status == "stopped"

    # started again on the same root: the same id, the conversation with its history, answering
    again = await engine.start_project(str(system.project))
    assert (again.project_id, again.status) == (project_id, "running")
    reopened = await client.conversations.start(cid)
    assert reopened.reopened and reopened.status == "active"
    system.llm.script(Reply.answer("back after the restart"))
    assert await client.send_message("still there?", timeout=60) == "back after the restart"
    users = [m["content"] for m in await client.get_history() if m.get("role") == "user"]
    assert users == ["Wait a minute", "still there?"]


async def _cli(system: System, *args: str) -> tuple[int, str, str]:
    """``jidocode …`` in a process of its own, against this system's NATS."""
    exe = Path(sys.executable).parent / "jidocode"
    env = {
        **os.environ,
        "NATS_URL": system.config.nats_url,
        "JIDO_CODE_HOME": str(system.config.jido_home),
        "COLUMNS": "500",  # no line wrapped in the middle of what the test looks for
    }
    proc = await asyncio.create_subprocess_exec(
        str(exe), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_conversations_list_show_and_stop_on_the_bus_and_the_cli(system: System) -> None:
    system.llm.script(Reply.answer("first answer"))
    client = await system.client()
    busy = await client.start_conversation()
    assert await client.send_message("hello", timeout=60) == "first answer"
    quiet = "never-used"
    await client.conversations.start(quiet)
    await client.conversations.stop(quiet)

    listed = {c.conversation_id: c for c in (await client.conversations.list()).conversations}
    assert set(listed) == {busy, quiet}
    assert listed[busy].status == "active" and listed[busy].owner is not None
    assert listed[busy].owner.startswith("conversation/")  # the replica that runs it
    assert listed[busy].last_activity is not None
    assert (listed[quiet].status, listed[quiet].owner, listed[quiet].last_activity) == ("stopped", None, None)

    code, out, err = await _cli(system, "conversations", "list", str(system.project), "--json")
    assert code == 0, err
    assert {c["conversation_id"]: c["status"] for c in json.loads(out)["conversations"]} == {
        busy: "active",
        quiet: "stopped",
    }
    code, out, err = await _cli(system, "conversations", "show", str(system.project), busy, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["usage"]["calls"] == 1 and shown["usage"]["total_tokens"] > 0
    assert shown["diagnostics"]["status"] == "idle" and shown["owner"] == listed[busy].owner
    code, out, err = await _cli(system, "conversations", "show", str(system.project), "ghost")
    assert code != 0 and "no conversation 'ghost'" in out + err

    code, out, err = await _cli(system, "conversations", "stop", str(system.project), busy)
    assert code == 0 and f"stopped {busy}" in out, err
    after = {c.conversation_id: c for c in (await client.conversations.list()).conversations}
    assert (after[busy].status, after[busy].owner) == ("stopped", None)


async def test_approval_requests_are_journaled_beside_their_answers(system: System) -> None:
    """Issue 12 item 14: the timeline shows the question and the answer, the client is asked once."""
    system.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")),
        Reply.answer("Done asking."),
    )
    asked: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return "approve_once"

    client = await system.client()
    await client.configure_tools(approve=approve)
    assert await client.send_message("Write x", timeout=60) == "Done asking."
    assert len(asked) == 1  # the journaled copy is not published a second time
    cid = client.conversation_id
    assert cid is not None
    timeline = (await client.conversations.get_projection(cid, "timeline")).value
    kinds = [e["type"] for e in timeline]
    requested = [e for e in timeline if e["type"] == "conversation.approval.requested"]
    answered = [e for e in timeline if e["type"] == "conversation.approval.response"]
    assert len(requested) == 1 and len(answered) == 1, kinds
    call_id = next(e["id"] for e in timeline if e["type"] == "conversation.tool.requested")
    assert requested[0]["data"]["request_id"] == answered[0]["data"]["request_id"] == call_id
    assert requested[0]["data"]["tool"] == "write_file" and requested[0]["source"] == "tool_runner/approval"
    assert kinds.index("conversation.approval.requested") < kinds.index("conversation.approval.response")
