"""One tool-using turn through the whole system vs a minimal single-process loop, in the same run.

    python bench/turn.py [--rounds 6] [--per-round 20] [--concurrent 200] [--services processes|inline]
                         [--tracing off|memory|bus]

Both sides talk to the same scripted OpenAI-compatible server (zero latency,
stateless one-tool script: user message -> ``read_file(README.md)``, tool
result -> answer), both through real litellm with streaming.

* **system**: the client SDK -> conversation service (one hop; reducer,
  journal in JetStream, projections) -> litellm -> tool runner over
  NATS (policy, quotas, idempotency KV) -> litellm -> answer back to the client,
  on a local nats-server. ``--services processes`` (the default) runs each
  service as a process of its own, as ``jidocode up`` and every deployment do;
  ``--services inline`` runs them all in this process, on the benchmark's own
  event loop (so the client, the scripted model and five services share one core).
* **minimal**: ``litellm.acompletion`` + the tool runner's own
  ``executor.execute`` (the same policy check and tool function) called directly.

``--tracing``: ``off`` (the default: no ``OTEL_*``), ``memory`` (every span into an
in-memory exporter and onto the bus; needs ``--services inline``, where the services
run in this process), ``bus`` (``OTEL_TRACES_EXPORTER=jido`` for every process: spans
onto the bus only).

Rounds alternate between the two. Prints medians, p99s and the ratio
(goal: ≤ 1.15), then the NATS messages of one one-tool turn (every message the
server routes, seen by a subscriber to ``>``, over ``--count-turns`` turns; goal
≤ 25) by kind, then turns per second with ``--concurrent`` conversations each
doing one turn at once (system and minimal, and their ratio: goal ≥ 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jidocode.cli.dev.scripted_llm import ScriptedLlm, one_tool_responder
from jidocode.client import JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.llm.adapter import load_litellm
from jidocode.services.registry import SERVICES, serve_many
from jidocode.services.tool_runner.executor import execute
from jidocode.shared import subjects, telemetry
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import ToolCompleted
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.policy.loader import load_policy
from jidocode.shared.runner import tune_gc
from jidocode.shared.tools import builtin_specs
from jidocode.shared.trust import trust_project

MODEL = "openai/scripted"
#: Goal for the NATS messages of one one-tool turn (issue 27).
MESSAGES_GOAL = 25


def message_kind(subject: str) -> str:
    """A subject with its ids taken out, so the messages of one turn group by what they do."""
    tokens = subject.split(".")
    if tokens[0].startswith("_INBOX"):
        return "_INBOX (replies)"
    if tokens[:2] == ["$JS", "ACK"]:
        return "$JS.ACK (consumer acks)"
    if tokens[:2] == ["$JS", "API"]:
        return ".".join(tokens[:5])
    if tokens[0] == "$KV":
        return ".".join(tokens[:2])
    if tokens[:2] == ["jido", "evt"]:
        return "jido.evt.<p>.<c>." + ".".join(tokens[4:])
    if tokens[:2] == ["jido", "sig"]:
        return subject  # a signal's subject is its type: no ids in it
    if tokens[:2] in (["jido", "conv"], ["jido", "journal"]):
        return f"jido.{tokens[1]}.<p>.<c>" + "".join(f".{t}" for t in tokens[4:])
    return ".".join(tokens[:3])


class MessageKinds:
    """Counts messages by kind; a reply counts under the kind of the request it answers
    (``_INBOX ← <kind>``: the request's reply subject is remembered when it goes by). With
    ``timeline``, also when each message of each turn went by (a turn begins at its ``send_event``)."""

    def __init__(self, *, timeline: bool = False) -> None:
        self.kinds: Counter[str] = Counter()
        #: Reply subjects of the requests seen, and the kind of each request (bounded).
        self._asked: dict[str, str] = {}
        self.timeline = timeline
        #: Per turn, each message's arrival (``perf_counter``) and kind.
        self.turns: list[list[tuple[float, str]]] = []

    def add(self, subject: str, reply: str) -> None:
        kind = message_kind(subject)
        if kind == "_INBOX (replies)":
            asked = self._asked.pop(subject, None)
            if asked:
                kind = f"_INBOX <- {asked}"
            elif reply.startswith("$JS.ACK."):  # a push consumer's delivery: name its stream
                kind = f"_INBOX (deliveries of {reply.split('.')[2]})"
        elif reply:
            if len(self._asked) > 10_000:
                self._asked.pop(next(iter(self._asked)))
            self._asked[reply] = kind
        self.kinds[kind] += 1
        if self.timeline:
            if subject.endswith(".send_event"):
                self.turns.append([])
            if self.turns:
                self.turns[-1].append((time.perf_counter(), kind))


def timeline(turns: list[list[tuple[float, str]]]) -> list[tuple[float, float, str]]:
    """The turns' messages in order: the median time since the turn began, the median gap to
    the message before, and the kind; over the turns whose messages came in the most common
    order (a turn whose messages interleaved otherwise is left out)."""
    if not turns:
        return []
    shape = Counter(tuple(k for _, k in t) for t in turns).most_common(1)[0][0]
    alike = [t for t in turns if tuple(k for _, k in t) == shape]
    rows = []
    for i in range(len(shape)):
        since = statistics.median((t[i][0] - t[0][0]) * 1000 for t in alike)
        gap = statistics.median((t[i][0] - t[i - 1][0]) * 1000 if i else 0.0 for t in alike)
        rows.append((since, gap, alike[0][i][1]))
    return rows


async def count_turn_messages(
    url: str, client: JidoClient, turns: int, *, trace: bool = False
) -> MessageKinds:
    """Every NATS message routed during ``turns`` one-tool turns of ``client``, by kind (and,
    with ``trace``, when each went by)."""
    import nats

    counter = await nats.connect(url)
    seen = MessageKinds(timeline=trace)

    async def _count(msg: Any) -> None:
        seen.add(msg.subject, msg.reply)

    try:
        sub = await counter.subscribe(">", cb=_count)
        await counter.flush()
        for _ in range(turns):
            await client.send_message("read the readme", timeout=60)
        # what the server routed before its answer to this ping is counted (the turns'
        # trailing signals may arrive a moment later: at most a few of the last turn's)
        await counter.flush()
        await sub.unsubscribe()
    finally:
        await counter.close()
    return seen


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def make_project(base: Path) -> Path:
    root = base / "proj"
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
    (root / "README.md").write_text("hello from the benchmark\n" * 20)
    return root


class Minimal:
    """The baseline: litellm and the tool function in one loop, nothing else."""

    def __init__(self, root: Path, api_base: str, jido_home: Path) -> None:
        self.lib = load_litellm()
        self.policy, _ = load_policy(str(root), jido_home=jido_home)
        self.api_base = api_base
        self.tools = [
            {"type": "function", "function": {"name": s["name"], "description": s.get("description", ""),
                                              "parameters": s.get("input_schema") or s.get("parameters")}}
            for s in builtin_specs()
        ]  # fmt: skip

    async def _complete(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        response = await self.lib.acompletion(
            model=MODEL, api_base=self.api_base, api_key="sk-bench", messages=messages, tools=self.tools,
            stream=True, stream_options={"include_usage": True}, max_retries=0, _skip_mcp_handler=True,
        )  # fmt: skip
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in response:
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for tc in delta.tool_calls or []:
                    call = calls.setdefault(tc.index or 0, {"id": "", "name": "", "arguments": ""})
                    call["id"] = tc.id or call["id"]
                    if tc.function is not None:
                        call["name"] = tc.function.name or call["name"]
                        call["arguments"] += tc.function.arguments or ""
        return "".join(text), [calls[i] for i in sorted(calls)]

    async def turn(self, question: str, history: list[dict[str, Any]] | None = None) -> str:
        """One turn; ``history`` (kept across turns, like a conversation) grows with it."""
        messages: list[dict[str, Any]] = history if history is not None else []
        messages.append({"role": "user", "content": question})
        while True:
            text, calls = await self._complete(messages)
            if not calls:
                messages.append({"role": "assistant", "content": text})
                return text
            messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})  # fmt: skip
            for c in calls:
                result = await execute(self.policy, c["name"], json.loads(c["arguments"] or "{}"))
                content = json.dumps(
                    result.data if result.ok else result.error.model_dump() if result.error else None
                )
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})


async def start_processes(config: Config) -> list[asyncio.subprocess.Process]:
    """Every service as its own process (``python -m jidocode.services.<name>``), like ``jidocode up``."""
    env = {**os.environ, "NATS_URL": config.nats_url, "JIDO_CODE_HOME": str(config.jido_home)}
    env["JIDO_LOG_LEVEL"] = "WARNING"
    procs = []
    for name in SERVICES:
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"jidocode.services.{name}",
                env={**env, "JIDO_INSTANCE": f"bench-{name}"},
            )
        )
    return procs


def set_up_tracing(tracing: str) -> None:
    """``off``: no ``OTEL_*``; ``memory``: spans into memory here; ``bus``: every process's onto the bus."""
    if tracing == "memory":
        telemetry.install([SimpleSpanProcessor(InMemorySpanExporter())])
    elif tracing == "bus":
        os.environ["OTEL_TRACES_EXPORTER"] = "jido"  # this process and every service process
    else:
        for name in (
            "OTEL_TRACES_EXPORTER",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ):
            os.environ.pop(name, None)
    print(f"tracing: {tracing}")


def ms(v: float) -> str:
    return f"{v * 1000:7.2f} ms"


async def timed_rounds(client: JidoClient, minimal: Minimal, rounds: int, per_round: int) -> None:
    """The one-tool turn, system and minimal in alternating rounds; prints medians and the ratio."""
    ours: list[float] = []
    base_times: list[float] = []
    for _ in range(rounds):
        # each round: a fresh conversation on both sides (its first turn untimed),
        # then per_round turns on a history that grows the same way on both sides
        await client.reset_session()
        await client.send_message("read the readme", timeout=60)
        for _ in range(per_round):
            t0 = time.perf_counter()
            await client.send_message("read the readme", timeout=60)
            ours.append(time.perf_counter() - t0)
        history: list[dict[str, Any]] = []
        await minimal.turn("read the readme", history)
        for _ in range(per_round):
            t0 = time.perf_counter()
            await minimal.turn("read the readme", history)
            base_times.append(time.perf_counter() - t0)
    m_ours, m_base = statistics.median(ours), statistics.median(base_times)
    print(f"one-tool turn, {len(ours)} turns each (2 LLM calls + 1 tool per turn)")
    print(f"  system : median {ms(m_ours)}  p99 {ms(pct(ours, 0.99))}")
    print(f"  minimal: median {ms(m_base)}  p99 {ms(pct(base_times, 0.99))}")
    print(f"  ratio (median): {m_ours / m_base:.2f}   (goal <= 1.15)")


async def print_turn_messages(url: str, client: JidoClient, count_turns: int, *, trace: bool = False) -> None:
    """The NATS messages of one one-tool turn, by kind (before the concurrent conversations
    are loaded: their consumers' heartbeats would be counted as the turns' messages); with
    ``trace``, the turn's messages in order with their median times."""
    await client.reset_session()
    await client.send_message("read the readme", timeout=60)
    seen = await count_turn_messages(url, client, count_turns, trace=trace)
    per_turn_msgs = sum(seen.kinds.values()) / count_turns
    print(
        f"NATS messages per one-tool turn: {per_turn_msgs:.1f}   (goal <= {MESSAGES_GOAL}; {count_turns} turns)"
    )
    for kind, n in seen.kinds.most_common():
        print(f"  {n / count_turns:5.1f}  {kind}")
    if trace:
        print("one turn, message by message (median ms since the turn began, + the gap before it):")
        for since, gap, kind in timeline(seen.turns[1:]):  # the first may have begun before the counter
            print(f"  {since:8.2f} +{gap:6.2f}  {kind}")


async def concurrent_ratio(
    bus: Bus, root: Path, minimal: Minimal, concurrent: int, turn_timeout: float
) -> None:
    """Turns per second with ``concurrent`` conversations each doing one turn at once, both sides."""
    clients = []
    for _ in range(concurrent):
        c = await JidoClient.connect(project_dir=root, bus=bus)
        await c.start_conversation()
        clients.append(c)
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(c.send_message("read the readme", timeout=turn_timeout) for c in clients),
        return_exceptions=True,
    )
    wall = time.perf_counter() - t0
    failed = [r for r in results if isinstance(r, BaseException)]
    t1 = time.perf_counter()
    await asyncio.gather(*(minimal.turn("read the readme") for _ in range(concurrent)))
    wall_min = time.perf_counter() - t1
    done = concurrent - len(failed)
    print(f"{concurrent} concurrent conversations, one turn each:")
    print(f"  system : {done / wall:7.1f} turns/s ({done} answered in {wall:.2f} s)")
    if failed:
        kinds = sorted({f"{type(f).__name__}: {str(f)[:80]}" for f in failed})
        print(f"           {len(failed)} turns without an answer within {turn_timeout:g} s: {kinds}")
    print(f"  minimal: {concurrent / wall_min:7.1f} turns/s ({wall_min:.2f} s)")
    print(f"  ratio (system / minimal): {(done / wall) / (concurrent / wall_min):.2f}   (goal >= 0.9)")
    for c in clients:
        await c.close()


async def main(
    rounds: int,
    per_round: int,
    concurrent: int,
    turn_timeout: float = 120.0,
    services: str = "processes",
    tracing: str = "off",
    count_turns: int = 10,
    trace: bool = False,
) -> None:
    logging.basicConfig(level=logging.CRITICAL)
    set_up_tracing(tracing)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        os.environ["JIDO_CODE_HOME"] = str(home)
        root = make_project(base)
        trust_project(root, home=home)  # its settings.json (allow Read) counts only once trusted
        server = NatsServer(store_dir=base / "js", sync="default").start()
        llm = await ScriptedLlm(responder=one_tool_responder("read_file", path="README.md")).start()
        os.environ["JIDO_LLM_MODEL"] = MODEL
        os.environ["JIDO_LLM_API_BASE"] = llm.api_base
        stop = asyncio.Event()
        config = Config(nats_url=server.url, jido_home=home, instance="bench")
        llm_bus = await Bus.connect(config, "conversation-llm")
        from jidocode.services.conversation.service import serve as serve_conversation

        others = tuple(n for n in SERVICES if n != "conversation")
        tasks: list[asyncio.Task[Any]] = []
        procs: list[asyncio.subprocess.Process] = []
        if services == "inline":
            tasks = [
                asyncio.create_task(serve_many(config, stop, others)),
                asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
            ]
        else:
            procs = await start_processes(config)
        print(f"services: {services}")
        bus = await Bus.connect(config, "bench")
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.helpers import wait_for_services

            await wait_for_services(
                config, SERVICES, timeout=240
            )  # litellm imports in 5 processes: slow on a busy machine
            minimal = Minimal(root, llm.api_base, home)
            client = await JidoClient.connect(project_dir=root, bus=bus)
            await client.start_conversation()
            # warm both paths (imports, connections, caches); the system's tool call must succeed,
            # or the figures would time a refusal
            completed = asyncio.Event()

            async def _on_tool(env: Envelope) -> None:
                completed.set()

            await bus.subscribe(subjects.signal(ToolCompleted.TYPE), _on_tool)
            for _ in range(3):
                await client.send_message("read the readme", timeout=60)
                await minimal.turn("read the readme")
            await asyncio.wait_for(completed.wait(), 10)

            if services == "inline":
                tune_gc()  # this process hosts the services: tuned as jidocode's runner tunes each
            await timed_rounds(client, minimal, rounds, per_round)

            await print_turn_messages(server.url, client, count_turns, trace=trace)
            await concurrent_ratio(bus, root, minimal, concurrent, turn_timeout)
            await client.close()

            # -- disk: what the streams hold per one-tool turn (docs/deploy.md's sizing) ----------
            turns = 3 + rounds * (per_round + 1) + concurrent + count_turns + 1
            sizes = {
                name: (await bus.js.stream_info(name)).state.bytes
                for name in (subjects.STREAM_CONV_IN, subjects.STREAM_JOURNAL, subjects.STREAM_EVENTS)
            }
            per_turn = {name: size / turns for name, size in sizes.items()}
            print(f"stream bytes per one-tool turn ({turns} turns): " + ", ".join(
                f"{name} {b / 1024:.1f} KiB" for name, b in per_turn.items()))  # fmt: skip
            thousand = sum(per_turn.values()) * 1000 * 10
            print(f"  1,000 conversations of 10 such turns: {thousand / 1024**2:.0f} MiB in all")
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
            for proc in procs:
                proc.terminate()
            for proc in procs:
                await asyncio.wait_for(proc.wait(), 30)
            await bus.close()
            await llm_bus.close()
            await llm.stop()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument(
        "--turn-timeout", type=float, default=120.0, help="seconds one concurrent turn may take"
    )
    parser.add_argument("--services", choices=("processes", "inline"), default="processes")
    parser.add_argument("--tracing", choices=("off", "memory", "bus"), default="off")
    parser.add_argument(
        "--count-turns", type=int, default=10, help="turns over which the NATS messages are counted"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also print one turn message by message, with median times (use --count-turns 40 or more)",
    )
    args = parser.parse_args()
    if args.tracing == "memory" and args.services != "inline":
        parser.error("--tracing memory needs --services inline (the exporter is in this process)")
    asyncio.run(
        main(
            args.rounds,
            args.per_round,
            args.concurrent,
            args.turn_timeout,
            args.services,
            args.tracing,
            args.count_turns,
            args.trace,
        )
    )
