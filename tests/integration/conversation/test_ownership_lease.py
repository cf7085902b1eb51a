"""Conversation ownership on the shared lease primitive (``shared/lease.py``; issue 27, point 4).

Real nats-server; the conversation service runs in this process. A loaded conversation's
lease names its replica the way every lease of the system does; a lease an older replica
wrote (``{"owner": …}``) is still respected and shown; a stop deletes the lease it holds.
Nothing waits on time alone.
"""

from __future__ import annotations

import nats.js.errors
import pytest

from jidocode.services.conversation.record import record_key
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


async def test_a_loaded_conversation_holds_a_shared_lease_until_it_stops(bus: Bus, config: Config) -> None:
    client = conversations(bus)
    async with running_service(config, ScriptLlm(answer("hi")), ToolsDouble(), SETTINGS) as rt:
        out = await follow(bus, "c1")
        await client.start("c1")
        await client.send_event("c1", UserMessage.TYPE, {"text": "hello"})
        await out.wait_type("conversation.assistant.message", timeout=DEADLINE)
        owners = await bus.kv(subjects.BUCKET_OWNERS)
        entry = await owners.get(record_key(P, "c1"))
        # the shared primitive's value, naming this replica
        assert entry.value == encode_holder(rt.token)
        [row] = (await client.list(conversation_id="c1")).conversations
        assert row.owner == bus_source_of(rt.token)
        # renewed by the scan on the revision held (a compare-and-set): still this replica's
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 2, DEADLINE)
        renewed = await owners.get(record_key(P, "c1"))
        assert (renewed.revision or 0) > (entry.revision or 0) and renewed.value == entry.value
        await client.stop("c1")
        await rt.wait_until(rt.settled, DEADLINE)
        with pytest.raises((nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError)):
            await owners.get(record_key(P, "c1"))


async def test_a_lease_an_older_replica_wrote_is_respected(bus: Bus, config: Config) -> None:
    client = conversations(bus)
    async with running_service(config, ScriptLlm(answer("late")), ToolsDouble(), SETTINGS) as rt:
        owners = await bus.kv(subjects.BUCKET_OWNERS)
        key = record_key(P, "old")
        await client.start("old")
        legacy = b'{"owner": "conversation@older/0badf00d", "at": "2026-11-28T23:00:00+00:00"}'
        await owners.create(key, legacy)
        record = await rt.record(P, "old")
        # held by the older replica: not taken, and shown as its
        assert not await rt.ownership.try_acquire(key, record)
        [row] = (await client.list(conversation_id="old")).conversations
        assert row.owner == "conversation@older"
        # once that replica lets it go, this one takes it
        await owners.delete(key)
        assert await rt.ownership.try_acquire(key, record)
        assert (await owners.get(key)).value == encode_holder(rt.token)


def bus_source_of(token: str) -> str:
    """The instance a replica's token names (``<bus source>/<random>``)."""
    return token.rsplit("/", 1)[0]
