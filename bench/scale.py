"""Many loaded conversations on one replica (issue 31, point 3).

    python bench/scale.py [--n 10 10000] [--turns 20] [--probes 5] [--idle-window 10]

For each N (a nats-server of its own each time, temporary store, the conversation
service in this process with an instant LLM double, so the figures are the
runtime's own cost):

* loads N conversations and keeps them loaded: each one started and sent one
  message through the front door, answered (idle timeout far away);
* per-turn time on a few of them (``--probes`` conversations, ``--turns`` turns
  each, one at a time: send a message, wait for its answer), median and p90;
* the consumers on ``JIDO_CONV_IN`` (stream info: none per conversation);
* KV writes per second while everything is idle: messages on ``$KV.>`` counted
  with a core subscription over ``--idle-window`` seconds (goal 0; lease
  renewals count here).

Then the per-turn overhead of the largest N against the smallest (goal <= 1.2).
Figures only, no assertions.
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

from jidocode.services.conversation.ports import LlmRequest, LlmResult, LlmTokenUsage
from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.service import serve
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, decode, encode
from jidocode.shared.events.conversation import AssistantMessage, UserMessage
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCatalog, ToolResult
from jidocode.shared.natsserver import NatsServer

P = "scale"
#: Conversations started and sent their message at once while loading.
LOAD_CONCURRENCY = 100


class AnswerLlm:
    """Answers every request at once, without tool calls."""

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        return LlmResult(content="ok", usage=LlmTokenUsage(prompt_tokens=1, completion_tokens=1))


class NoTools:
    async def run(self, *a: Any, **k: Any) -> ToolResult:
        return ToolResult(ok=True, data="")

    async def cancel(self, *a: Any, **k: Any) -> None:
        return None


class Answers:
    """Counts answered conversations; wakes waiters on each answer."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.changed = asyncio.Event()

    async def on_msg(self, msg: Any) -> None:
        env = decode(msg.data, msg.headers)
        if env.type == AssistantMessage.TYPE and env.conversation_id:
            self.count[env.conversation_id] = self.count.get(env.conversation_id, 0) + 1
            changed, self.changed = self.changed, asyncio.Event()
            changed.set()

    async def wait(self, predicate: Callable[[], bool], timeout: float) -> None:
        async def _wait() -> None:
            while not predicate():
                await self.changed.wait()

        await asyncio.wait_for(_wait(), timeout)


async def serve_tool_list(bus: Bus) -> None:
    """Answer ``list_tools`` as the project service would (the bench runs none: without an
    answer every model call would wait for the client's retry of "nobody answered")."""
    reply = encode(Envelope.new(ToolCatalog(tools=[]), source="bench/project"))[0]

    async def _cb(msg: Any) -> None:
        await msg.respond(reply)

    await bus.nc.subscribe(subjects.project(P, "list_tools"), cb=_cb)
    await bus.nc.flush()


async def load(bus: Bus, answers: Answers, n: int) -> float:
    """Start ``n`` conversations and have each answer one message; the seconds it took."""
    client = ConversationsClient(bus, P, timeout=120)
    gate = asyncio.Semaphore(LOAD_CONCURRENCY)

    async def one(cid: str) -> None:
        async with gate:
            await client.start(cid)
            await client.send_event(cid, UserMessage.TYPE, {"text": f"hello {cid}"})

    t0 = time.perf_counter()
    await asyncio.gather(*(one(f"c{i}") for i in range(n)))
    await answers.wait(lambda: len(answers.count) >= n, 60 + n * 0.1)
    return time.perf_counter() - t0


async def turns(bus: Bus, answers: Answers, cids: list[str], per: int) -> list[float]:
    """Seconds per turn: a message sent, its answer out; one turn at a time."""
    client = ConversationsClient(bus, P, timeout=60)
    took: list[float] = []
    for i in range(per):
        for cid in cids:
            before = answers.count.get(cid, 0)
            t0 = time.perf_counter()
            await client.send_event(cid, UserMessage.TYPE, {"text": f"turn {i}"})
            await answers.wait(lambda c=cid, b=before: answers.count.get(c, 0) > b, 60)  # type: ignore[misc]
            took.append(time.perf_counter() - t0)
    return took


async def kv_writes_per_second(bus: Bus, seconds: float) -> float:
    """Messages on ``$KV.>`` per second over ``seconds`` (a measuring window, not a synchronisation)."""
    seen = [0]

    async def _count(msg: Any) -> None:
        seen[0] += 1

    sub = await bus.nc.subscribe("$KV.>", cb=_count)
    await bus.nc.flush()
    await asyncio.sleep(seconds)
    await sub.unsubscribe()
    return seen[0] / seconds


async def one_size(n: int, args: argparse.Namespace) -> float:
    """The figures for ``n`` loaded conversations (printed); returns the median turn in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", sync="default").start()
        config = Config(nats_url=server.url, jido_home=Path(tmp) / "home", instance="scale")
        settings = RuntimeSettings(idle_timeout_s=24 * 3600.0, list_tools_patience_s=0.0)
        stop, started = asyncio.Event(), asyncio.Event()
        runtimes: list[Runtime] = []
        task = asyncio.create_task(
            serve(
                config,
                stop,
                llm=AnswerLlm(),
                tools=NoTools(),
                settings=settings,
                started=started,
                on_runtime=runtimes.append,
            )
        )
        bus: Bus | None = None
        try:
            await asyncio.wait_for(started.wait(), 60)
            bus = await Bus.connect(config, "bench")
            registry = await bus.kv(subjects.BUCKET_PROJECTS, history=1)
            info = ProjectInfo(project_id=P, root_path=str(Path(tmp)), started_at="2026-01-01T00:00:00Z")
            await registry.put(P, info.model_dump_json().encode())
            await serve_tool_list(bus)
            answers = Answers()
            await bus.nc.subscribe(subjects.conversation_out_filter(P), cb=answers.on_msg)
            await bus.nc.flush()
            made = await load(bus, answers, n)
            loaded = len(runtimes[0].owned)
            probes = [f"c{i}" for i in range(min(args.probes, n))]
            took = await turns(bus, answers, probes, args.turns)
            consumers = (await bus.js.stream_info(subjects.STREAM_CONV_IN)).state.consumer_count
            idle = await kv_writes_per_second(bus, args.idle_window)
            median = statistics.median(took)
            p90 = sorted(took)[int(0.9 * (len(took) - 1))]
            print(
                f"N={n:,}: loaded and answered in {made:.1f} s ({loaded:,} loaded); per turn "
                f"median {median * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms ({len(took)} turns on "
                f"{len(probes)} conversations); {consumers} consumer(s) on {subjects.STREAM_CONV_IN}; "
                f"idle: {idle:.2f} KV writes/s over {args.idle_window:.0f} s",
                flush=True,
            )
            return median
        finally:
            if bus is not None:
                await bus.close()
            stop.set()
            await asyncio.wait_for(task, 300)
            server.stop()


async def main(args: argparse.Namespace) -> None:
    sizes = sorted(set(args.n))
    medians = {n: await one_size(n, args) for n in sizes}
    small, large = sizes[0], sizes[-1]
    if large != small:
        print(
            f"per-turn overhead, {large:,} loaded / {small:,} loaded: "
            f"{medians[large] / medians[small]:.2f} (goal <= 1.2)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[10, 10_000], help="loaded conversations")
    parser.add_argument("--turns", type=int, default=20, help="turns per probed conversation")
    parser.add_argument("--probes", type=int, default=5, help="conversations whose turns are timed")
    parser.add_argument("--idle-window", type=float, default=10.0, help="seconds of counting idle KV writes")
    asyncio.run(main(parser.parse_args()))
