"""The journal's message format (decision 0322): a step's entries in one message, old journals
still read, a newer format refused, and a retried append recognised as the same write."""

from __future__ import annotations

import json

import pytest

from jidocode.services.conversation.codec import JOURNAL_FORMAT, journal_messages, to_payload
from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.journal import (
    EXPECTED_LAST_SUBJECT_SEQ,
    Journal,
    LostOwnership,
    ensure_streams,
)
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import MSG_ID_HEADER
from jidocode.shared.errors import JidoError

from ._support import (
    P,
    ScriptLlm,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    running_service,
    tool_calls,
)


def _entries(n: int, prefix: str, text: str = "") -> list[Signal]:
    return [
        Signal(
            id=f"{prefix}{i}",
            type="conversation.user.message",
            source="t",
            data={"text": text or str(i)},
            correlation_id=f"{prefix}{i}",
            time="2026-11-28T00:00:00Z",
        )
        for i in range(n)
    ]


async def _messages_on(bus: Bus, conversation_id: str) -> int:
    subject = subjects.journal(P, conversation_id)
    info = await bus.js.stream_info(subjects.STREAM_JOURNAL, subjects_filter=subject)
    return int((info.state.subjects or {}).get(subject, 0))


async def test_one_step_is_one_journal_message(bus: Bus) -> None:
    await ensure_streams(bus, events_max_age_s=60)
    journal = Journal(bus, atomic=True)
    step = _entries(3, "s")
    last = await journal.append_many(P, "one", step, expected_last=0)
    assert await _messages_on(bus, "one") == 1
    raw = json.loads((await bus.js.get_last_msg(subjects.STREAM_JOURNAL, subjects.journal(P, "one"))).data)
    assert raw["format"] == JOURNAL_FORMAT and [e["id"] for e in raw["entries"]] == ["s0", "s1", "s2"]
    read, seq = await journal.read(P, "one")
    assert seq == last and read == step
    assert await journal.last_activity(P, "one") == (last, "2026-11-28T00:00:00Z")


async def test_entries_past_the_payload_limit_take_several_messages_in_order(bus: Bus) -> None:
    await ensure_streams(bus, events_max_age_s=60)
    big = _entries(5, "big", text="x" * 400_000)  # no three fit one message together
    messages = list(journal_messages(big, P, "big"))
    assert len(messages) >= 3
    last = await Journal(bus, atomic=True).append_many(P, "big", big, expected_last=0)
    assert await _messages_on(bus, "big") == len(messages)
    read, seq = await Journal(bus).read(P, "big")
    assert seq == last and [e.id for e in read] == [e.id for e in big]


async def test_a_journal_written_in_the_old_format_is_still_read_and_carried_on(bus: Bus) -> None:
    """Format 1 (one bare CloudEvent a message, as written before) then format 2 on top."""
    await ensure_streams(bus, events_max_age_s=60)
    old = _entries(3, "old")
    subject = subjects.journal(P, "mixed")
    last = 0
    for entry in old:  # exactly what the journal wrote before: to_payload's envelope, fenced
        payload, headers = to_payload(entry, P, "mixed")
        headers[EXPECTED_LAST_SUBJECT_SEQ] = str(last)
        last = int((await bus.js.publish(subject, payload, headers=headers)).seq)
        assert "format" not in json.loads(payload)
    journal = Journal(bus)
    read, seq = await journal.read(P, "mixed")
    assert seq == last and read == old
    new = _entries(2, "new")
    last = await journal.append_many(P, "mixed", new, expected_last=last)
    read, seq = await journal.read(P, "mixed")
    assert seq == last and read == old + new


async def test_a_newer_journal_format_fails_closed_naming_it(bus: Bus) -> None:
    await ensure_streams(bus, events_max_age_s=60)
    payload = json.dumps({"format": JOURNAL_FORMAT + 1, "entries": []}).encode()
    await bus.js.publish(subjects.journal(P, "future"), payload)
    with pytest.raises(JidoError) as raised:
        await Journal(bus).read(P, "future")
    assert raised.value.type == "journal_corrupt"
    assert f"format {JOURNAL_FORMAT + 1}" in raised.value.message


async def test_a_retry_after_a_lost_ack_is_the_same_write_not_a_rival(bus: Bus) -> None:
    """Issue 31 point 7: the first try was stored but its acknowledgement lost; the retry carries
    the same message id and the same (now stale) fence: the journal is ours still."""
    await ensure_streams(bus, events_max_age_s=60)
    journal = Journal(bus)
    first = await journal.append_many(P, "retry", _entries(1, "a"), expected_last=0)
    ((payload, headers),) = journal_messages(_entries(2, "b"), P, "retry")
    stored = await journal.append_message(P, "retry", payload, headers, expected_last=first)
    # the same message again, fenced as the lost attempt was: recognised, not a lost ownership
    again = await journal.append_message(P, "retry", payload, dict(headers), expected_last=first)
    assert again == stored
    read, seq = await journal.read(P, "retry")
    assert seq == stored and [e.id for e in read] == ["a0", "b0", "b1"]
    # a different write on the stale fence is still another owner's: refused
    with pytest.raises(LostOwnership):
        await journal.append_many(P, "retry", _entries(1, "late"), expected_last=first)
    # and so is the same message once the journal has moved past it
    await journal.append_many(P, "retry", _entries(1, "c"), expected_last=stored)
    with pytest.raises(LostOwnership):
        await journal.append_message(P, "retry", payload, dict(headers), expected_last=first)
    assert headers[MSG_ID_HEADER].endswith("+2")


async def test_a_one_tool_turn_journals_one_message_per_step(bus: Bus, config: Config) -> None:
    """The service journals each reducer step as one message: a one-tool turn's entries
    (user message, model request and answer, tool request and result, model request and
    answer, the final message) take fewer messages than entries, and read back whole."""
    llm = ScriptLlm(tool_calls("read_file"), answer("It says hello."))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    async with running_service(config, llm, ToolsDouble()):
        out = await follow(bus, "turn")
        await conversations(bus).start("turn")
        await conversations(bus).send_event("turn", "conversation.user.message", {"text": "read it"})
        [done] = await out.wait_type("conversation.assistant.message", timeout=60)
        assert done.data["text"] == "It says hello."
        timeline = (await conversations(bus).get_projection("turn", "timeline")).value
    entries, _ = await Journal(bus).read(P, "turn")
    assert [e.id for e in entries] == [e["id"] for e in timeline]
    # four steps: the message, the model's tool call, the tool's result, the model's answer
    assert await _messages_on(bus, "turn") == 4 < len(entries)
