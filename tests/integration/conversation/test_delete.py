"""Deleting a conversation takes its record off the disk: journal, stored output and input, records
— and nothing of any other conversation."""

from __future__ import annotations

import pytest

from jidocode.services.conversation import deletion
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import Conflict, NotFound

from ._support import (
    P,
    ScriptLlm,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    running_service,
)


async def _stored(bus: Bus, stream: str, subject: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def _counts(bus: Bus, cid: str) -> tuple[int, int, int]:
    return (
        await _stored(bus, subjects.STREAM_JOURNAL, subjects.journal(P, cid)),
        await _stored(bus, subjects.STREAM_EVENTS, subjects.conversation_out_filter(P, cid)),
        await _stored(bus, subjects.STREAM_CONV_IN, subjects.conversation_in(P, cid)),
    )


async def test_delete_removes_the_conversation_and_only_it(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(answer("first answer"), answer("kept answer"), answer("fresh answer"))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    client = conversations(bus)
    async with running_service(config, llm, ToolsDouble()):
        for cid in ("del-1", "keep-1"):
            out = await follow(bus, cid)
            await client.start(cid)
            await client.send_message(cid, f"hello {cid}")
            await out.wait_type("conversation.assistant.message")
        before = await _counts(bus, "del-1")
        kept = await _counts(bus, "keep-1")
        assert all(before) and all(kept)

        gone = await client.delete("del-1")
        assert (gone.journal_entries, gone.events, gone.inputs) == before
        assert await _counts(bus, "del-1") == (0, 0, 0)
        assert await _counts(bus, "keep-1") == kept  # the other conversation is untouched
        with pytest.raises(NotFound, match="deleted"):
            await client.get_projection("del-1", "timeline")
        with pytest.raises(NotFound):
            await client.send_message("del-1", "anyone?")
        with pytest.raises(NotFound):
            await client.delete("del-1")  # already gone
        # Inside the streams' duplicate window its id cannot start again: the new conversation's
        # first entry ids would repeat the deleted ones and be dropped as duplicates.
        with pytest.raises(Conflict, match="can be started again from"):
            await client.start("del-1")
        assert (await client.get_projection("keep-1", "timeline")).value


async def test_a_deleted_id_starts_afresh_after_the_duplicate_window(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as if the window had passed (no test waits two minutes)
    monkeypatch.setattr(deletion, "REUSE_AFTER_S", -1.0)
    llm = ScriptLlm(answer("old answer"), answer("fresh answer"))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    client = conversations(bus)
    async with running_service(config, llm, ToolsDouble()):
        out = await follow(bus, "del-2")
        await client.start("del-2")
        await client.send_message("del-2", "before")
        await out.wait_type("conversation.assistant.message")
        await client.delete("del-2")
        again = await client.start("del-2")
        assert not again.reopened
