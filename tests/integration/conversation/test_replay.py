"""Golden tests of the conversation runtime: record, export, replay (docs/compaction-and-replay.md).

Three conversations are recorded on the whole system (every service, real litellm against the
scripted model): one with tool calls, one with an approval, one cancelled in the middle of a
long bash and resumed. Each is exported (journal, recorded answers, live projections), written
to a file, read back and replayed through the real services of a fresh embedded system against
a model that answers from the recording: every projection comes out the same. A recording
whose answer was changed replays to a difference that names it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.cli.main import app
from jidocode.cli.replay import (
    Recording,
    export_recording,
    read_recording,
    replay_recordings,
    write_recording,
)
from jidocode.client import ApprovalRequest, JidoClient, TurnFailed
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.errors import InvalidInput
from tests.e2e import test_chat
from tests.e2e.test_chat import System

#: The whole-system fixtures of ``test_chat`` (every service, the scripted LLM).
system = test_chat.system
llm_server = test_chat.llm_server

pytestmark = pytest.mark.slow


async def _export(system: System, conversation_id: str, project_id: str, tmp: Path, name: str) -> Recording:
    client = ConversationsClient(system.bus, project_id, timeout=30)
    recording = await export_recording(client, conversation_id, root_path=str(system.project), trusted=True)
    path = tmp / f"{name}.jsonl"
    write_recording(path, recording)
    return read_recording(path)


async def _tool_started(system: System, client: JidoClient) -> None:
    """This conversation's tool started (the signals of the ones before are in the list too)."""

    async def wait() -> None:
        while not any(
            env.type == "tool.started" and env.conversation_id == client.conversation_id
            for env in system.signals
        ):
            await asyncio.sleep(0)  # yield to the subscription callbacks; bounded by wait_for
            await system.bus.nc.flush()

    await asyncio.wait_for(wait(), 60)


async def test_three_recorded_conversations_replay_to_identical_projections(
    system: System, tmp_path: Path
) -> None:
    snapshot = tmp_path / "snapshot"  # the project as it was before the recordings changed it
    shutil.copytree(system.project, snapshot)
    recordings: list[Recording] = []

    # 1. tools: a read, then an answer; a second turn with two reads in one answer
    system.llm.script(
        Reply.tools(call("read_file", path="README.md")),
        Reply.answer("It says hello."),
        Reply.tools(call("read_file", path="src/a.py")),
        Reply.answer("a prints a."),
    )
    tools = await system.client()
    assert await tools.send_message("What does the README say?", timeout=60) == "It says hello."
    assert await tools.send_message("And src/a.py?", timeout=60) == "a prints a."
    assert tools.conversation_id is not None
    recordings.append(await _export(system, tools.conversation_id, tools.project_id, tmp_path, "tools"))

    # 2. an approval (an ``ask`` rule), approved
    system.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")),
        Reply.answer("Written."),
    )
    approvals = await system.client()

    async def approve(request: ApprovalRequest) -> str:
        return "approve_once"

    await approvals.configure_tools(approve=approve)
    assert await approvals.send_message("Write x", timeout=60) == "Written."
    assert (system.project / "ask" / "x.txt").read_text() == "after\n"
    assert approvals.conversation_id is not None
    recordings.append(
        await _export(system, approvals.conversation_id, approvals.project_id, tmp_path, "approvals")
    )

    # 3. cancelled in the middle of a long bash, resumed, asked again
    system.llm.script(Reply.tools(call("bash", command="sleep 60")))
    cancel = await system.client()
    turn = asyncio.create_task(cancel.send_message("Wait a minute", timeout=60))
    await _tool_started(system, cancel)
    await cancel.cancel("user pressed Ctrl-C")
    with pytest.raises(TurnFailed):
        await turn
    await cancel.resume()
    system.llm.script(Reply.answer("back"))
    assert await cancel.send_message("still there?", timeout=60) == "back"
    assert cancel.conversation_id is not None
    recordings.append(await _export(system, cancel.conversation_id, cancel.project_id, tmp_path, "cancel"))

    types = [[e["type"] for e in r.entries] for r in recordings]
    assert types[0].count("conversation.tool.completed") == 2
    assert "conversation.approval.requested" in types[1] and "conversation.approval.response" in types[1]
    assert "conversation.cancel" in types[2] and "conversation.resume" in types[2]

    # a changed answer is found: the first difference names where
    changed = recordings[0].model_copy(
        update={
            "answers": [
                *recordings[0].answers[:1],
                recordings[0].answers[1].model_copy(update={"content": "Bye."}),
                *recordings[0].answers[2:],
            ]
        }
    )
    reports = await replay_recordings([*recordings, changed], project_dirs=[snapshot] * 4, step_timeout=90)
    for report in reports[:3]:
        assert report.same, report.describe()
    assert [r.answers_used for r in reports[:3]] == [len(r.answers) for r in recordings]
    assert not reports[3].same
    assert reports[3].projection == "timeline"
    assert reports[3].replayed == "Bye." and reports[3].recorded == "It says hello."

    # the command: the same replay of a file, exit 0; the changed one, exit 1 naming the difference
    write_recording(tmp_path / "changed.jsonl", changed)
    runner = CliRunner()
    same = await asyncio.to_thread(
        runner.invoke, app, ["replay", str(tmp_path / "tools.jsonl"), "--project", str(snapshot)]
    )
    assert same.exit_code == 0, same.output
    assert "same: every projection matches (18 entries, 4 model answers)" in same.output
    different = await asyncio.to_thread(
        runner.invoke, app, ["replay", str(tmp_path / "changed.jsonl"), "--project", str(snapshot), "--json"]
    )
    assert different.exit_code == 1, different.output
    assert json.loads(different.output)["replayed"] == "Bye."


def test_a_bad_recording_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"kind": "entry", "entry": {}}\n')
    with pytest.raises(InvalidInput, match=r"r\.jsonl:1: a recording starts with its header line"):
        read_recording(path)
    path.write_text('{"kind": "header", "format": "jidocode.conversation-recording", "version": 9}\n')
    with pytest.raises(InvalidInput, match="recording version 9"):
        read_recording(path)
    header = (
        '{"kind": "header", "format": "jidocode.conversation-recording", "version": 1, '
        '"project_id": "p", "conversation_id": "c", "entries": 2, "answers": 0}\n'
    )
    path.write_text(header + '{"kind": "entry", "entry": {"id": "a"}}\n')
    with pytest.raises(InvalidInput, match="announces 2 entries and 0 answers, the file holds 1 and 0"):
        read_recording(path)
    path.write_text(header + "{not json\n")
    with pytest.raises(InvalidInput, match=r"r\.jsonl:2: not JSON"):
        read_recording(path)
