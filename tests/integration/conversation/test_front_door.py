"""Clients reach the conversation service directly: ``start`` looks the project up in the
registry and takes its ``llm`` settings; the whole life of a conversation through the typed client."""

from __future__ import annotations

import pytest

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import Conflict, InvalidInput, NotFound

from ._support import (
    P,
    ScriptLlm,
    ToolsDouble,
    answer,
    conversations,
    follow,
    register_project,
    running_service,
)


async def test_round_trip_through_the_typed_client(bus: Bus, config: Config) -> None:
    root = await register_project(config)
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text('{"llm": {"model": "openai/x", "max_turns": 7}}')
    llm = ScriptLlm(answer("hello from the model"))
    client = conversations(bus)
    async with running_service(config, llm, ToolsDouble()):
        started = await client.start(settings={"temperature": 0.5})
        cid = started.conversation_id
        # the project's settings.json llm section, under the request's own settings
        assert started.settings["model"] == "openai/x" and started.settings["max_turns"] == 7
        assert started.settings["temperature"] == 0.5 and started.project_id == P
        out = await follow(bus, cid)
        info = await client.replay(cid)
        assert info.subject == subjects.conversation_out_filter(P, cid) and info.start_sequence == 1
        sent = await client.send_message(cid, "hi")
        assert sent.id and sent.correlation_id and sent.sequence >= 1
        await out.wait_type("conversation.assistant.message")
        assert llm.requests[0].settings["model"] == "openai/x"
        timeline = (await client.get_projection(cid, "timeline")).value
        assert timeline[0]["id"] == sent.id
        assert {e["correlation_id"] for e in timeline} == {sent.correlation_id}
        with pytest.raises(InvalidInput):
            await client.send_event(cid, "conversation.error", {})
        stopped = await client.stop(cid)
        assert stopped.status == "stopped" and stopped.conversation_id == cid
        with pytest.raises(Conflict):
            await client.send_message(cid, "x")
        # reopening keeps the journal
        reopened = await client.start(cid)
        assert reopened.reopened and reopened.status == "active"
        again = await client.get_projection(cid, "canonical_timeline")
        assert again.value == timeline


async def test_unknown_project_is_not_found(bus: Bus, config: Config) -> None:
    async with running_service(config, ScriptLlm(), ToolsDouble()):
        other = conversations(bus, "other")
        with pytest.raises(NotFound, match="unknown project"):
            await other.start()
        with pytest.raises(NotFound):
            await other.get_projection("c", "timeline")
