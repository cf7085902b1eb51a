"""A one-tool turn as an A2A task on the gateway vs the same turn through the client SDK on NATS.

    PYTHONPATH=. .venv/bin/python bench/a2a_turn.py [--rounds 5] [--per-round 10]

Every service runs in this process (as the tests run them) on a local nats-server, with the
gateway on uvicorn on a loopback port and the scripted OpenAI-compatible model (zero latency,
one-tool script: user message -> ``read_file(README.md)``, tool result -> answer), both
sides through real litellm. Each turn is a new task / a new conversation:

* **a2a send**: the a2a-sdk client, JSON-RPC ``SendMessage`` (non-streaming) until the task
  is ``completed``;
* **a2a stream**: JSON-RPC ``SendStreamingMessage`` (SSE) until the final status;
* **sdk**: ``JidoClient.start_conversation`` + ``send_message`` over NATS.

Rounds alternate the three. Prints the median and p99 of each and the ratios to the SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState

from jidocode.cli.dev.scripted_llm import ScriptedLlm, one_tool_responder
from jidocode.client import JidoClient
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import new_id
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project

TOKEN = "bench-a2a-token-0123456789abcdef"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def a2a_turn(client: Client) -> None:
    request = SendMessageRequest(
        message=Message(
            message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text="What does the readme say?")]
        )
    )
    last = None
    async for event in client.send_message(request):
        last = event
    assert last is not None
    state = last.task.status.state if last.HasField("task") else last.status_update.status.state
    assert state == TaskState.TASK_STATE_COMPLETED, last


async def main(rounds: int, per_round: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home, project = base / "home", base / "proj"
        home.mkdir()
        project.mkdir()
        (project / "README.md").write_text("hello from the readme\n")
        trust_project(base, home=home)
        os.environ["JIDO_CODE_HOME"] = str(home)
        server = NatsServer(store_dir=base / "js").start()
        async with ScriptedLlm(responder=one_tool_responder("read_file", path="README.md")) as llm:
            os.environ["JIDO_LLM_MODEL"] = "openai/scripted"
            os.environ["JIDO_LLM_API_BASE"] = llm.api_base
            config = Config(nats_url=server.url, jido_home=home, instance="bench")
            stop = asyncio.Event()
            services = asyncio.create_task(serve_many(config, stop, SERVICES))
            bus = await Bus.connect(config, "bench")
            gateway_bus = await Bus.connect(config, "gateway")
            settings = GatewaySettings(port=0, token=TOKEN, data_home=base / "data")
            gateway = GatewayServer(make_context(gateway_bus, config, settings))
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            try:
                from tests.helpers import wait_for_services

                await wait_for_services(config, SERVICES, timeout=60)
                sdk = await JidoClient.connect(project_dir=project, bus=bus)
                await gateway.start()
                url = f"{gateway.base_url}/projects/{sdk.project_id}"
                send = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create_from_url(
                    url
                )
                stream = await ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create_from_url(
                    url
                )

                async def sdk_turn() -> None:
                    await sdk.start_conversation()
                    await sdk.send_message("What does the readme say?", timeout=60)

                sides = {
                    "a2a send": lambda: a2a_turn(send),
                    "a2a stream": lambda: a2a_turn(stream),
                    "sdk": sdk_turn,
                }
                times: dict[str, list[float]] = {name: [] for name in sides}
                for warm_up in sides.values():
                    await warm_up()
                for _ in range(rounds):
                    for name, run in sides.items():
                        for _ in range(per_round):
                            t0 = time.perf_counter()
                            await run()
                            times[name].append(time.perf_counter() - t0)
                base_median = statistics.median(times["sdk"])
                print(
                    f"one-tool turn (2 LLM calls + 1 tool), {rounds * per_round} turns each, one new task each"
                )
                for name, values in times.items():
                    median = statistics.median(values)
                    print(
                        f"  {name:10}: median {ms(median)}  p99 {ms(pct(values, 0.99))}"
                        f"  ratio to sdk (median) {median / base_median:.2f}"
                    )
                await sdk.close()
            finally:
                await http.aclose()
                await gateway.stop()
                stop.set()
                await asyncio.gather(services, return_exceptions=True)
                await gateway_bus.close()
                await bus.close()
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.rounds, args.per_round))
