"""Rewind end to end (issue 30 point 2, docs/rewind.md): every service, real litellm against the
scripted model, the client SDK.

A conversation goes back before one of its user messages and continues from there: the next
model request holds only what came before that message, the journal keeps everything, and a
rewind to a message of another conversation or to an unknown id is refused with a clear error
and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.client import JidoClient, rewindable_messages
from jidocode.shared.errors import NotFound
from tests.e2e import test_chat
from tests.e2e.test_chat import System

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
    system.llm.script(Reply.answer("one back"), Reply.answer("two back"), Reply.answer("elsewhere back"))
    client = await system.client()
    other = await system.client()
    assert await client.send_message("one", timeout=TIMEOUT) == "one back"
    assert await client.send_message("two", timeout=TIMEOUT) == "two back"
    assert await other.send_message("elsewhere", timeout=TIMEOUT) == "elsewhere back"
    ids = await _message_ids(client)
    assert client.conversation_id is not None
    timeline = await client.get_timeline()

    # another conversation's message, an unknown id: refused by the service, nothing journaled
    elsewhere = (await _message_ids(other))["elsewhere"]
    for bad in (elsewhere, "no-such-message"):
        with pytest.raises(NotFound, match="not a user message"):
            await client.conversations.rewind(client.conversation_id, bad)
        with pytest.raises(NotFound, match="not a user message"):
            await client.rewind(bad, what="conversation")
    assert await client.get_timeline() == timeline

    outcome = await client.rewind(ids["two"], what="conversation")

    assert outcome.done and outcome.conversation is not None
    assert (outcome.conversation.message_id, outcome.conversation.text) == (ids["two"], "two")
    assert await client.get_history() == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "one back"},
    ]
    assert [m.text for m in rewindable_messages(await client.get_timeline())] == ["one"]

    system.llm.script(Reply.answer("three back"))
    assert await client.send_message("three", timeout=TIMEOUT) == "three back"
    requests = await system.llm.wait_requests(4)
    assert _conversation(requests[-1]) == [("user", "one"), ("assistant", "one back"), ("user", "three")]
    # nothing left the journal, and the journal replayed gives the same context
    users = [
        e["data"]["text"] for e in await client.get_timeline() if e["type"] == "conversation.user.message"
    ]
    assert users == ["one", "two", "three"]
    assert await client.get_projection("canonical_llm_context") == await client.get_history()
    await other.close()
    await client.close()
