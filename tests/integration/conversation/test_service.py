"""The conversation service on a real NATS server: the canonical loop, input contract, projections."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, encode, new_id
from jidocode.shared.errors import InvalidInput, NotFound, PayloadTooLarge
from jidocode.shared.events.conversation import ConversationInfo, EventAccepted

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


async def _start(bus: Bus, cid: str, **settings: object) -> ConversationInfo:
    return await conversations(bus).start(cid, settings=dict(settings))


async def _send(bus: Bus, cid: str, type_: str, data: dict[str, object]) -> EventAccepted:
    return await conversations(bus).send_event(cid, type_, data)


async def _projection(bus: Bus, cid: str, name: str) -> object:
    projection = await conversations(bus).get_projection(cid, name)
    assert projection.conversation_id == cid and projection.name == name
    return projection.value


async def test_full_loop_with_parallel_tool_calls(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(tool_calls("read_file", "grep"), answer("All done here."))
    tools = ToolsDouble()
    await answer_list_tools(bus, [LlmToolSpec(name="read_file"), LlmToolSpec(name="grep")])
    async with running_service(config, llm, tools):
        out = await follow(bus, "c1")
        started = await _start(bus, "c1")
        assert started.status == "active" and started.conversation_id == "c1" and not started.reopened
        sent = await _send(bus, "c1", "conversation.user.message", {"text": "look around"})
        await out.wait_type("conversation.turn.ended")
        # both tool calls of the turn ran, with the conversation's correlation id
        assert sorted(name for name, _, _ in tools.runs) == ["grep", "read_file"]
        assert {meta.correlation_id for _, _, meta in tools.runs} == {sent.correlation_id}
        assert [t.name for t in llm.requests[0].tools] == ["read_file", "grep"]
        second = llm.requests[1].messages
        assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool"]
        assert {m["tool_call_id"] for m in second[2:]} == {"call_0", "call_1"}
        deltas = [e.data["text"] for e in out.events if e.type == "conversation.assistant.delta"]
        assert "".join(deltas) == "All done here."
        timeline = await _projection(bus, "c1", "timeline")
        assert isinstance(timeline, list)
        types = [e["type"] for e in timeline]
        assert types[0] == "conversation.user.message"
        assert types[-2:] == ["conversation.assistant.message", "conversation.turn.ended"]
        assert types.count("conversation.tool.completed") == 2
        # one correlation id everywhere, and every cause is in the timeline
        assert {e["correlation_id"] for e in timeline} == {sent.correlation_id}
        ids = {e["id"] for e in timeline}
        assert all(e["causation_id"] in ids for e in timeline[1:])
        # output events carry the same ids as the timeline entries, in order
        assert [e.id for e in out.events if e.type != "conversation.assistant.delta"] == [
            e["id"] for e in timeline
        ]
        assert await _projection(bus, "c1", "canonical_timeline") == timeline
        assert await _projection(bus, "c1", "canonical_llm_context") == await _projection(
            bus, "c1", "llm_context"
        )
        assert await _projection(bus, "c1", "pending_tool_calls") == []
        usage = await _projection(bus, "c1", "usage")
        assert isinstance(usage, dict) and usage["calls"] == 2 and usage["prompt_tokens"] == 15
        diag = await _projection(bus, "c1", "diagnostics")
        assert isinstance(diag, dict) and diag["status"] == "idle"


async def test_bad_input_gets_clear_errors_and_the_conversation_keeps_running(
    bus: Bus, config: Config
) -> None:
    llm = ScriptLlm(answer("still here"))
    settings = RuntimeSettings(lease_ttl_s=5.0, max_message_bytes=1000, list_tools_patience_s=0.0)
    async with running_service(config, llm, ToolsDouble(), settings):
        out = await follow(bus, "c2")
        await _start(bus, "c2")
        with pytest.raises(InvalidInput, match="not accepted from outside"):
            await _send(bus, "c2", "conversation.llm.completed", {"request_id": "x"})
        with pytest.raises(InvalidInput, match="text"):
            await _send(bus, "c2", "conversation.user.message", {})
        with pytest.raises(PayloadTooLarge):
            await _send(bus, "c2", "conversation.user.message", {"text": "x" * 2000})
        with pytest.raises(NotFound):
            await _send(bus, "nope", "conversation.user.message", {"text": "hi"})
        # straight onto the input stream: a flat payload and an internal type
        flat = json.dumps(
            {
                "specversion": "1.0",
                "id": "f1",
                "source": "t",
                "type": "conversation.user.message",
                "text": "flat",
            }
        ).encode()
        await bus.js.publish(subjects.conversation_in(P, "c2"), flat)
        internal = Envelope(id="i1", source="t", type="conversation.tool.completed", data={"request_id": "r"})
        await bus.js.publish(subjects.conversation_in(P, "c2"), encode(internal)[0])
        errors = await out.wait_for(
            lambda e: e.type == "conversation.error" and e.source == "conversation/ingest", 2
        )
        assert [e.data["error_type"] for e in errors] == ["missing_data_envelope", "invalid_input"]
        # and it still answers
        await _send(bus, "c2", "conversation.user.message", {"text": "hi"})
        [reply] = await out.wait_type("conversation.assistant.message")
        assert reply.data["text"] == "still here"
        diag = await _projection(bus, "c2", "diagnostics")
        assert isinstance(diag, dict)
        rejected = [p["data"]["error_type"] for p in diag["problems"] if p["source"] == "conversation/ingest"]
        assert rejected == ["missing_data_envelope", "invalid_input"]


async def test_input_is_validated_once(bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    from jidocode.services.conversation import endpoints, input_dispatch

    validated: dict[str, list[object]] = {"send_event": [], "actor": []}

    def counting(where: str, real: Callable[..., Signal]) -> Callable[..., Signal]:
        def normalize(raw: Mapping[str, Any], **kw: Any) -> Signal:
            validated[where].append(raw.get("id"))
            return real(raw, **kw)

        return normalize

    monkeypatch.setattr(endpoints, "normalize", counting("send_event", endpoints.normalize))
    monkeypatch.setattr(input_dispatch, "normalize", counting("actor", input_dispatch.normalize))
    llm = ScriptLlm(answer("one"), answer("two"))
    async with running_service(config, llm, ToolsDouble()):
        out = await follow(bus, "c7")
        await _start(bus, "c7")
        sent = await _send(bus, "c7", "conversation.user.message", {"text": "through the front door"})
        await out.wait_type("conversation.assistant.message")
        assert validated == {"send_event": [sent.id], "actor": []}
        # straight onto the input stream: the actor validates it, once
        direct = Envelope(id="d1", source="t", type="conversation.user.message", data={"text": "direct"})
        await bus.js.publish(subjects.conversation_in(P, "c7"), encode(direct)[0])
        await out.wait_type("conversation.assistant.message", 2)
        assert validated == {"send_event": [sent.id], "actor": ["d1"]}
        timeline = await _projection(bus, "c7", "timeline")
        assert isinstance(timeline, list)
        first, second = (e for e in timeline if e["type"] == "conversation.user.message")
        assert first["id"] == sent.id and first["data"] == {"text": "through the front door"}
        assert first["correlation_id"] == sent.correlation_id and first["causation_id"] is not None
        assert second["id"] == "d1" and second["data"] == {"text": "direct"}


async def test_input_to_an_unknown_conversation_gets_an_error_event(bus: Bus, config: Config) -> None:
    async with running_service(config, ScriptLlm(), ToolsDouble()):
        out = await follow(bus, "ghost")
        env = Envelope(id=new_id(), source="t", type="conversation.user.message", data={"text": "anyone?"})
        await bus.js.publish(subjects.conversation_in(P, "ghost"), encode(env)[0])
        [err] = await out.wait_type("error")
        assert err.data["type"] == "not_found"
        with pytest.raises(NotFound):
            await _projection(bus, "ghost", "timeline")
        for bad in ("a.b", "*", "x y"):  # a malformed id is the client's mistake, named
            with pytest.raises(InvalidInput, match="conversation id"):
                await _projection(bus, bad, "timeline")
            with pytest.raises(InvalidInput, match="conversation id"):
                await conversations(bus).stop(bad)
        with pytest.raises(InvalidInput, match="unknown projection"):
            await _projection(bus, "ghost", "bogus")


async def test_cancel_stops_tools_and_resume_answers_what_came_meanwhile(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(tool_calls("bash", "bash"), answer("after resume"), answer("go on answered"))
    tools = ToolsDouble()
    tools.gate = asyncio.Event()  # tools never finish on their own
    await answer_list_tools(bus, [LlmToolSpec(name="bash")])  # the model is offered bash
    async with running_service(config, llm, tools):
        out = await follow(bus, "c3")
        await _start(bus, "c3")
        await _send(bus, "c3", "conversation.user.message", {"text": "run things"})
        started = {await asyncio.wait_for(tools.started.get(), 10) for _ in range(2)}
        await _send(bus, "c3", "conversation.cancel", {"reason": "user"})
        cancelled = {await asyncio.wait_for(tools.cancelled.get(), 10) for _ in range(2)}
        assert cancelled == started
        await out.wait_type("conversation.cancel")
        diag = await _projection(bus, "c3", "diagnostics")
        assert isinstance(diag, dict) and diag["status"] == "cancelled"
        await _send(bus, "c3", "conversation.user.message", {"text": "received while cancelled"})
        await out.wait_for(lambda e: e.type == "conversation.user.message", count=2)
        diag = await _projection(bus, "c3", "diagnostics")
        assert isinstance(diag, dict) and diag["status"] == "cancelled"
        assert len(llm.requests) == 1  # nothing is asked while cancelled
        # resume continues the normal flow: the message received meanwhile is answered (seed 002)
        await _send(bus, "c3", "conversation.resume", {})
        [msg] = await out.wait_type("conversation.assistant.message")
        assert msg.data["text"] == "after resume"
        contents = [m.get("content") for m in llm.requests[1].messages]
        assert contents[-1] == "received while cancelled"
        await _send(bus, "c3", "conversation.user.message", {"text": "go on"})
        await out.wait_type("conversation.assistant.message", 2)
        assert llm.requests[2].messages[-1].get("content") == "go on"


async def test_turn_limit_from_settings(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(tool_calls("a"), tool_calls("a"), tool_calls("a"))
    async with running_service(config, llm, ToolsDouble()):
        out = await follow(bus, "c4")
        await _start(bus, "c4", max_turns=2)
        await _send(bus, "c4", "conversation.user.message", {"text": "loop"})
        [stop] = await out.wait_type("conversation.loop.stopped")
        assert stop.data == {"reason": "max_turns", "turns": 2, "max_turns": 2}
        assert len(llm.requests) == 2


async def test_no_tool_list_is_a_diagnostic_not_a_failure(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(answer("fine without tools"))
    settings = RuntimeSettings(lease_ttl_s=5.0, list_tools_timeout_s=0.5, list_tools_patience_s=1.0)
    async with running_service(config, llm, ToolsDouble(), settings):
        out = await follow(bus, "c5")
        await _start(bus, "c5")
        await _send(bus, "c5", "conversation.user.message", {"text": "hi"})
        await out.wait_type("conversation.assistant.message")
        [err] = await out.wait_type("conversation.error")
        assert err.data["error_type"] == "tools_unavailable"
        assert llm.requests[0].tools == []


async def test_a_tool_list_from_before_serves_while_the_project_service_is_away(
    bus: Bus, config: Config
) -> None:
    # A restart of the project service (or NATS) must not leave the model without its tools:
    # the list it gave last is used (it changes only on reloads).
    llm = ScriptLlm(answer("one"), answer("two"))
    settings = RuntimeSettings(lease_ttl_s=5.0, list_tools_timeout_s=0.5, tool_specs_ttl_s=0.0)
    listing = await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    async with running_service(config, llm, ToolsDouble(), settings):
        out = await follow(bus, "c5b")
        await _start(bus, "c5b")
        await _send(bus, "c5b", "conversation.user.message", {"text": "first"})
        await out.wait_type("conversation.assistant.message")
        await listing.unsubscribe()  # the project service is gone
        await _send(bus, "c5b", "conversation.user.message", {"text": "second"})
        await out.wait_type("conversation.assistant.message", 2)
        assert [t.name for t in llm.requests[1].tools] == ["read_file"]
        assert not [e for e in out.events if e.type == "conversation.error"]


async def test_late_subscriber_replays_from_an_event_id(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(answer("one"), answer("two"))
    async with running_service(config, llm, ToolsDouble()):
        out = await follow(bus, "c6")
        await _start(bus, "c6")
        first = await _send(bus, "c6", "conversation.user.message", {"text": "1"})
        await out.wait_type("conversation.assistant.message")
        await _send(bus, "c6", "conversation.user.message", {"text": "2"})
        await out.wait_type("conversation.assistant.message", 2)
        info = await conversations(bus).replay("c6", after_id=first.id)
        assert info.stream == subjects.STREAM_EVENTS and info.after_sequence is not None
        from jidocode.services.conversation.follow import replay_events

        replayed = await replay_events(bus, info)
        live_after = [e.id for e in out.events]
        live_after = live_after[live_after.index(first.id) + 1 :]
        assert [e.id for e in replayed] == live_after
        with pytest.raises(NotFound):
            await conversations(bus).replay("c6", after_id="zzz")
