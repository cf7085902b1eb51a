"""One running system per test module: a nats-server, every service with the scripted model,
and the gateway served by uvicorn on a random loopback port, reached with httpx."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import ScriptedLlm
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.sse_reader import SseMessage, read_sse

#: Bounds of waits on conditions (two loaded cores).
PATIENCE_S = 60.0
TOKEN = "gateway-test-token-" + "k" * 24


@dataclass
class Gateway:
    config: Config
    bus: Bus
    llm: ScriptedLlm
    server: GatewayServer
    project: Path
    data_home: Path

    @property
    def url(self) -> str:
        return self.server.base_url

    def client(self, token: str | None = TOKEN, **kw: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=PATIENCE_S, **kw)

    async def collect(
        self,
        http: httpx.AsyncClient,
        path: str,
        until: Callable[[SseMessage], bool],
        *,
        headers: dict[str, str] | None = None,
        opened: asyncio.Event | None = None,
    ) -> list[SseMessage]:
        """The SSE messages of ``path`` up to the first for which ``until`` is true."""
        got: list[SseMessage] = []

        async def run() -> list[SseMessage]:
            async with http.stream("GET", path, headers=headers or {}) as response:
                assert response.status_code == 200, await response.aread()
                assert response.headers["content-type"].startswith("text/event-stream")
                if opened is not None:
                    opened.set()
                async for message in read_sse(response.aiter_lines()):
                    got.append(message)
                    if until(message):
                        return got
            raise AssertionError(f"the stream ended before the awaited event: {[m.event for m in got]}")

        return await asyncio.wait_for(run(), PATIENCE_S)


async def until(predicate: Callable[[], bool], timeout: float = PATIENCE_S) -> None:
    """Return once ``predicate()`` holds (a counter of the server: nothing to wait on but polling)."""

    async def poll() -> None:
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def write_project(root: Path) -> None:
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Read"], "ask": ["Edit(ask/**)"]},
                "tools": {"approval_timeout_s": 60},
            }
        )
    )
    (root / "README.md").write_text("hello from the readme\n")
    (root / "ask").mkdir()
    (root / "ask" / "x.txt").write_text("before\n")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    base = tmp_path_factory.mktemp("gateway")
    home = base / "jido_home"
    home.mkdir()
    trust_project(base, home=home)
    project = base / "proj"
    write_project(project)
    saved = {k: os.environ.get(k) for k in ("JIDO_CODE_HOME", "JIDO_LLM_MODEL", "JIDO_LLM_API_BASE")}
    nats = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
    async with ScriptedLlm() as llm:
        os.environ.update(
            {
                "JIDO_CODE_HOME": str(home),
                "JIDO_LLM_MODEL": "openai/scripted",
                "JIDO_LLM_API_BASE": llm.api_base,
            }
        )
        config = Config(nats_url=nats.url, jido_home=home, instance="test")
        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        from jidocode.services.conversation.service import serve as serve_conversation

        others = tuple(n for n in SERVICES if n != "conversation")
        tasks = [
            asyncio.create_task(serve_many(config, stop, others)),
            asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
        ]
        bus = await Bus.connect(config, "gateway")
        settings = GatewaySettings(
            host="127.0.0.1", port=0, token=TOKEN, data_home=base / "data", sse_ping_s=1.0
        )
        server = GatewayServer(make_context(bus, config, settings))
        try:
            await wait_for_services(config, SERVICES, timeout=PATIENCE_S)
            await server.start()
            yield Gateway(
                config=config, bus=bus, llm=llm, server=server, project=project, data_home=base / "data"
            )
        finally:
            await server.stop()
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await llm_bus.close()
            await asyncio.to_thread(nats.stop)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
