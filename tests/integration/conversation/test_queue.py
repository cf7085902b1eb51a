"""The reducer's bounded queue in the running service (issue 12 items 5 and 6, seed 002).

A flood of input beyond ``max_queue`` gets ``conversation.queue.overflow``
entries naming each input dropped; every input is either applied or named by
one overflow entry, never both and never neither; a drain step applies at most
``max_drain_steps`` (the rest wait for ``continue_drain``), which is what lets
the queue fill at all. What was dropped stays dropped when the input stream is
read again (a reload), on any replica. The stream and the reducer share one
dedup key: two inputs with one id but different correlation ids are both kept.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jidocode.services.conversation.core import Limits
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, encode

from ._support import ScriptLlm, ToolsDouble, conversations, follow, running_service

FLOOD = 60
SETTINGS = RuntimeSettings(
    lease_ttl_s=5.0, list_tools_patience_s=0.0, limits=Limits(max_queue=4, max_drain_steps=1)
)


async def _timeline(bus: Bus, cid: str) -> list[dict[str, Any]]:
    value = (await conversations(bus).get_projection(cid, "timeline")).value
    assert isinstance(value, list)
    return value


async def test_a_flood_overflows_naming_each_dropped_input_and_loses_nothing_silently(
    bus: Bus, config: Config
) -> None:
    gate = asyncio.Event()  # the model never answers: every message after the first just queues up
    async with running_service(config, ScriptLlm(gate), ToolsDouble(), SETTINGS):
        await conversations(bus).start("flood")
    # the flood waits in the input stream while no service runs: the actor that loads the
    # conversation finds it all at once, faster than one drain step at a time can apply it
    sent = [f"f{i:03d}" for i in range(FLOOD)]
    for event_id in sent:
        env = Envelope(id=event_id, source="t", type="conversation.user.message", data={"text": event_id})
        await bus.js.publish(subjects.conversation_in("proj1", "flood"), encode(env)[0])
    async with running_service(config, ScriptLlm(gate), ToolsDouble(), SETTINGS):
        out = await follow(bus, "flood")
        last = await conversations(bus).send_event("flood", "conversation.user.message", {"text": "last"})
        await out.wait_for(lambda e: e.id == last.id, timeout=60)
        timeline = await _timeline(bus, "flood")
    applied = [e["id"] for e in timeline if e["type"] == "conversation.user.message"]
    overflows = [e for e in timeline if e["type"] == "conversation.queue.overflow"]
    dropped = [e["data"]["dropped_id"] for e in overflows]
    assert overflows, "a flood of 60 at max_queue 4 and one signal per drain step overflowed nothing"
    assert all(e["data"]["max_queue"] == 4 and e["data"]["queue_size"] == 4 for e in overflows)
    assert all(e["data"]["dropped_type"] == "conversation.user.message" for e in overflows)
    # each input exactly once: applied, or named as dropped
    assert sorted(applied + dropped) == sorted([*sent, last.id])
    assert len(set(applied) & set(dropped)) == 0

    # read again from the start by a new actor (a restart): what was dropped stays dropped
    async with running_service(config, ScriptLlm(gate), ToolsDouble(), SETTINGS):
        out = await follow(bus, "flood")
        after = await conversations(bus).send_event("flood", "conversation.user.message", {"text": "after"})
        await out.wait_for(lambda e: e.id == after.id, timeout=60)
        again = await _timeline(bus, "flood")
    assert [e["id"] for e in again if e["type"] == "conversation.user.message"] == [*applied, after.id]
    assert [e["data"]["dropped_id"] for e in again if e["type"] == "conversation.queue.overflow"] == dropped


async def test_one_id_with_two_correlation_ids_is_two_inputs(bus: Bus, config: Config) -> None:
    gate = asyncio.Event()
    async with running_service(config, ScriptLlm(gate), ToolsDouble()):
        out = await follow(bus, "dedup")
        client = conversations(bus)
        await client.start("dedup")
        first = await client.send_event("dedup", "conversation.user.message", {"text": "a"}, event_id="same")
        other = await client.send_event(
            "dedup", "conversation.user.message", {"text": "b"}, event_id="same", correlation_id="elsewhere"
        )
        copy = await client.send_event("dedup", "conversation.user.message", {"text": "a"}, event_id="same")
        assert first.sequence != other.sequence  # the stream kept both
        assert copy.sequence == first.sequence  # and dropped the copy (its duplicate window)
        await out.wait_for(lambda e: e.type == "conversation.user.message", count=2)
        timeline = await _timeline(bus, "dedup")
    keys = [(e["id"], e["correlation_id"]) for e in timeline if e["type"] == "conversation.user.message"]
    assert keys == [("same", first.correlation_id), ("same", "elsewhere")]
