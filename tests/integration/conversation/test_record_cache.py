"""The conversation record before each model call comes from the record store's cache (issue 27,
point 7): the store follows the records bucket, so a record it knows is not read again; a record
it does not know is read once; a record changed elsewhere is seen through the watch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import nats
from nats.aio.msg import Msg

from jidocode.services.conversation.record import ConversationRecord, record_key
from jidocode.services.conversation.record_store import RecordStore
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config

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

_STREAM = f"KV_{subjects.BUCKET_CONVERSATIONS}"


class RecordReads:
    """Counts the reads of the records bucket (stream and direct gets), seen on the server."""

    def __init__(self) -> None:
        self.count = 0

    async def seen(self, msg: Msg) -> None:
        self.count += 1


@asynccontextmanager
async def record_reads(url: str) -> AsyncIterator[RecordReads]:
    """Every read request of the records bucket routed by the server while the block runs."""
    nc = await nats.connect(url)
    reads = RecordReads()
    subs = []
    try:
        for api in ("STREAM.MSG.GET", "DIRECT.GET"):
            subs.append(await nc.subscribe(f"$JS.API.{api}.{_STREAM}", cb=reads.seen))
            subs.append(await nc.subscribe(f"$JS.API.{api}.{_STREAM}.>", cb=reads.seen))
        await nc.flush()
        yield reads
        # every request the server routed before this flush's answer is in the queues: let the
        # callbacks take them (a count read right after the flush could miss one under load)
        await nc.flush()

        async def drained() -> None:
            while any(sub.pending_msgs for sub in subs):  # noqa: ASYNC110 (a queue size: no event)
                await asyncio.sleep(0)  # the subscriptions' tasks take their messages

        await asyncio.wait_for(drained(), 10)
        await asyncio.sleep(0)
    finally:
        await nc.close()


def record(conversation_id: str, **settings: object) -> ConversationRecord:
    return ConversationRecord(project_id=P, conversation_id=conversation_id, settings=dict(settings))


async def following(bus: Bus) -> tuple[RecordStore, asyncio.Queue[str]]:
    """A store that follows the bucket, and the keys of the changes it saw, in order."""
    store = RecordStore(bus)
    await store.open()
    changes: asyncio.Queue[str] = asyncio.Queue()

    async def on_change(key: str, _: ConversationRecord | None) -> None:
        changes.put_nowait(key)

    await store.follow(on_change)
    return store, changes


async def test_a_known_record_is_not_read_again_and_a_change_elsewhere_is_seen(
    bus: Bus, config: Config
) -> None:
    other = await Bus.connect(config, "other-replica")
    try:
        writer = RecordStore(other)
        await writer.open()
        await writer.put(record_key(P, "before"), record("before", model="a"))  # before the watch
        store, changes = await following(bus)

        async with record_reads(config.nats_url) as reads:
            first = await store.current(P, "before")  # not known: read once
            again = await store.current(P, "before")  # known now
        assert first is not None and again == first and first.settings == {"model": "a"}
        assert reads.count == 1

        key = record_key(P, "before")
        await writer.put(key, record("before", model="b"))  # another replica changes it
        assert await asyncio.wait_for(changes.get(), 10) == key
        async with record_reads(config.nats_url) as reads:
            changed = await store.current(P, "before")
        assert changed is not None and changed.settings == {"model": "b"}
        assert reads.count == 0  # the watch told it

        await writer.kv.delete(key)
        assert await asyncio.wait_for(changes.get(), 10) == key
        assert await store.current(P, "before") is None  # deleted: as before, no record
        assert await store.current(P, "never-started") is None
    finally:
        await other.close()


async def test_the_model_calls_of_a_turn_read_no_record(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(answer("first"), tool_calls("grep"), answer("done"), answer("third"))
    await answer_list_tools(bus, [])
    async with running_service(config, llm, ToolsDouble()):
        client = conversations(bus)
        out = await follow(bus, "rc")
        await client.start("rc")
        await client.send_message("rc", "one")
        await out.wait_type("conversation.assistant.message")
        async with record_reads(config.nats_url) as reads:
            await client.send_message("rc", "two")  # two model calls and a tool call
            await out.wait_type("conversation.assistant.message", 2)
        assert len(llm.requests) == 3
        assert reads.count == 0

        await client.start("rc", settings={"max_turns": 7})  # the change counts from the next call
        await client.send_message("rc", "three")
        await out.wait_type("conversation.assistant.message", 3)
        assert llm.requests[-1].settings["max_turns"] == 7
