"""Conversation runtime benchmark on a real nats-server (loopback, temporary store).

    python bench/conversation.py [--latency 500] [--burst 2000] [--conversations 200] [--per-conv 20]
                                 [--journal 10000] [--long 5000] [--turns 40] [--sync default|always]
                                 [--past 1000] [--only-idle]

Measures, with the conversation service (and the engine, which registers the
bench's project) running in this process (an instant LLM double, so the
figures are the runtime's own cost):

* ingest-to-projection latency: publish one external event to the input
  stream, wait until its timeline entry is journaled and published (median, p99);
* signals applied per second for one conversation (a burst on its input);
* signals applied per second over 200 conversations at once;
* rebuild time of a conversation from a 10,000-entry journal (read + replay;
  goal ≤ 0.5 s), and the pure replay alone;
* ``llm_context`` of that 10,000-entry conversation: the first one after the
  rebuild (every entry read once) and the one of each later LLM request (only
  the new entries);
* flat in conversation length: the system's time per one-tool turn (two LLM
  calls, one tool call, instant doubles) in a conversation that already holds
  5,000 entries, divided by the time in a fresh one (goal ≤ 1.2); the same
  ratio for the pure reducer alone;
* idle is free (on a server of its own, default heartbeat TTL): KV writes per
  second while 1,000 conversations are loaded, then once they are idle and
  released (goal: the replica's heartbeat alone, one write every third of the
  TTL, however many are loaded: decision 0327), and the input stream's consumers then; restart-to-ready
  of the conversation service (start until it answers ``$SRV.PING``, best of
  three) with 0 and with 1,000 past conversations, and their ratio (goal ≤ 1.2).

The synthetic journals are made by the real reducer (a realistic mix of
turns); that takes a second, not minutes, now that a step costs the same at
any length.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jidocode.services.conversation.codec import to_payload
from jidocode.services.conversation.core import (
    Signal,
    initial_state,
    llm_context,
    replay,
    run_to_idle,
)
from jidocode.services.conversation.journal import Journal
from jidocode.services.conversation.ports import LlmRequest, LlmResult, LlmTokenUsage, LlmToolCall
from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.service import serve
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.services.registry import load_serve
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, decode, encode, new_id
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.conversation import AssistantMessage, LlmRequested, UserMessage
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCatalog, ToolResult, ToolSpec
from jidocode.shared.events.turn import TurnEnded
from jidocode.shared.natsserver import NatsServer

#: Project of the synthetic journal: the rebuild reads the journal directly, no registry needed.
P = "bench"
#: LLM requests timed for the llm_context figure.
CONTEXT_REQUESTS = 200


class InstantLlm:
    """Asks for one tool call after a user message, answers after the tool's result."""

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        usage = LlmTokenUsage(prompt_tokens=1, completion_tokens=1)
        if request.messages[-1]["role"] == "user":
            call = LlmToolCall(id="c", name="read_file", arguments={"path": "a"})
            return LlmResult(tool_calls=[call], usage=usage)
        return LlmResult(content="ok", usage=usage)


class InstantTools:
    async def run(self, *a: Any, **k: Any) -> ToolResult:
        return ToolResult(ok=True, data="x" * 200)

    async def cancel(self, *a: Any, **k: Any) -> None:
        return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def approval(i: int) -> Envelope:
    return Envelope(
        id=new_id(),
        source="bench",
        type="conversation.approval.response",
        data={"request_id": f"r{i}", "decision": "deny"},
    )


class Waiter:
    """Output events by id, and a count of them."""

    def __init__(self) -> None:
        self.seen: dict[str, asyncio.Future[float]] = {}
        self.count = 0
        self.target = 0
        self.all_done = asyncio.Event()

    def expect(self, event_id: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.seen[event_id] = fut
        return fut

    async def on_msg(self, msg: Any) -> None:
        env = decode(msg.data, msg.headers)
        fut = self.seen.pop(env.id, None)
        if fut is not None and not fut.done():
            fut.set_result(time.perf_counter())
        self.count += 1
        if self.target and self.count >= self.target:
            self.all_done.set()


async def open_project(bus: Bus, root: Path) -> str:
    """The id of the project on ``root``, started through the engine (which may still be starting)."""
    engine = EngineClient(bus, timeout=30)
    for _ in range(200):
        try:
            return (await engine.start_project(str(root))).project_id
        except ServiceUnavailable:
            await asyncio.sleep(0.05)
    raise ServiceUnavailable("the engine started by the bench does not answer")


async def start(bus: Bus, pid: str, cid: str) -> None:
    await ConversationsClient(bus, pid, timeout=30).start(cid)


async def wait_owned(bus: Bus, pid: str, cid: str) -> None:
    """The conversation answers a projection from its live owner (it was started by this process)."""
    await ConversationsClient(bus, pid).get_projection(cid, "diagnostics")


async def bench_latency(bus: Bus, pid: str, n: int) -> list[float]:
    await start(bus, pid, "lat")
    waiter = Waiter()
    await bus.nc.subscribe(subjects.conversation_out_filter(pid, "lat"), cb=waiter.on_msg)
    out: list[float] = []
    for i in range(n):
        env = approval(i)
        fut = waiter.expect(env.id)
        t0 = time.perf_counter()
        await bus.js_publish(subjects.conversation_in(pid, "lat"), env)
        t1 = await asyncio.wait_for(fut, 10)
        out.append((t1 - t0) * 1000)
    return out


async def publish_many(bus: Bus, items: list[tuple[str, Envelope]]) -> None:
    futures = []
    for subject, env in items:
        payload, headers = encode(env, jetstream=True)
        futures.append(await bus.js.publish_async(subject, payload, headers=headers))
    await asyncio.gather(*futures)


async def bench_burst(bus: Bus, pid: str, conversations: list[str], per_conv: int) -> float:
    for cid in conversations:
        await start(bus, pid, cid)
    waiter = Waiter()
    waiter.target = len(conversations) * per_conv
    subs = [
        await bus.nc.subscribe(subjects.conversation_out_filter(pid, cid), cb=waiter.on_msg)
        for cid in conversations
    ]
    for cid in conversations:
        await wait_owned(bus, pid, cid)
    items = [
        (subjects.conversation_in(pid, cid), approval(i)) for i in range(per_conv) for cid in conversations
    ]
    t0 = time.perf_counter()
    await publish_many(bus, items)
    await asyncio.wait_for(waiter.all_done.wait(), 600)
    elapsed = time.perf_counter() - t0
    for sub in subs:
        await sub.unsubscribe()
    return waiter.target / elapsed


def synthetic_journal(cid: str, n: int, pid: str = P) -> list[Signal]:
    """A realistic mix: user message, LLM call with a tool call, tool result, final answer."""
    state = initial_state(pid, cid)
    i = 0
    while len(state.timeline) < n:
        i += 1
        state, _ = run_to_idle(
            state,
            [
                Signal(
                    id=f"u{i}",
                    type="conversation.user.message",
                    source="b",
                    data={"text": f"message {i}"},
                    correlation_id=f"u{i}",
                    time="2026-01-01T00:00:00Z",
                )
            ],
        )
        req = state.pending_llm
        assert req is not None
        state, _ = run_to_idle(
            state,
            [
                Signal(
                    id=f"{req}:result",
                    type="conversation.llm.completed",
                    source="conversation/llm",
                    data={
                        "request_id": req,
                        "content": "",
                        "tool_calls": [{"id": "c", "name": "read_file", "arguments": {"path": "a"}}],
                        "usage": {"prompt_tokens": 10},
                    },
                    correlation_id=f"u{i}",
                    causation_id=req,
                    time="2026-01-01T00:00:00Z",
                )
            ],
        )
        call = state.pending_tool_calls[0]
        state, _ = run_to_idle(
            state,
            [
                Signal(
                    id=f"{call.request_id}:result",
                    type="conversation.tool.completed",
                    source="conversation/tools",
                    data={
                        "request_id": call.request_id,
                        "call_id": "c",
                        "name": "read_file",
                        "data": "x" * 200,
                    },
                    correlation_id=f"u{i}",
                    causation_id=call.request_id,
                    time="2026-01-01T00:00:00Z",
                )
            ],
        )
        req = state.pending_llm
        assert req is not None
        state, _ = run_to_idle(
            state,
            [
                Signal(
                    id=f"{req}:result",
                    type="conversation.llm.completed",
                    source="conversation/llm",
                    data={"request_id": req, "content": f"answer {i}", "tool_calls": [], "usage": {}},
                    correlation_id=f"u{i}",
                    causation_id=req,
                    time="2026-01-01T00:00:00Z",
                )
            ],
        )
    return list(state.timeline[:n])


async def store_journal(bus: Bus, pid: str, cid: str, entries: list[Signal]) -> None:
    items = []
    for entry in entries:
        payload, headers = to_payload(entry, pid, cid)
        items.append(bus.js.publish_async(subjects.journal(pid, cid), payload, headers=headers))
    acks = [await f for f in items]
    await asyncio.gather(*acks)


async def bench_rebuild(bus: Bus, entries: list[Signal]) -> tuple[float, float, int]:
    cid = "rebuild"
    n = len(entries)
    await store_journal(bus, P, cid, entries)
    journal = Journal(bus)
    runs = []
    for _ in range(3):  # best of three: the machine may be busy
        t0 = time.perf_counter()
        read, _ = await journal.read(P, cid)
        t1 = time.perf_counter()
        state = replay(P, cid, read)
        t2 = time.perf_counter()
        runs.append((t2 - t0, t0, t1, t2))
    _, t0, t1, t2 = min(runs)
    assert len(state.timeline) == n, len(state.timeline)
    return t1 - t0, t2 - t1, len(read)


def bench_llm_context(entries: list[Signal], n: int) -> tuple[float, float, float]:
    """Seconds of ``llm_context`` of a rebuilt ``n``-entry conversation: the first one, the one
    of each later LLM request (the entries after ``n`` applied one by one), and the same
    request's context built from scratch (what every request cost before)."""
    timeline = replay(P, "ctx", entries[:n]).timeline
    t0 = time.perf_counter()
    llm_context(timeline)
    cold = time.perf_counter() - t0
    later: list[float] = []
    scratch: list[float] = []
    for entry in entries[n:]:
        timeline = timeline.append(entry)
        if entry.type != LlmRequested.TYPE:
            continue
        t0 = time.perf_counter()
        incremental = llm_context(timeline)
        later.append(time.perf_counter() - t0)
        if len(scratch) < 10:
            t0 = time.perf_counter()
            assert llm_context(list(timeline)) == incremental
            scratch.append(time.perf_counter() - t0)
    return cold, statistics.median(later), statistics.median(scratch)


def _user(mid: str) -> Signal:
    return Signal(
        id=mid,
        type=UserMessage.TYPE,
        source="b",
        data={"text": mid},
        correlation_id=mid,
        time="2026-01-01T00:00:00Z",
    )


def whole_turns(entries: list[Signal]) -> list[Signal]:
    """``entries`` up to the end of their last whole turn: a turn cut short would be carried on
    when the conversation loads, and take the first timed message into it (no answer of its own)."""
    return entries[: max(i for i, e in enumerate(entries) if e.type == TurnEnded.TYPE) + 1]


def _finish_turn(state: Any) -> Any:
    """The rest of a one-tool turn whose user message was just applied."""
    for step in range(3):
        if step == 1:
            call = state.pending_tool_calls[0]
            data: dict[str, Any] = {"request_id": call.request_id, "call_id": "c", "name": "read_file"}
            signal = Signal(
                id=f"{call.request_id}:result",
                type="conversation.tool.completed",
                source="conversation/tools",
                data={**data, "data": "x" * 200},
                correlation_id=call.correlation_id,
                causation_id=call.request_id,
            )
        else:
            req = state.pending_llm
            calls = [{"id": "c", "name": "read_file", "arguments": {"path": "a"}}] if step == 0 else []
            signal = Signal(
                id=f"{req}:result",
                type="conversation.llm.completed",
                source="conversation/llm",
                data={"request_id": req, "content": "" if calls else "ok", "tool_calls": calls, "usage": {}},
                correlation_id=next(e.correlation_id for e in reversed(state.timeline) if e.id == req),
                causation_id=req,
            )
        state, _ = run_to_idle(state, [signal])
    return state


def bench_reducer_turns(entries: list[Signal], turns: int) -> tuple[float, float]:
    """Median seconds of one one-tool turn through the pure reducer: fresh, and after ``entries``."""

    def turn_times(state: Any) -> list[float]:
        out = []
        for i in range(turns):
            t0 = time.perf_counter()
            state, _ = run_to_idle(state, [_user(f"r{i}")])
            state = _finish_turn(state)
            out.append(time.perf_counter() - t0)
        return out

    fresh = turn_times(initial_state(P, "fresh"))
    long = turn_times(replay(P, "long", whole_turns(entries)))
    return statistics.median(fresh), statistics.median(long)


async def bench_long_conversation(
    bus: Bus, pid: str, entries: list[Signal], turns: int
) -> tuple[float, float]:
    """Median seconds of one one-tool turn, through the whole service: fresh, and after ``entries``.

    The turn is timed from sending the user message (``send_event``) to its
    answer on the output subject; the two conversations take turns, so a
    busy moment of the machine weighs on both alike.
    """
    client = ConversationsClient(bus, pid, timeout=30)
    entries = whole_turns(entries)
    await store_journal(bus, pid, "long", entries)
    answers: dict[str, asyncio.Future[float]] = {}

    async def on_msg(msg: Any) -> None:
        env = decode(msg.data, msg.headers)
        fut = answers.pop(env.correlation_id or "", None) if env.type == AssistantMessage.TYPE else None
        if fut is not None and not fut.done():
            fut.set_result(time.perf_counter())

    times: dict[str, list[float]] = {"fresh": [], "long": []}
    for cid in times:
        await client.start(cid)
        await bus.nc.subscribe(subjects.conversation_out_filter(pid, cid), cb=on_msg)
        await wait_owned(bus, pid, cid)
    for i in range(turns + 2):
        order = ["fresh", "long"] if i % 2 else ["long", "fresh"]
        for cid in order:
            mid = f"{cid}-{i}"
            fut = answers[mid] = asyncio.get_running_loop().create_future()
            t0 = time.perf_counter()
            await client.send_event(cid, UserMessage.TYPE, {"text": mid}, event_id=mid, correlation_id=mid)
            t1 = await asyncio.wait_for(fut, 30)
            if i >= 2:  # the first turns warm up (a rebuilt conversation reads its context once)
                times[cid].append(t1 - t0)
    timeline = (await client.get_projection("long", "diagnostics")).value
    assert timeline["timeline_length"] >= len(entries) + 8 * turns, timeline
    return statistics.median(times["fresh"]), statistics.median(times["long"])


async def serve_tool_list(bus: Bus, pid: str) -> None:
    """Answer ``list_tools`` as the project service would (the bench runs no project service)."""
    catalog = ToolCatalog(tools=[ToolSpec(name="read_file")])
    reply = encode(Envelope.new(catalog, source="bench/project"))[0]

    async def _cb(msg: Any) -> None:
        await msg.respond(reply)

    await bus.nc.subscribe(subjects.project(pid, "list_tools"), cb=_cb)
    await bus.nc.flush()


class AnswerLlm:
    """Answers every request at once, without tool calls."""

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        return LlmResult(content="ok", usage=LlmTokenUsage(prompt_tokens=1, completion_tokens=1))


class Service:
    """The conversation service in this process, started and stopped at will."""

    def __init__(self, config: Config, settings: RuntimeSettings) -> None:
        self.config = config
        self.settings = settings
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.runtime: Runtime | None = None

    async def start(self, probe: Bus) -> float:
        """Seconds from starting the service until it answers ``$SRV.PING``."""
        self.stop = asyncio.Event()
        started = asyncio.Event()
        runtimes: list[Runtime] = []
        t0 = time.perf_counter()
        self.task = asyncio.create_task(
            serve(
                self.config,
                self.stop,
                llm=AnswerLlm(),
                tools=InstantTools(),
                settings=self.settings,
                started=started,
                on_runtime=runtimes.append,
            )
        )
        await asyncio.wait_for(started.wait(), 60)
        while True:
            try:
                await probe.nc.request(subjects.srv("PING", "conversation"), b"", timeout=1)
                break
            except Exception:
                continue
        elapsed = time.perf_counter() - t0
        self.runtime = runtimes[0]
        return elapsed

    async def close(self) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 120)


async def kv_sequences(bus: Bus) -> int:
    """Messages ever written to the records and leases buckets."""
    total = 0
    for bucket in (subjects.BUCKET_OWNERS, subjects.BUCKET_CONVERSATIONS):
        total += int((await bus.js.stream_info(f"KV_{bucket}")).state.last_seq)
    return total


async def writes_per_second(bus: Bus, seconds: float) -> float:
    before = await kv_sequences(bus)
    await asyncio.sleep(seconds)  # a measuring window, not a synchronisation
    return (await kv_sequences(bus) - before) / seconds


async def restarts(services: list[tuple[Service, Bus]], runs: int) -> list[list[float]]:
    """Restart-to-ready of each service, ``runs`` times, taking turns (so a busy moment of the
    machine weighs on each alike); every restart must load nothing."""
    times: list[list[float]] = [[] for _ in services]
    for _ in range(runs):
        for index, (service, probe) in enumerate(services):
            times[index].append(await service.start(probe))
            assert service.runtime is not None and service.runtime.loads == 0, "a restart loaded something"
            await service.close()
    return times


async def make_past(
    service: Service, probe: Bus, count: int, settings: RuntimeSettings
) -> tuple[float, float, int]:
    """``count`` conversations, each started, asked one thing and answered, then released once idle;
    in two halves, so at most half are loaded at once (nats-server allows 1,000 consumers per
    stream, and each loaded conversation reads its input through one). Returns the seconds it
    took, the KV writes per second while the first half was loaded, and how many that was."""
    await service.start(probe)
    runtime = service.runtime
    assert runtime is not None
    client = ConversationsClient(probe, P, timeout=60)
    answered: set[str] = set()
    target = [0]
    enough = asyncio.Event()

    async def on_answer(msg: Any) -> None:
        env = decode(msg.data, msg.headers)
        if env.type == AssistantMessage.TYPE and env.conversation_id:
            answered.add(env.conversation_id)
            if len(answered) >= target[0]:
                enough.set()

    sub = await probe.nc.subscribe(subjects.conversation_out_filter(P), cb=on_answer)
    gate = asyncio.Semaphore(50)

    async def one(cid: str) -> None:
        async with gate:
            await client.start(cid)
            await client.send_event(cid, UserMessage.TYPE, {"text": f"hello {cid}"})

    made = loaded_rate = 0.0
    loaded = 0
    for first, last in ((0, count // 2), (count // 2, count)):
        target[0] = last
        enough.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(f"past-{i}") for i in range(first, last)))
        await asyncio.wait_for(enough.wait(), 600)
        made += time.perf_counter() - t0
        if first == 0:
            loaded = len(runtime.owned)
            loaded_rate = await writes_per_second(probe, settings.lease_ttl_s)
        await runtime.wait_until(runtime.settled, settings.idle_timeout_s * 4 + 120)
    await sub.unsubscribe()
    assert runtime.loads == count, runtime.loads
    return made, loaded_rate, loaded


async def bench_idle_and_restart(args: argparse.Namespace) -> None:
    """Idle cost, and restart-to-ready with 0 and with ``args.past`` past conversations
    (two servers of their own, restarted in turns)."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = RuntimeSettings(idle_timeout_s=args.idle_timeout)
        servers: list[NatsServer] = []
        probes: list[Bus] = []
        services: list[Service] = []
        try:
            for name in ("empty", "past"):
                servers.append(NatsServer(store_dir=Path(tmp) / name / "js", sync=args.sync).start())
                config = Config(nats_url=servers[-1].url, jido_home=Path(tmp) / name / "home", instance=name)
                probes.append(await Bus.connect(config, "bench"))
                services.append(Service(config, settings))
                await services[-1].start(probes[-1])  # creates the streams and buckets
                await services[-1].close()
            probe, service = probes[1], services[1]
            root = Path(tmp) / "project"
            root.mkdir()
            registry = await probe.kv(subjects.BUCKET_PROJECTS, history=1)
            info = ProjectInfo(project_id=P, root_path=str(root), started_at="2026-01-01T00:00:00Z")
            await registry.put(P, info.model_dump_json().encode())
            made, loaded_rate, loaded = await make_past(service, probe, args.past, settings)
            idle_rate = await writes_per_second(probe, 2 * settings.lease_ttl_s)
            consumers = (await probe.js.stream_info(subjects.STREAM_CONV_IN)).state.consumer_count
            await service.close()
            print(
                f"{args.past:,} conversations made and answered in {made:.1f} s; "
                f"{loaded_rate:.1f} KV writes/s while {loaded:,} were loaded (the heartbeat: ~0.3/s whatever is loaded)"
            )
            print(
                f"idle: {idle_rate:.2f} KV writes/s with {args.past:,} idle conversations "
                f"(measured over {2 * settings.lease_ttl_s:.0f} s; goal: the heartbeat alone, ~0.3/s), "
                f"{consumers} consumer(s) on {subjects.STREAM_CONV_IN}"
            )
            empty, past = await restarts(list(zip(services, probes, strict=True)), args.restarts)
            print(
                f"restart-to-ready (start until $SRV.PING answers, {args.restarts} restarts each, "
                f"nothing loaded): 0 past conversations best {min(empty) * 1000:.0f} ms, median "
                f"{statistics.median(empty) * 1000:.0f} ms; {args.past:,} past conversations best "
                f"{min(past) * 1000:.0f} ms, median {statistics.median(past) * 1000:.0f} ms; ratio of "
                f"medians {statistics.median(past) / statistics.median(empty):.2f} (goal <= 1.2)"
            )
        finally:
            for bus in probes:
                await bus.close()
            for server in servers:
                server.stop()


async def main(args: argparse.Namespace) -> None:
    if args.only_idle:
        await bench_idle_and_restart(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", sync=args.sync).start()
        try:
            config = Config(nats_url=server.url, jido_home=Path(tmp) / "home", instance="bench")
            # The 10,000-entry journal is generated and stored before the service runs,
            # so the rebuild is measured on a quiet process.
            # (and goes on for the LLM requests of the llm_context figure)
            entries = synthetic_journal("rebuild", args.journal + 8 * CONTEXT_REQUESTS)
            stop = asyncio.Event()
            started = asyncio.Event()
            task = asyncio.create_task(
                serve(
                    config,
                    stop,
                    llm=InstantLlm(),
                    tools=InstantTools(),
                    settings=RuntimeSettings(),
                    started=started,
                )
            )
            engine = asyncio.create_task(load_serve("engine")(config, stop))
            await asyncio.wait_for(started.wait(), 30)
            bus = await Bus.connect(config, "bench")
            try:
                root = Path(tmp) / "project"
                root.mkdir()
                pid = await open_project(bus, root)
                read_s, replay_s, count = await bench_rebuild(bus, entries[: args.journal])
                print(
                    f"rebuild from a {count:,}-entry journal: {read_s + replay_s:.3f} s "
                    f"(read {read_s:.3f} s + replay {replay_s:.3f} s; goal <= 0.5 s)"
                )
                cold, warm, scratch = bench_llm_context(entries, args.journal)
                print(
                    f"llm_context of the {count:,}-entry conversation: {cold * 1000:.1f} ms the first time "
                    f"after a rebuild, then {warm * 1e6:.0f} µs per LLM request "
                    f"({scratch * 1000:.1f} ms if built from scratch)"
                )
                await serve_tool_list(bus, pid)
                long_entries = synthetic_journal("long", args.long, pid)
                fresh_s, long_s = await bench_long_conversation(bus, pid, long_entries, args.turns)
                print(
                    f"one-tool turn, whole system: {fresh_s * 1000:.2f} ms fresh, {long_s * 1000:.2f} ms "
                    f"after {len(long_entries):,} entries: ratio {long_s / fresh_s:.2f} (goal <= 1.2)"
                )
                fresh_r, long_r = bench_reducer_turns(synthetic_journal("long", args.long), args.turns * 5)
                print(
                    f"one-tool turn, pure reducer: {fresh_r * 1e6:.0f} µs fresh, {long_r * 1e6:.0f} µs "
                    f"after {args.long:,} entries: ratio {long_r / fresh_r:.2f}"
                )
                lat = await bench_latency(bus, pid, args.latency)
                print(
                    f"ingest-to-projection latency ({len(lat)} events): median {statistics.median(lat):.2f} ms, "
                    f"p99 {pct(lat, 0.99):.2f} ms"
                )
                rate1 = await bench_burst(bus, pid, ["one"], args.burst)
                print(f"one conversation: {rate1:,.0f} signals/s applied ({args.burst} signals)")
                convs = [f"c{i}" for i in range(args.conversations)]
                rate_n = await bench_burst(bus, pid, convs, args.per_conv)
                print(
                    f"{args.conversations} conversations at once: {rate_n:,.0f} signals/s applied "
                    f"({args.conversations * args.per_conv} signals)"
                )
            finally:
                await bus.close()
                stop.set()
                await asyncio.wait_for(asyncio.gather(task, engine), 60)
        finally:
            server.stop()
    await bench_idle_and_restart(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=int, default=500)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--per-conv", type=int, default=20)
    parser.add_argument("--journal", type=int, default=10_000)
    parser.add_argument("--long", type=int, default=5_000, help="entries already in the long conversation")
    parser.add_argument("--turns", type=int, default=40, help="timed turns per conversation")
    parser.add_argument("--sync", choices=("default", "always"), default="default")
    parser.add_argument("--past", type=int, default=1000, help="past conversations of the restart figure")
    parser.add_argument(
        "--idle-timeout", type=float, default=15.0, help="idle timeout of the idle figure, seconds"
    )
    parser.add_argument("--restarts", type=int, default=7, help="restarts timed per figure")
    parser.add_argument("--only-idle", action="store_true", help="only the idle and restart figures")
    asyncio.run(main(parser.parse_args()))
