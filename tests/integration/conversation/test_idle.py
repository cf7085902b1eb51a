"""Idle conversations cost nothing: released after the idle timeout, loaded again on input.

Real nats-server; the conversation service runs in this process (its runtime is
handed to the test, which waits on what it loads and releases). Nothing waits
on time alone: the tests wait for conditions (answers, releases, scans) with
deadlines, and "no KV writes" is the buckets' stream sequences not moving while
the runtime completes several ownership scans (apart from the replica's own
heartbeat, renewed whatever is loaded).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import nats.js.errors
import pytest

from jidocode.services.conversation.ports import LlmRequest, LlmResult, LlmTokenUsage
from jidocode.services.conversation.replicas import HEARTBEAT_PREFIX
from jidocode.services.conversation.residency import WAKE_CONSUMER
from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import decode
from jidocode.shared.events.conversation import AssistantMessage, UserMessage

from ._support import P, ToolsDouble, conversations, follow, running_service

#: Conversations of the idle test (the issue's figure).
N = 500
#: Seconds: what every wait below may take at most on a loaded two-core machine.
DEADLINE = 60.0


class EchoLlm:
    """Answers every request at once with ``re: <the last user message>``; records the requests."""

    def __init__(self) -> None:
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        self.requests.append(request)
        text = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        return LlmResult(content=f"re: {text}", usage=LlmTokenUsage(prompt_tokens=1, completion_tokens=1))


class Answers:
    """Assistant messages of every conversation of project ``P``, by conversation id."""

    def __init__(self) -> None:
        self.by_conversation: dict[str, list[str]] = {}
        self._changed = asyncio.Event()

    async def start(self, bus: Bus) -> None:
        async def _cb(msg: Any) -> None:
            env = decode(msg.data, msg.headers)
            if env.type == AssistantMessage.TYPE and env.conversation_id:
                self.by_conversation.setdefault(env.conversation_id, []).append(env.data["text"])
                changed, self._changed = self._changed, asyncio.Event()
                changed.set()

        await bus.nc.subscribe(subjects.conversation_out_filter(P), cb=_cb)
        await bus.nc.flush()

    async def wait(self, predicate: Callable[[], bool], timeout: float = DEADLINE) -> None:
        async def _wait() -> None:
            while not predicate():
                await self._changed.wait()

        await asyncio.wait_for(_wait(), timeout)


async def _kv_sequences(bus: Bus) -> dict[str, int]:
    """The last sequence of the records bucket, and of the owners bucket's keys other than the
    replicas' heartbeats (renewed whatever is loaded: a constant per replica)."""
    records = await bus.js.stream_info(f"KV_{subjects.BUCKET_CONVERSATIONS}")
    out = {subjects.BUCKET_CONVERSATIONS: int(records.state.last_seq)}
    for key in await _leases(bus):
        entry = await (await bus.kv(subjects.BUCKET_OWNERS)).get(key)
        out[key] = entry.revision or 0
    return out


async def _leases(bus: Bus) -> list[str]:
    """The keys of the owners bucket other than the replicas' heartbeats."""
    try:
        keys = await (await bus.kv(subjects.BUCKET_OWNERS)).keys()
    except nats.js.errors.NoKeysError:
        return []
    return [key for key in keys if not key.startswith(HEARTBEAT_PREFIX)]


async def _consumers(bus: Bus) -> list[str]:
    """The consumers of the input stream (at most 256, plenty here)."""
    return sorted(info.name for info in await bus.nc.jsm().consumers_info(subjects.STREAM_CONV_IN))


async def test_idle_conversations_cost_nothing_and_a_restart_loads_none(bus: Bus, config: Config) -> None:
    # (a lease TTL long enough that a busy machine never lets a renewal come late, and an idle
    # timeout longer than a loaded machine takes between a conversation's start and its message:
    # at 1 s, with both cores busy, 5 of 500 were let go in between and loaded again)
    settings = RuntimeSettings(lease_ttl_s=5.0, idle_timeout_s=3.0, list_tools_patience_s=0.0)
    llm = EchoLlm()
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cids = [f"idle-{i}" for i in range(N)]
    gate = asyncio.Semaphore(50)

    async def talk(cid: str, index: int) -> None:
        async with gate:
            await client.start(cid)
            if index % 2:  # half through the front door, half straight onto the input stream
                await client.send_event(cid, UserMessage.TYPE, {"text": f"hello {cid}"})
            else:
                await bus.js_publish(
                    subjects.conversation_in(P, cid), bus.envelope(UserMessage(text=f"hello {cid}"))
                )

    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        await asyncio.gather(*(talk(cid, i) for i, cid in enumerate(cids)))
        await answers.wait(lambda: len(answers.by_conversation) == N)
        # every one was loaded once, then released once idle: no lease, no actor, no consumer
        await rt.wait_until(rt.settled, DEADLINE)
        assert rt.loads == N
        assert await _leases(bus) == []
        assert await rt.loaded.keys() == set()
        # (the input stream's consumers: the shared wake-up one and this replica's input consumer)
        assert await _consumers(bus) == sorted([WAKE_CONSUMER, str(rt.inputs.consumer)])
        # and nothing writes to the KV buckets any more, scan after scan
        before = await _kv_sequences(bus)
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 3, DEADLINE)
        assert await _kv_sequences(bus) == before
        assert not rt.owned and rt.loads == N

    # Input while no conversation service runs: kept in JIDO_CONV_IN, it wakes its conversation.
    await bus.js_publish(subjects.conversation_in(P, "idle-0"), bus.envelope(UserMessage(text="while down")))
    async with running_service(config, llm, ToolsDouble(), settings) as rt:
        # serving at once, having loaded nothing but the conversation that got input
        await answers.wait(lambda: len(answers.by_conversation["idle-0"]) == 2)
        scans = rt.scans
        await rt.wait_until(lambda: rt.scans >= scans + 2, DEADLINE)
        assert rt.loads == 1
        # a past conversation that gets a message answers it, its history intact
        await client.send_event("idle-7", UserMessage.TYPE, {"text": "remember me?"})
        await answers.wait(lambda: len(answers.by_conversation["idle-7"]) == 2)
        assert answers.by_conversation["idle-7"] == ["re: hello idle-7", "re: remember me?"]
        last = llm.requests[-1]
        assert [m["content"] for m in last.messages if m["role"] in ("user", "assistant")] == [
            "hello idle-7",
            "re: hello idle-7",
            "remember me?",
        ]
        assert answers.by_conversation["idle-0"] == ["re: hello idle-0", "re: while down"]
        assert rt.loads == 2


async def test_release_and_reload_in_the_middle_of_use_lose_and_duplicate_nothing(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas, a short idle timeout: the conversation is released and loaded again
    (by either replica) between messages, and messages arrive at the worst moments of a
    release: after its actor stopped reading but before its key went (a waker then finds
    it held), and right after the key went."""
    settings = RuntimeSettings(lease_ttl_s=1.5, idle_timeout_s=0.2, list_tools_patience_s=0.0)
    llm = EchoLlm()
    answers = Answers()
    await answers.start(bus)
    client = conversations(bus)
    cid = "busy"
    out = await follow(bus, cid)
    sent: list[str] = []
    #: (LLM requests needed, text): published from inside the first release, once the model has
    #: answered that many messages, at "unmark" (key still held) or at "delete" (key gone)
    inject: dict[str, list[tuple[int, str]]] = {"unmark": [], "delete": []}

    async def publish(text: str) -> None:
        sent.append(text)
        await bus.js_publish(subjects.conversation_in(P, cid), bus.envelope(UserMessage(text=text)))

    async def maybe_inject(where: str) -> None:
        queue = inject[where]
        if queue and len(llm.requests) >= queue[0][0]:
            await publish(queue.pop(0)[1])

    def hook(rt: Runtime) -> None:
        unmark = rt.loaded.unmark

        async def unmark_then(key: str, revision: int | None = None) -> None:
            await maybe_inject("unmark")  # the key still names this replica
            await unmark(key, revision)
            await maybe_inject("delete")  # the key gone

        monkeypatch.setattr(rt.loaded, "unmark", unmark_then)

    rounds = 6
    async with (
        running_service(config, llm, ToolsDouble(), settings, instance="a") as a,
        running_service(config, llm, ToolsDouble(), settings, instance="b") as b,
    ):
        hook(a)
        hook(b)
        await client.start(cid)
        n = 0

        def answered(count: int) -> Callable[[], bool]:
            return lambda: len(answers.by_conversation.get(cid, [])) >= count

        for round_ in range(rounds):
            # a message through the front door; the next one arrives during the release
            # that follows its answer; a third one on the input stream once that is answered
            first, second, third = n + 1, n + 2, n + 3
            n = third
            inject["unmark" if round_ % 2 else "delete"].append((first, f"m{second}"))
            sent.append(f"m{first}")
            await client.send_event(cid, UserMessage.TYPE, {"text": f"m{first}"})
            await answers.wait(answered(second))
            await publish(f"m{third}")
            await answers.wait(answered(third))
        await asyncio.gather(a.wait_until(a.settled, DEADLINE), b.wait_until(b.settled, DEADLINE))
        timeline = (await client.get_projection(cid, "timeline")).value

    texts = [e["data"]["text"] for e in timeline if e["type"] == UserMessage.TYPE]
    assert texts == sent == [f"m{i}" for i in range(1, n + 1)]
    assert answers.by_conversation[cid] == [f"re: m{i}" for i in range(1, n + 1)]
    assert len(llm.requests) == n
    ids = [e["id"] for e in timeline]
    assert len(ids) == len(set(ids))
    published = [e.id for e in out.events if e.type != "conversation.assistant.delta"]
    assert sorted(published) == sorted(ids)
    # released and loaded again at least once a round (by either replica)
    assert a.loads + b.loads >= rounds + 1
