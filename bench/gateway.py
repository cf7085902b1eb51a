"""The gateway's cost: a one-tool turn over HTTP + SSE vs the SDK on NATS, and SSE fan-out.

    python bench/gateway.py [--rounds 4] [--per-round 15] [--viewers 100] [--fanout-turns 5]

Every service and the gateway run as processes of their own (as ``jidocode up``
runs them) on a local nats-server; the model is the scripted OpenAI-compatible
server (zero latency, stateless one-tool script: user message ->
``read_file(README.md)``, tool result -> answer) that real litellm calls.

* **turn**: ``POST …/messages`` then the conversation's SSE stream (held open,
  as a UI holds it) until the answer event with that message's correlation id,
  vs ``JidoClient.send_message`` (the SDK: a request, then the output on a NATS
  subscription). Rounds alternate between the two; medians, p99s, the ratio.
* **fan-out**: ``--viewers`` SSE streams of one conversation at once while it
  runs ``--fanout-turns`` turns; the delivery latency of each event to each
  viewer is its arrival time minus the event's CloudEvent ``time`` (stamped by
  the conversation service when it made the event; same host clock). Prints the
  p50/p99 over all deliveries and, per event, the p99 across viewers (median and worst).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# the checkout's root, for the test helpers this uses (tests.sse_reader, tests.helpers)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from jidocode.cli.dev.scripted_llm import ScriptedLlm, one_tool_responder
from jidocode.client import JidoClient
from jidocode.services.registry import SERVICES
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.sse_reader import SseMessage, read_sse

MODEL = "openai/scripted"
TOKEN = "bench-token-" + "b" * 32
ANSWER = "conversation.assistant.message"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(v: float) -> str:
    return f"{v * 1000:7.2f} ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_project(base: Path) -> Path:
    root = base / "proj"
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
    (root / "README.md").write_text("hello from the benchmark\n" * 20)
    return root


async def start_processes(env: dict[str, str]) -> list[asyncio.subprocess.Process]:
    procs = []
    for name in (*SERVICES, "gateway"):
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"jidocode.services.{name}",
                env={**env, "JIDO_INSTANCE": f"bench-{name}"},
            )
        )
    return procs


class Viewer:
    """One SSE stream of a conversation, held open; answers wake whoever waits for them."""

    def __init__(self, http: httpx.AsyncClient, path: str) -> None:
        self.http = http
        self.path = path
        self.opened = asyncio.Event()
        self.waiters: dict[str, asyncio.Future[None]] = {}
        self.arrivals: list[tuple[str, float, float]] = []  # (event id, made at, arrived at)
        self.answered: set[str] = set()  # correlation ids of the answers seen
        self.last_id: str | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self, after: str | None = None, record: bool = False) -> None:
        self.task = asyncio.create_task(self._run(after, record))

    async def _run(self, after: str | None, record: bool) -> None:
        headers = {"Last-Event-ID": after} if after else {}
        async with self.http.stream("GET", self.path, headers=headers) as response:
            response.raise_for_status()
            self.opened.set()
            async for message in read_sse(response.aiter_lines()):
                self._on(message, record)

    def _on(self, message: SseMessage, record: bool) -> None:
        arrived = time.time()
        self.last_id = message.id
        if record:
            event = message.json()
            made = datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()
            self.arrivals.append((message.id or "", made, arrived))
        if message.event == ANSWER:
            correlation = json.loads(message.data).get("correlationid", "")
            self.answered.add(correlation)
            waiter = self.waiters.pop(correlation, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def http_turn(http: httpx.AsyncClient, viewer: Viewer, base: str) -> float:
    t0 = time.perf_counter()
    response = await http.post(f"{base}/messages", json={"text": "read the readme"})
    response.raise_for_status()
    waiter = asyncio.get_running_loop().create_future()
    correlation = response.json()["correlation_id"]
    if correlation not in viewer.answered:  # the answer may come before the POST's reply is read
        viewer.waiters[correlation] = waiter
        await asyncio.wait_for(waiter, 60)
    return time.perf_counter() - t0


async def main(rounds: int, per_round: int, viewers: int, fanout_turns: int) -> None:
    logging.basicConfig(level=logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        os.environ["JIDO_CODE_HOME"] = str(home)
        root = make_project(base)
        trust_project(root, home=home)
        server = NatsServer(store_dir=base / "js", sync="default").start()
        llm = await ScriptedLlm(responder=one_tool_responder("read_file", path="README.md")).start()
        port = free_port()
        env = {
            **os.environ,
            "NATS_URL": server.url,
            "JIDO_CODE_HOME": str(home),
            "JIDO_DATA_HOME": str(base / "data"),
            "JIDO_LOG_LEVEL": "WARNING",
            "JIDO_LLM_MODEL": MODEL,
            "JIDO_LLM_API_BASE": llm.api_base,
            "JIDO_GATEWAY_PORT": str(port),
            "JIDO_GATEWAY_TOKEN": TOKEN,
        }
        procs = await start_processes(env)
        config = Config(nats_url=server.url, jido_home=home, instance="bench")
        bus = await Bus.connect(config, "bench")
        url = f"http://127.0.0.1:{port}"
        limits = httpx.Limits(max_connections=viewers + 20, max_keepalive_connections=viewers + 20)
        http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60, limits=limits
        )
        try:
            from tests.helpers import wait_for_services

            await wait_for_services(config, SERVICES, timeout=180)  # a loaded machine starts slowly
            for _ in range(300):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)  # the gateway process is starting: nothing to wait on but its port
            project = (await http.post("/api/projects", json={"root": str(root)})).json()["project_id"]
            client = await JidoClient.connect(project_dir=root, bus=bus)

            # -- one turn: HTTP + SSE vs the SDK --------------------------------------------------
            over_http: list[float] = []
            over_sdk: list[float] = []
            for r in range(rounds + 1):  # round 0 warms both paths (imports, caches), untimed
                cid = (await http.post(f"/api/projects/{project}/conversations", json={})).json()[
                    "conversation_id"
                ]
                conv = f"/api/projects/{project}/conversations/{cid}"
                viewer = Viewer(http, f"{conv}/events")
                viewer.start()
                await asyncio.wait_for(viewer.opened.wait(), 30)
                await http_turn(http, viewer, conv)  # the first turn of a conversation: untimed
                for _ in range(per_round):
                    took = await http_turn(http, viewer, conv)
                    if r:
                        over_http.append(took)
                await viewer.stop()
                await client.reset_session()
                await client.send_message("read the readme", timeout=60)
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    await client.send_message("read the readme", timeout=60)
                    if r:
                        over_sdk.append(time.perf_counter() - t0)
            m_http, m_sdk = statistics.median(over_http), statistics.median(over_sdk)
            print(f"one-tool turn, {len(over_http)} turns each (2 LLM calls + 1 tool per turn)")
            print(f"  HTTP + SSE  : median {ms(m_http)}  p99 {ms(pct(over_http, 0.99))}")
            print(f"  SDK on NATS : median {ms(m_sdk)}  p99 {ms(pct(over_sdk, 0.99))}")
            print(f"  ratio (median, HTTP / SDK): {m_http / m_sdk:.2f}")

            # -- fan-out: many viewers of one conversation ----------------------------------------
            cid = (await http.post(f"/api/projects/{project}/conversations", json={})).json()[
                "conversation_id"
            ]
            conv = f"/api/projects/{project}/conversations/{cid}"
            driver = Viewer(http, f"{conv}/events")
            driver.start()
            await asyncio.wait_for(driver.opened.wait(), 30)
            await http_turn(http, driver, conv)  # something to resume after
            await driver.stop()
            # every viewer opens live: after the last event stored so far (the warm turn's answer)
            after = driver.last_id
            watchers = [Viewer(http, f"{conv}/events") for _ in range(viewers)]
            for w in watchers:
                w.start(after=after, record=True)
            await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 60)
            t0 = time.perf_counter()
            for _ in range(fanout_turns):
                await http_turn(http, watchers[0], conv)
            # the other viewers see the last answer too
            expected = len(watchers[0].arrivals)

            async def caught_up(w: Viewer) -> None:
                while len(w.arrivals) < expected:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)  # a benchmark's bounded wait on counters, not a test

            await asyncio.wait_for(asyncio.gather(*(caught_up(w) for w in watchers)), 60)
            wall = time.perf_counter() - t0
            for w in watchers:
                await w.stop()
            per_event: dict[str, list[float]] = {}
            for w in watchers:
                for event_id, made, arrived in w.arrivals:
                    per_event.setdefault(event_id, []).append(arrived - made)
            everything = [v for vs in per_event.values() for v in vs]
            event_p99 = [pct(vs, 0.99) for vs in per_event.values()]
            print(
                f"SSE fan-out: {viewers} viewers of one conversation, {fanout_turns} turns, "
                f"{len(per_event)} events, {len(everything)} deliveries in {wall:.2f} s"
            )
            print(
                f"  delivery latency (event made -> viewer): p50 {ms(pct(everything, 0.5))}  p99 {ms(pct(everything, 0.99))}"
            )
            print(
                f"  per event, p99 across viewers: median {ms(statistics.median(event_p99))}  worst {ms(max(event_p99))}"
            )
            await client.close()
        finally:
            await http.aclose()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            await bus.close()
            await llm.stop()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=15)
    parser.add_argument("--viewers", type=int, default=100)
    parser.add_argument("--fanout-turns", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per_round, args.viewers, args.fanout_turns))
