"""A rewind after the conversation's replica was killed (issue 30 point 2): another replica applies it.

Real nats-server; the conversation service runs in this process, twice. The first replica dies
as ``kill -9`` leaves it (its heartbeat unrenewed, its keys still naming it); the rewind sent
afterwards is checked against the journal, goes through the conversation's input stream and is
applied by the second replica, whose next model call holds only the context before the message.
A rewind naming another conversation's message is refused there and journals nothing, and so is
one sent while a turn runs.
"""

from __future__ import annotations

import asyncio

import pytest

from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import Conflict, NotFound
from jidocode.shared.events.conversation import TurnEnded, UserMessage
from tests.integration.conversation._support import (
    ScriptLlm,
    ToolsDouble,
    answer,
    conversations,
    follow,
    running_service,
)

#: Seconds: what every wait below may take at most on a loaded two-core machine.
DEADLINE = 90.0
#: A short heartbeat, so the dead replica is known dead soon.
SETTINGS = RuntimeSettings(lease_ttl_s=1.5, idle_timeout_s=600.0, list_tools_patience_s=0.0)


async def _crash(rt: Runtime) -> None:
    """What a ``kill -9`` leaves: the heartbeat unrenewed, every key still naming the replica."""
    own = rt.ownership
    own.closing = True
    await own.replicas.stop_renewing()
    for owned in list(own.owned.values()):
        if owned.task is not None:
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()


async def test_a_rewind_after_the_owner_was_killed_is_applied_by_another_replica(
    bus: Bus, config: Config
) -> None:
    client = conversations(bus)
    out, elsewhere = await follow(bus, "kept"), await follow(bus, "other")
    answers = ScriptLlm(answer("one back"), answer("two back"), answer("other back"))
    async with running_service(config, answers, ToolsDouble(), SETTINGS, instance="first") as first:
        await client.start("kept")
        sent = [(await client.send_event("kept", UserMessage.TYPE, {"text": t})).id for t in ("one", "two")]
        await out.wait_type(TurnEnded.TYPE, count=2, timeout=DEADLINE)
        await client.start("other")
        spoofed = (await client.send_event("other", UserMessage.TYPE, {"text": "other"})).id
        await elsewhere.wait_type(TurnEnded.TYPE, timeout=DEADLINE)
        first.ownership.close = lambda: _crash(first)  # type: ignore[method-assign]

    answered = asyncio.Event()  # the next model call waits for it: a turn is running meanwhile
    llm = ScriptLlm(answered, answer("three back"))
    async with running_service(config, llm, ToolsDouble(), SETTINGS, instance="second") as second:
        # another conversation's message: refused, and nothing reaches the journal
        timeline = (await client.get_projection("kept", "timeline", timeout=DEADLINE)).value
        with pytest.raises(NotFound, match="not a user message"):
            await client.rewind("kept", spoofed, timeout=DEADLINE)
        assert (await client.get_projection("kept", "timeline")).value == timeline

        result = await client.rewind("kept", sent[1], timeout=DEADLINE)
        assert (result.message_id, result.text, result.dropped) == (sent[1], "two", 2)
        assert second.ownership.owned  # the second replica took the conversation and applied it

        await client.send_event("kept", UserMessage.TYPE, {"text": "three"})
        request = await asyncio.wait_for(llm.called.get(), DEADLINE)
        said = [(m["role"], m["content"]) for m in request.messages if m["role"] != "system"]
        assert said == [("user", "one"), ("assistant", "one back"), ("user", "three")]

        # while that turn runs, a rewind is refused: cancel first
        with pytest.raises(Conflict, match="a turn is running: cancel it first"):
            await client.rewind("kept", sent[0], timeout=DEADLINE)
        answered.set()
        await out.wait_type(TurnEnded.TYPE, count=3, timeout=DEADLINE)
