"""The system the console test drives: every service in-process on a real nats-server, the
scripted model behind real litellm, the gateway served by uvicorn on a random loopback port,
and headless Chromium (Debian's) driven by Playwright. One per test module (starting it all
takes most of the module's time)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from jidocode.cli.dev.scripted_llm import ScriptedLlm
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.service import serve as serve_conversation
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "MODEL", "ConsoleSystem", "console_system", "screenshots"]

#: Debian's Chromium: Playwright never downloads a browser here.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The model the conversations use: one of litellm's price list, answered by the scripted server.
MODEL = "gpt-4o-mini"
#: Where screenshots go when set (CI keeps the folder as an artifact); else pytest's tmp dir.
ARTIFACTS_ENV = "JIDO_TEST_ARTIFACTS"

PROJECT_SETTINGS = {
    "permissions": {"allow": ["Read"], "ask": ["Edit(ask/**)"], "deny": ["Bash(rm:*)"]},
    "tools": {"approval_timeout_s": 60},
}


@dataclass
class ConsoleSystem:
    config: Config
    llm: ScriptedLlm
    gateway: GatewayServer
    token: str
    project: Path
    browser: Browser

    @property
    def base_url(self) -> str:
        return self.gateway.base_url


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this module's screenshots (printed, so a run shows where they are)."""
    configured = os.environ.get(ARTIFACTS_ENV)
    folder = Path(configured) / "console" if configured else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {folder}")
    return folder


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def console_system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleSystem]:
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.skip(f"the console test needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    # litellm takes seconds to import (the conversation service imports it at its first call):
    # done here beside the other start-up work, so no wait of the test pays for it
    warm_up = asyncio.create_task(asyncio.to_thread(importlib.import_module, "litellm"))
    # and the browser starts meanwhile too
    playwright = await async_playwright().start()
    browser = asyncio.create_task(
        playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    )
    root = tmp_path_factory.mktemp("console")
    home = root / "jido_home"
    home.mkdir()
    project = root / "proj"
    (project / ".jido").mkdir(parents=True)
    (project / ".jido" / "settings.json").write_text(json.dumps(PROJECT_SETTINGS))
    (project / "ask").mkdir()
    (project / "ask" / "x.txt").write_text("before\n")
    trust_project(root, home=home)

    env = pytest.MonkeyPatch()
    server = await asyncio.to_thread(NatsServer(store_dir=root / "js", sync="default").start)
    llm = await ScriptedLlm(models=(MODEL,)).start()
    env.setenv("JIDO_CODE_HOME", str(home))
    # a model litellm knows the price of (served by the scripted server), so the console has a cost to show
    env.setenv("JIDO_LLM_MODEL", f"openai/{MODEL}")
    env.setenv("JIDO_LLM_API_BASE", llm.api_base)
    config = Config(nats_url=server.url, jido_home=home, instance="console-test")
    stop = asyncio.Event()
    llm_bus = await Bus.connect(config, "conversation-llm")
    gateway_bus = await Bus.connect(config, "gateway")
    others = tuple(n for n in SERVICES if n != "conversation")
    tasks = [
        asyncio.create_task(serve_many(config, stop, others)),
        asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
    ]
    token = secrets.token_urlsafe(32)
    settings = GatewaySettings(host="127.0.0.1", port=0, token=token, data_home=root / "data")
    gateway = GatewayServer(make_context(gateway_bus, config, settings))
    try:
        await wait_for_services(config, SERVICES, timeout=60)
        await gateway.start()
        await warm_up
        yield ConsoleSystem(
            config=config, llm=llm, gateway=gateway, token=token, project=project, browser=await browser
        )
    finally:
        if not browser.cancel():
            with contextlib.suppress(Exception):  # it may have failed to start: said by the await above
                await (await browser).close()
        await playwright.stop()
        await gateway.stop()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for bus in (gateway_bus, llm_bus):
            await bus.close()
        await llm.stop()
        await asyncio.to_thread(server.stop)
        env.undo()
