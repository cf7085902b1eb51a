"""Seed 000 §6 signals of one conversation on ``jido.sig.>``: the conversation service with its real
LLM port (litellm against the scripted server), a real bus, a tools double."""

from __future__ import annotations

from typing import Any

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from tests.integration.conversation._support import (
    P,
    ToolsDouble,
    answer_list_tools,
    conversations,
    follow,
    running_service,
)

from ._support import SignalLog

ANSWER = "A streamed answer, long enough for a few chunks of text to go by. " * 8


async def test_conversation_lifecycle_ingest_and_llm_signals(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    await answer_list_tools(bus, [])
    scripted_llm.script(Reply.answer(ANSWER, prompt_tokens=12, completion_tokens=40))

    def of_c1(env: Envelope) -> bool:
        return env.data.get("conversation_id") == "c1"

    async with running_service(config, None, ToolsDouble()):
        client = conversations(bus)
        out = await follow(bus, "c1")
        await client.start("c1", settings=scripted_llm_settings)
        started = await log.wait("conversation.started", of_c1)
        assert started.nats_subject == "jido.sig.conversation.started"
        assert (started.data["project_id"], started.project_id) == (P, P)
        assert started.data["instance"]

        accepted = await client.send_event("c1", "conversation.user.message", {"text": "tell me"})
        ingested = await log.wait("conversation.event_ingested", lambda e: e.data["event_id"] == accepted.id)
        assert ingested.nats_subject == "jido.sig.conversation.event_ingested"
        assert ingested.data["event_type"] == "conversation.user.message"
        assert (ingested.data["project_id"], ingested.data["conversation_id"]) == (P, "c1")
        assert ingested.correlation_id == accepted.correlation_id

        completed = await log.wait("llm.completed", of_c1)
        assert completed.data["project_id"] == P and completed.correlation_id == accepted.correlation_id
        assert (completed.data["prompt_tokens"], completed.data["completion_tokens"]) == (12, 40)
        call_id = completed.data["call_id"]
        [llm_started] = log.of("llm.started", lambda e: e.data["call_id"] == call_id)
        assert llm_started.data["model"] == "openai/scripted" and llm_started.data["conversation_id"] == "c1"
        timeline = (await client.get_projection("c1", "timeline")).value
        requested = next(e["id"] for e in timeline if e["type"] == "conversation.llm.requested")
        assert llm_started.data["request_id"] == completed.data["request_id"] == requested
        deltas = log.of("llm.delta", lambda e: e.data["call_id"] == call_id)
        assert deltas and "".join(d.data["text"] for d in deltas) == ANSWER
        # the answer's step: its entries and their announcements leave in this order, in one flush
        await out.wait_type("conversation.assistant.message")
        ingested_types = {e.data["event_type"] for e in log.of("conversation.event_ingested", of_c1)}

        await client.stop("c1", reason="done for today")
        stopped = await log.wait("conversation.stopped", of_c1)
        # the result of the conversation's own model call is on its output, not announced as
        # ingested (decision 0328): what came from outside is
        assert "conversation.llm.completed" not in ingested_types
        assert "conversation.user.message" in ingested_types
        assert stopped.nats_subject == "jido.sig.conversation.stopped"
        assert (stopped.data["project_id"], stopped.data["reason"]) == (P, "done for today")
