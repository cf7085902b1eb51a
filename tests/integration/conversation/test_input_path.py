"""The input path: a fixed number of consumers per replica, catch-up at load, the idle clock.

Real nats-server, the conversation service in this process (its runtime handed to
the test). Nothing waits on time alone: the tests wait for answers, loads and
releases with deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.journal import Journal
from jidocode.services.conversation.ports import LlmRequest, LlmResult
from jidocode.services.conversation.record import ConversationRecord, record_key
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.conversation import ConversationError, UserMessage
from jidocode.shared.natsserver import NatsServer, free_port

from ._support import P, ToolsDouble, conversations, running_service
from .test_idle import DEADLINE, Answers, EchoLlm

#: Conversations loaded at once in the consumer-limit test, and the stream's consumer limit.
LOADED = 12
MAX_CONSUMERS = 4


class GatheringLlm(EchoLlm):
    """Answers like :class:`EchoLlm`, but only once ``expected`` conversations are asking at
    the same time: then every one of them is loaded at once."""

    def __init__(self, expected: int) -> None:
        super().__init__()
        self.expected = expected
        self.asking: set[str] = set()
        self.all_asking = asyncio.Event()

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        self.asking.add(request.conversation_id)
        if len(self.asking) >= self.expected:
            self.all_asking.set()
        await self.all_asking.wait()
        return await super().complete(request, on_delta)


async def _input_consumers(bus: Bus) -> list[str]:
    return sorted(info.name for info in await bus.nc.jsm().consumers_info(subjects.STREAM_CONV_IN))


async def _limit_consumers(bus: Bus, limit: int) -> None:
    """Lower ``JIDO_CONV_IN``'s consumer limit (the service has created the stream)."""
    info = await bus.js.stream_info(subjects.STREAM_CONV_IN)
    config = info.config
    config.max_consumers = limit
    await bus.js.update_stream(config)
    assert (await bus.js.stream_info(subjects.STREAM_CONV_IN)).config.max_consumers == limit


async def test_more_conversations_than_the_consumer_limit_are_loaded_at_once_and_answer(
    bus: Bus, config: Config
) -> None:
    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=60.0, list_tools_patience_s=0.0)
    llm = GatheringLlm(LOADED)
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cids = [f"many-{i}" for i in range(LOADED)]
    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        await _limit_consumers(bus, MAX_CONSUMERS)
        before = await _input_consumers(bus)
        for cid in cids:
            await client.start(cid)
            await client.send_event(cid, UserMessage.TYPE, {"text": f"hello {cid}"})
        # every conversation is loaded and asking the model at the same moment
        await asyncio.wait_for(llm.all_asking.wait(), DEADLINE)
        assert set(rt.owned) >= {f"{P}.{cid}" for cid in cids}
        assert LOADED > MAX_CONSUMERS
        # the input stream's consumers did not grow with them: the wake-up one and this replica's
        assert await _input_consumers(bus) == before
        assert len(before) == 2
        await answers.wait(lambda: all(answers.by_conversation.get(cid) for cid in cids))
    assert {cid: answers.by_conversation[cid] for cid in cids} == {cid: [f"re: hello {cid}"] for cid in cids}


async def test_input_arriving_while_an_actor_catches_up_is_applied_once_in_order(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input stored before the load (the backlog), input stored while the backlog is read (seen
    both live and in the backlog) and input stored after the backlog's end but before the
    actor let its held input through (seen live only): each one applied once, in order."""
    from jidocode.services.conversation import input_dispatch
    from jidocode.services.conversation.input_dispatch import ConversationInput, InputMessage

    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=60.0, list_tools_patience_s=0.0)
    llm = EchoLlm()
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cid = "catching-up"
    subject = subjects.conversation_in(P, cid)
    held: list[InputMessage] = []
    held_changed = asyncio.Event()
    real_read, real_on_live = input_dispatch.read_backlog, ConversationInput._on_live

    def on_live(self: ConversationInput, message: InputMessage) -> None:
        real_on_live(self, message)
        if self.subject == subject and self._held is not None:
            held.append(message)
            held_changed.set()

    async def publish_and_wait_held(text: str) -> None:
        count = len(held)
        await bus.js_publish(subject, bus.envelope(UserMessage(text=text)))
        while len(held) <= count:  # the replica's consumer gave it to the actor, which holds it
            held_changed.clear()
            await asyncio.wait_for(held_changed.wait(), DEADLINE)

    async def read_backlog(b: Bus, subj: str, *, after: int = 0) -> AsyncIterator[InputMessage]:
        first = subj == subject and not held
        async for message in real_read(b, subj, after=after):
            yield message
            if first:  # in the middle of the backlog
                first = False
                await publish_and_wait_held("m4")
        if subj == subject and len(held) == 1:  # after its end
            await publish_and_wait_held("m5")

    monkeypatch.setattr(input_dispatch, "read_backlog", read_backlog)
    monkeypatch.setattr(ConversationInput, "_on_live", on_live)
    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        await client.start(cid)
        # the backlog: stored while nothing has the conversation loaded, nor wakes it (the
        # wake-up consumer's delivery is what loads it; it is stopped meanwhile)
        await rt.wakeups.stop()
        for text in ("m1", "m2", "m3"):
            await bus.js_publish(subject, bus.envelope(UserMessage(text=text)))
        await client.get_projection(cid, "timeline")  # loads it
        # (the model is asked about the latest message: queued ones may share a turn)
        await answers.wait(lambda: answers.by_conversation.get(cid, [""])[-1] == "re: m5")
        timeline = (await client.get_projection(cid, "timeline")).value
        assert rt.loads == 1
    texts = [e["data"]["text"] for e in timeline if e["type"] == UserMessage.TYPE]
    assert texts == ["m1", "m2", "m3", "m4", "m5"]
    ids = [e["id"] for e in timeline]
    assert len(ids) == len(set(ids))
    assert len(held) == 2 and held[0].seq < held[1].seq


async def test_a_conversation_idle_for_long_by_its_journal_is_released_soon_after_a_reload(
    bus: Bus, config: Config
) -> None:
    # an idle timeout far beyond the test's deadline: only the journal's clock can release it
    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=600.0, list_tools_patience_s=0.0)
    llm = EchoLlm()
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cid = "long-idle"
    key = f"{P}.{cid}"
    async with running_service(config, llm, ToolsDouble(), settings):
        await client.start(cid)
        await client.send_event(cid, UserMessage.TYPE, {"text": "hello"})
        await answers.wait(lambda: bool(answers.by_conversation.get(cid)))
    # its last activity, as the journal says: an hour ago
    journal = Journal(bus)
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    old = Signal.of(
        ConversationError(error_type="test", message="an old entry"),
        id="old-entry",
        source="test",
        correlation_id="old-entry",
        time=an_hour_ago,
    )
    await journal.append(P, cid, old, expected_last=await journal.last_sequence(P, cid))

    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        await client.get_projection(cid, "timeline")  # loads it
        await rt.wait_until(lambda: rt.loads >= 1, DEADLINE)
        await rt.wait_until(lambda: key not in rt.owned and rt.settled(), DEADLINE)
        # and input loads it again, as any released conversation
        await client.send_event(cid, UserMessage.TYPE, {"text": "back"})
        await answers.wait(lambda: len(answers.by_conversation[cid]) == 2)
        assert key in rt.owned  # fresh activity: it stays loaded now
    assert answers.by_conversation[cid] == ["re: hello", "re: back"]


async def test_input_sent_while_the_replicas_consumer_is_gone_is_answered_after_its_reset(
    bus: Bus, config: Config
) -> None:
    """The replica's input consumer deleted under it (as a server that lost it would): the
    client notices the missing heartbeats, creates it again from the last sequence it
    delivered, and the input stored meanwhile reaches the loaded conversation."""
    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=600.0, list_tools_patience_s=0.0)
    llm = EchoLlm()
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cid = "reset"
    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        await client.start(cid)
        await client.send_event(cid, UserMessage.TYPE, {"text": "before"})
        await answers.wait(lambda: bool(answers.by_conversation.get(cid)))
        gone = rt.inputs.consumer
        assert gone is not None
        await bus.js.delete_consumer(subjects.STREAM_CONV_IN, gone)
        await client.send_event(cid, UserMessage.TYPE, {"text": "while it was gone"})
        await answers.wait(lambda: len(answers.by_conversation[cid]) == 2)
        assert rt.loads == 1  # the loaded actor got it, no reload
        assert rt.inputs.consumer != gone
    assert answers.by_conversation[cid] == ["re: before", "re: while it was gone"]


async def test_after_a_server_restart_the_input_consumer_is_made_again_at_once(tmp_path: Path) -> None:
    """A restarted nats-server loses the replica's ephemeral input consumer; the reconnect makes
    it again from the next sequence (``resets``), instead of the 10-20 s the ordered consumer's
    missed heartbeats take, and the loaded conversation answers the next message."""
    server = NatsServer(store_dir=tmp_path / "js", port=free_port(), sync="default")
    await asyncio.to_thread(server.start)
    config = Config(nats_url=server.url)
    bus = await Bus.connect(config, "restart-test")
    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=600.0, list_tools_patience_s=0.0)
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cid = "restarted"
    try:
        async with running_service(config, EchoLlm(), ToolsDouble(), settings) as rt:
            await client.start(cid)
            await client.send_event(cid, UserMessage.TYPE, {"text": "before"})
            await answers.wait(lambda: bool(answers.by_conversation.get(cid)))
            await asyncio.to_thread(server.stop)
            await asyncio.to_thread(server.start)  # the same port and store
            await rt.wait_until(lambda: rt.inputs.resets >= 1, DEADLINE)
            # the record follow and the ownership watches are made again too; a record changed
            # now (by another replica) is seen through the follow, not 10-20 s later
            await rt.wait_until(
                lambda: rt.store.refollows >= 1 and all(w.restarts >= 1 for w in rt.ownership.watches),
                DEADLINE,
            )
            key = record_key(P, cid)
            record = ConversationRecord.model_validate_json((await rt.store.kv.get(key)).value or b"")
            changed = record.model_copy(update={"settings": {**record.settings, "seen": "after"}})
            await rt.store.kv.put(key, changed.model_dump_json().encode())

            def seen() -> bool:
                known = rt.store.known.get(key)
                return known is not None and known[1] is not None and known[1].settings.get("seen") == "after"

            await rt.wait_until(seen, DEADLINE)
            await answers.start(
                bus
            )  # (core subscriptions come back with the connection; listen again anyway)
            await client.send_event(cid, UserMessage.TYPE, {"text": "after"})
            await answers.wait(lambda: len(answers.by_conversation[cid]) >= 2)
            assert rt.loads == 1
        assert answers.by_conversation[cid][:2] == ["re: before", "re: after"]
    finally:
        await bus.close()
        await asyncio.to_thread(server.stop)
