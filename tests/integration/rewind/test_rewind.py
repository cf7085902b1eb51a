"""Rewind end to end (issue 30 point 2, docs/rewind.md): every service, real litellm against the
scripted model, the client SDK and the real CLI.

A conversation goes back before one of its user messages and continues from there: the next
model request holds only what came before that message, the journal keeps everything, and a
rewind to an unknown id is refused with a clear error and changes nothing. The rewind is made
with ``/rewind`` in ``jidocode chat`` on a pseudo-terminal. Then files and conversation together: the diff comes first and nothing
changes until it is confirmed; the files go back to the turn's checkpoint byte for byte, but
the one the user changed since, which is named and kept.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.client import JidoClient, rewindable_messages
from jidocode.shared.errors import NotFound
from jidocode.shared.events.tools import CheckpointDiff
from tests.e2e import test_chat
from tests.e2e.test_chat import System
from tests.e2e.test_first_chat import Terminal

#: The whole-system fixtures of ``test_chat`` (every service, the scripted LLM).
system = test_chat.system
llm_server = test_chat.llm_server

pytestmark = pytest.mark.slow

TIMEOUT = 60.0


def _conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's messages without the system prompt, as (role, content)."""
    return [(m["role"], str(m.get("content") or "")) for m in request["messages"] if m["role"] != "system"]


async def _message_ids(client: JidoClient) -> dict[str, str]:
    """The conversation's user messages: text -> entry id."""
    return {m.text: m.id for m in rewindable_messages(await client.get_timeline())}


async def test_a_rewound_conversation_continues_from_before_the_message(system: System) -> None:
    system.llm.script(Reply.answer("one back"), Reply.answer("two back"))
    client = await system.client()
    assert await client.send_message("one", timeout=TIMEOUT) == "one back"
    assert await client.send_message("two", timeout=TIMEOUT) == "two back"
    assert client.conversation_id is not None
    timeline = await client.get_timeline()

    # an unknown id: refused by the service (and by the SDK first), nothing journaled
    with pytest.raises(NotFound, match="not a user message"):
        await client.conversations.rewind(client.conversation_id, "no-such-message")
    with pytest.raises(NotFound, match="not a user message"):
        await client.rewind("no-such-message", what="conversation")
    assert await client.get_timeline() == timeline

    # /rewind in the chat, on a terminal: the list, the choice, then the conversation goes on
    system.llm.script(Reply.answer("three back"))
    await _chat_rewinds_and_goes_on(system, client.conversation_id)

    requests = await system.llm.wait_requests(3)
    assert _conversation(requests[-1]) == [("user", "one"), ("assistant", "one back"), ("user", "three")]
    assert await client.get_history() == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "one back"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "three back"},
    ]
    # nothing left the journal, and the journal replayed gives the same context
    users = [
        e["data"]["text"] for e in await client.get_timeline() if e["type"] == "conversation.user.message"
    ]
    assert users == ["one", "two", "three"]
    assert await client.get_projection("canonical_llm_context") == await client.get_history()

    await _files_and_conversation(system, client)
    await client.close()


async def _chat_rewinds_and_goes_on(system: System, conversation_id: str) -> None:
    env = {**os.environ, "NATS_URL": system.config.nats_url, "COLUMNS": "200", "TERM": "xterm-256color"}
    argv = [sys.executable, "-m", "jidocode.cli.main", "chat", str(system.project), "-r", conversation_id]
    term = Terminal(argv, env)
    at = await term.expect("> ")
    term.type("/rewind")
    at = await term.expect("rewind to before which message?", after=at)
    at = await term.expect("1  one", after=at)
    at = await term.expect("2  two", after=at)
    at = await term.expect("message (1-2, empty to leave): ", after=at)
    term.type("2")
    at = await term.expect("restore [b]oth, [f]iles or [c]onversation? (b): ", after=at)
    term.type("c")
    at = await term.expect("conversation: back before that message (2 context messages dropped", after=at)
    at = await term.expect("> ", after=at)
    term.type("three")
    at = await term.expect("three back", after=at)
    await term.expect("> ", after=at)
    term.type("/quit")
    assert await term.close() == 0


async def _files_and_conversation(system: System, client: JidoClient) -> None:
    """A turn writes two files; the user changes a third; ``both`` shows, asks, restores."""
    src = system.project / "src"
    system.llm.script(
        Reply.tools(
            call("write_file", path="src/a.py", content="print('agent')\n"),
            call("write_file", path="src/c.py", content="made by the agent\n"),
        ),
        Reply.answer("changed"),
    )
    assert await client.send_message("change the files", timeout=TIMEOUT) == "changed"
    history = await client.get_history()
    message = (await _message_ids(client))["change the files"]

    preview = await client.rewind(message, "both")  # no confirmation: the diff, nothing done
    assert not preview.done and preview.diff is not None and preview.conversation is None
    assert (preview.diff.modified, preview.diff.deleted) == (["src/a.py"], ["src/c.py"])
    assert (src / "a.py").read_text() == "print('agent')\n" and await client.get_history() == history
    (src / "b.py").write_text("print('user')\n")  # the user's own change, after the turn

    shown: list[CheckpointDiff] = []

    async def confirm(diff: CheckpointDiff) -> bool:
        shown.append(diff)
        return True

    outcome = await client.rewind(message, "both", confirm=confirm)

    assert outcome.done and [d.changed_by_user for d in shown] == [["src/b.py"]]
    assert (shown[0].modified, shown[0].deleted) == (["src/a.py", "src/b.py"], ["src/c.py"])
    assert outcome.files is not None and outcome.files.kept == ["src/b.py"]
    assert (src / "a.py").read_bytes() == b"print('a')\n" and not (src / "c.py").exists()
    assert (src / "b.py").read_text() == "print('user')\n"
    assert outcome.conversation is not None and outcome.conversation.message_id == message
    assert await client.get_history() == history[: outcome.conversation.kept]
