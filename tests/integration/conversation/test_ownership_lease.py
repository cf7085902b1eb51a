"""Conversation ownership: one heartbeat per replica, a key per conversation written once (issue 31,
points 3 and 4; decision 0327).

Real nats-server; the conversation service runs in this process. A loaded conversation's key in
the loaded set names its replica the way every lease of the system does, and is never renewed:
only the replica's heartbeat is, so a replica's idle KV writes do not grow with the conversations
it has loaded. A key naming another live replica is respected and shown; one naming a replica
whose heartbeat is gone is taken over; a stop removes the key. Nothing waits on time alone.
"""

from __future__ import annotations

import nats.js.errors
import pytest

from jidocode.services.conversation.record import record_key
from jidocode.services.conversation.replicas import heartbeat_key
from jidocode.services.conversation.residency import LOADED_PREFIX
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.conversation import UserMessage
from jidocode.shared.lease import encode_holder

from ._support import P, ScriptLlm, ToolsDouble, answer, conversations, follow, running_service

#: Seconds: what every wait below may take at most on a loaded two-core machine.
DEADLINE = 60.0
#: Long enough that nothing is released while the test looks at it.
SETTINGS = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=120.0, list_tools_patience_s=0.0)


async def test_a_loaded_conversation_holds_its_key_unrenewed_until_it_stops(bus: Bus, config: Config) -> None:
    client = conversations(bus)
    async with running_service(config, ScriptLlm(answer("hi")), ToolsDouble(), SETTINGS) as rt:
        out = await follow(bus, "c1")
        await client.start("c1")
        await client.send_event("c1", UserMessage.TYPE, {"text": "hello"})
        await out.wait_type("conversation.assistant.message", timeout=DEADLINE)
        records = await bus.kv(subjects.BUCKET_CONVERSATIONS)
        owners = await bus.kv(subjects.BUCKET_OWNERS)
        loaded = LOADED_PREFIX + record_key(P, "c1")
        entry = await records.get(loaded)
        # the shared primitive's value, naming this replica
        assert entry.value == encode_holder(rt.token)
        [row] = (await client.list(conversation_id="c1")).conversations
        assert row.owner == bus_source_of(rt.token)
        # the replica's heartbeat is renewed, scan after scan; the conversation's key is not
        beat = await owners.get(heartbeat_key(rt.token))
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 2, DEADLINE)
        renewed = await owners.get(heartbeat_key(rt.token))
        assert (renewed.revision or 0) > (beat.revision or 0) and renewed.value == encode_holder(rt.token)
        assert (await records.get(loaded)).revision == entry.revision
        await client.stop("c1")
        await rt.wait_until(rt.settled, DEADLINE)
        with pytest.raises((nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError)):
            await records.get(loaded)


async def test_a_key_of_a_live_replica_is_respected_and_of_a_gone_one_taken(bus: Bus, config: Config) -> None:
    client = conversations(bus)
    async with running_service(config, ScriptLlm(answer("late")), ToolsDouble(), SETTINGS) as rt:
        records = await bus.kv(subjects.BUCKET_CONVERSATIONS)
        owners = await bus.kv(subjects.BUCKET_OWNERS)
        key = record_key(P, "old")
        other = "conversation@other/0badf00d"
        await client.start("old")
        await owners.create(heartbeat_key(other), encode_holder(other))
        await records.create(LOADED_PREFIX + key, encode_holder(other))
        record = await rt.record(P, "old")
        # held by the other replica, alive: not taken, and shown as its
        assert not await rt.ownership.try_acquire(key, record)
        [row] = (await client.list(conversation_id="old")).conversations
        assert row.owner == "conversation@other"
        # once that replica stops (its heartbeat deleted), its idle conversation is let go, not
        # loaded; its next input loads it here
        loads = rt.loads
        await owners.delete(heartbeat_key(other))
        await rt.wait_until(lambda: key not in rt.ownership.holders, DEADLINE)
        assert rt.loads == loads and key not in rt.owned
        assert not await rt.loaded.has(key)
        await client.send_event("old", UserMessage.TYPE, {"text": "hello again"})
        await rt.wait_until(lambda: key in rt.owned, DEADLINE)
        assert (await records.get(LOADED_PREFIX + key)).value == encode_holder(rt.token)


def bus_source_of(token: str) -> str:
    """The instance a replica's token names (``<bus source>/<random>``)."""
    return token.rsplit("/", 1)[0]
