"""Ownership at scale and under faults (issue 31, points 3 and 4; decision 0327).

Real nats-server; the conversation service runs in this process. A replica's idle KV writes
are its heartbeat alone, whatever it has loaded; after a crash the conversations with work
pending are taken over and the idle ones stay unloaded until their next input; a conversation
that cannot load is loaded again after a backoff, then failed with an error on its output.
Nothing waits on time alone: the waits are on answers, loads and ownership scans.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import orjson
from nats.aio.msg import Msg

from jidocode.services.conversation.ports import LlmRequest, LlmResult, LlmToolSpec
from jidocode.services.conversation.record import record_key
from jidocode.services.conversation.replicas import heartbeat_key
from jidocode.services.conversation.residency import LoadedSet
from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.conversation import AssistantMessage, UserMessage

from ._support import (
    P,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    running_service,
    tool_calls,
)
from .test_idle import Answers

#: Seconds: what every wait below may take at most on a loaded two-core machine.
DEADLINE = 90.0
#: A short heartbeat (renewed every 0.5 s) so that scans and takeovers come quickly; nothing is
#: released for being idle while a test looks.
SETTINGS = RuntimeSettings(lease_ttl_s=1.5, idle_timeout_s=600.0, list_tools_patience_s=0.0)


class Llm:
    """Calls ``read_file`` for a message starting with ``busy`` (once), answers anything else."""

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        last = request.messages[-1]
        if last["role"] == "user" and str(last["content"]).startswith("busy"):
            return tool_calls("read_file")
        return answer(f"re: {next(m['content'] for m in reversed(request.messages) if m['role'] == 'user')}")


class Writes:
    """The KV writes of the ownership buckets, by subject (a plain subscription sees each one)."""

    def __init__(self) -> None:
        self.subjects: list[str] = []

    async def start(self, bus: Bus) -> None:
        async def _cb(msg: Msg) -> None:
            self.subjects.append(msg.subject)

        for bucket in (f"{subjects.BUCKET_OWNERS}.>", f"{subjects.BUCKET_CONVERSATIONS}.loaded.>"):
            await bus.nc.subscribe(f"$KV.{bucket}", cb=_cb)
        await bus.nc.flush()

    async def during_scans(self, rt: Runtime, scans: int) -> list[str]:
        """The writes while ``rt`` completes ``scans`` ownership scans."""
        self.subjects.clear()
        start = rt.scans
        await rt.wait_until(lambda: rt.scans >= start + scans, DEADLINE)
        return list(self.subjects)


async def _talk(bus: Bus, answers: Answers, cids: list[str], text: str = "hello") -> None:
    client = conversations(bus)
    for cid in cids:
        await client.start(cid)
        await client.send_event(cid, UserMessage.TYPE, {"text": f"{text} {cid}"})
    await answers.wait(lambda: all(cid in answers.by_conversation for cid in cids), DEADLINE)


async def test_idle_kv_writes_are_the_heartbeat_whatever_is_loaded(bus: Bus, config: Config) -> None:
    answers = Answers()
    await answers.start(bus)
    writes = Writes()
    await writes.start(bus)
    async with running_service(config, Llm(), ToolsDouble(), SETTINGS) as rt:
        beat = f"$KV.{subjects.BUCKET_OWNERS}.{heartbeat_key(rt.token)}"
        await _talk(bus, answers, [f"few-{i}" for i in range(5)])
        await rt.wait_until(lambda: len(rt.owned) == 5, DEADLINE)
        few = await writes.during_scans(rt, 6)
        await _talk(bus, answers, [f"many-{i}" for i in range(45)])
        await rt.wait_until(lambda: len(rt.owned) == 50, DEADLINE)
        many = await writes.during_scans(rt, 6)
    # loaded and idle: only the replica's heartbeat is written, as often with 50 as with 5
    assert set(few) == {beat} and set(many) == {beat}, (set(few), set(many))
    assert len(many) <= len(few) + 2, (len(few), len(many))


async def _crash(rt: Runtime) -> None:
    """What a ``kill -9`` leaves: the heartbeat unrenewed (it expires), every key still naming
    the replica, nothing let go; the actors stop running."""
    own = rt.ownership
    own.closing = True
    await own.replicas.stop_renewing()
    for owned in list(own.owned.values()):
        if owned.task is not None:
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()


async def test_a_restart_takes_over_busy_conversations_and_leaves_idle_ones_unloaded(
    bus: Bus, config: Config
) -> None:
    answers = Answers()
    await answers.start(bus)
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    idle = [f"idle-{i}" for i in range(10)]
    busy = ["busy-0", "busy-1"]
    stuck = ToolsDouble()
    stuck.gate = asyncio.Event()  # the first replica's tool calls never finish
    async with running_service(config, Llm(), stuck, SETTINGS, instance="first") as first:
        await _talk(bus, answers, idle)
        client = conversations(bus)
        for cid in busy:
            await client.start(cid)
            await client.send_event(cid, UserMessage.TYPE, {"text": f"busy {cid}"})
        for _ in busy:
            await asyncio.wait_for(stuck.started.get(), DEADLINE)
        assert len(first.owned) == len(idle) + len(busy)
        first.ownership.close = lambda: _crash(first)  # type: ignore[method-assign]
    loaded_before = await _loaded_keys(bus)
    assert loaded_before == {record_key(P, cid) for cid in idle + busy}

    tools = ToolsDouble()
    async with running_service(config, Llm(), tools, SETTINGS, instance="second") as second:
        # the busy ones are taken over (their tool calls run again here) and answered
        await answers.wait(lambda: all(cid in answers.by_conversation for cid in busy), DEADLINE)
        # the idle ones are let go, not loaded
        await second.wait_until(lambda: not (set(second.ownership.holders) - set(second.owned)), DEADLINE)
        scans = second.scans
        await second.wait_until(lambda: second.scans >= scans + 3, DEADLINE)
        assert second.loads == len(busy) and set(second.owned) == {record_key(P, c) for c in busy}
        assert await _loaded_keys(bus) == {record_key(P, cid) for cid in busy}
        assert sorted(meta.request_id for _, _, meta in tools.runs) == sorted(
            meta.request_id for _, _, meta in stuck.runs
        )
        # an idle one's next input loads it, its history intact
        await conversations(bus).send_event(idle[3], UserMessage.TYPE, {"text": "again"})
        await answers.wait(lambda: len(answers.by_conversation[idle[3]]) == 2, DEADLINE)
        assert answers.by_conversation[idle[3]] == [f"re: hello {idle[3]}", "re: again"]
        assert second.loads == len(busy) + 1


async def test_a_replica_that_stops_leaves_its_busy_conversation_to_its_peer(
    bus: Bus, config: Config
) -> None:
    answers = Answers()
    await answers.start(bus)
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    # the tools of both replicas finish only once released: the conversation is busy meanwhile
    tools = {"a": ToolsDouble(), "b": ToolsDouble()}
    for double in tools.values():
        double.gate = asyncio.Event()
    stacks = {name: AsyncExitStack() for name in tools}
    replicas = {
        name: await stacks[name].enter_async_context(
            running_service(config, Llm(), tools[name], SETTINGS, instance=name)
        )
        for name in tools
    }
    try:
        key = record_key(P, "handed")
        await conversations(bus).start("handed")
        await conversations(bus).send_event("handed", UserMessage.TYPE, {"text": "busy handed"})
        owner = next(name for name, rt in replicas.items() if key in rt.owned)
        peer = "b" if owner == "a" else "a"
        await asyncio.wait_for(tools[owner].started.get(), DEADLINE)
        # the owner stops while its tool call runs: it keeps the key, deletes its heartbeat last
        await stacks[owner].aclose()
        # its peer takes the conversation over (the deleted heartbeat says the owner is gone)
        # and runs the call again
        again = await asyncio.wait_for(tools[peer].started.get(), DEADLINE)
        assert again == tools[owner].runs[0][2].request_id
        assert replicas[peer].loads == 1 and key in replicas[peer].owned
        tools[peer].gate.set()  # type: ignore[union-attr]
        await answers.wait(lambda: answers.by_conversation.get("handed") == ["re: busy handed"], DEADLINE)
    finally:
        for stack in stacks.values():
            await stack.aclose()


async def test_a_conversation_that_cannot_load_backs_off_then_fails_with_an_error(
    bus: Bus, config: Config
) -> None:
    settings = SETTINGS.model_copy(
        update={"load_retry_base_s": 0.2, "load_retry_max_s": 1.0, "load_attempts": 3}
    )
    async with running_service(config, Llm(), ToolsDouble(), settings) as rt:
        client = conversations(bus)
        out = await follow(bus, "bad")
        await client.start("bad")
        # a journal this version cannot read: every load of the conversation fails
        await bus.js.publish(subjects.journal(P, "bad"), orjson.dumps({"format": 99, "entries": []}))
        await client.send_event("bad", UserMessage.TYPE, {"text": "hello"})
        [error] = await out.wait_for(_failed_error, timeout=DEADLINE)
        message = error.data["message"]
        assert "failed 3 times" in message and "format 99" in message, message
        assert rt.loads == 3
        # left for its next input: not loaded again, scan after scan
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 4, DEADLINE)
        assert rt.loads == 3 and not rt.owned
        assert await _loaded_keys(bus) == set()
        # its next input tries again (and fails again: nothing in a tight loop)
        await client.send_event("bad", UserMessage.TYPE, {"text": "again"})
        await out.wait_for(_failed_error, count=2, timeout=DEADLINE)
        assert rt.loads == 6
        assert not [e for e in out.events if e.type == AssistantMessage.TYPE]


def _failed_error(event: Any) -> bool:
    return event.type == "error" and "in a row" in str((event.data or {}).get("message", ""))


async def _loaded_keys(bus: Bus) -> set[str]:
    """The loaded set as stored (keys naming somebody)."""
    records = await bus.kv(subjects.BUCKET_CONVERSATIONS)
    return set(await LoadedSet(bus, records, token="reader").entries())


async def test_an_owner_paused_past_its_heartbeat_lets_go_what_its_peer_freed(
    bus: Bus, config: Config
) -> None:
    answers = Answers()
    await answers.start(bus)
    async with (
        running_service(config, Llm(), ToolsDouble(), SETTINGS, instance="a") as a,
        running_service(config, Llm(), ToolsDouble(), SETTINGS, instance="b") as b,
    ):
        key = record_key(P, "paused")
        await _talk(bus, answers, ["paused"])
        owner = a if key in a.owned else b
        assert key in owner.owned
        # the owner stops renewing its heartbeat (a pause): its peer finds it dead and the idle
        # conversation's key removed; the owner sees that and lets its actor go
        await owner.ownership.replicas.stop_renewing()
        await owner.wait_until(lambda: key not in owner.owned, DEADLINE)
        assert await _loaded_keys(bus) == set()
        # its next input loads it again (on either replica), its history intact
        await conversations(bus).send_event("paused", UserMessage.TYPE, {"text": "back"})
        await answers.wait(lambda: len(answers.by_conversation["paused"]) == 2, DEADLINE)
        assert answers.by_conversation["paused"] == ["re: hello paused", "re: back"]


async def test_a_heartbeat_found_gone_is_written_again(bus: Bus, config: Config) -> None:
    async with running_service(config, Llm(), ToolsDouble(), SETTINGS) as rt:
        owners = await bus.kv(subjects.BUCKET_OWNERS)
        key = heartbeat_key(rt.token)
        first = await owners.get(key)
        await owners.purge(key)  # as if it had expired during a pause
        await asyncio.wait_for(rt.ownership.replicas.lost.wait(), DEADLINE)
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 3, DEADLINE)
        again = await owners.get(key)
        assert again.value == first.value and (again.revision or 0) > (first.revision or 0)


async def test_the_same_instance_started_again_takes_over_without_waiting_for_its_heartbeat(
    bus: Bus, config: Config
) -> None:
    """``up`` starts a crashed service again under the same instance name: its busy conversation
    is taken over at once, not after the dead run's heartbeat TTL (here 120 s, longer than the
    wait: only the predecessor rule can answer in time)."""
    slow = SETTINGS.model_copy(update={"lease_ttl_s": 120.0})
    answers = Answers()
    await answers.start(bus)
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    stuck = ToolsDouble()
    stuck.gate = asyncio.Event()
    async with running_service(config, Llm(), stuck, slow, instance="same") as first:
        await conversations(bus).start("restarted")
        await conversations(bus).send_event("restarted", UserMessage.TYPE, {"text": "busy"})
        await asyncio.wait_for(stuck.started.get(), DEADLINE)
        first.ownership.close = lambda: _crash(first)  # type: ignore[method-assign]
        first_token = first.token
    async with running_service(config, Llm(), ToolsDouble(), slow, instance="same") as second:
        assert second.token != first_token
        await answers.wait(lambda: "restarted" in answers.by_conversation, 60.0)
        assert second.loads == 1 and record_key(P, "restarted") in second.owned
