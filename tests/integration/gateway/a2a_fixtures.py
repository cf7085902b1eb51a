"""One running system per test module for the A2A tests: every service in-process on a real
nats-server, the gateway on uvicorn (random loopback port), a scripted model that answers by
what it is asked (so tests do not depend on each other's order), and a started project.

The project's settings ``ask`` before writing under ``ask/``; a skill ``review``, a command
``explain`` and a workflow ``tidy`` make the card show the project's skills.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

__all__ = ["A2ASystem", "a2a_system", "respond"]

TOKEN = "a2a-test-token-0123456789abcdef"
#: Turns wait on the model and the tool runner of a machine loaded by other tests.
TURN_S = 60.0


def _last(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    return last if isinstance(last, dict) else {}


def respond(body: dict[str, Any]) -> Reply:
    """The model: ``write …`` asks to write ``ask/x.txt`` (an ``ask`` rule), ``write both …`` to
    write ``ask/a.txt`` and ``ask/b.txt`` in one turn; ``wait …`` runs
    ``sleep 60`` (to be cancelled while the tool runs: no model call is cut); a tool result gets ``Done: <result>``; anything else
    is echoed in pieces of 4 characters (so a stream has several deltas)."""
    last = _last(body)
    content = str(last.get("content") or "")
    if last.get("role") == "tool":
        return Reply.answer("Done: " + content[:60])
    if content.startswith("write both"):
        return Reply.tools(
            call("write_file", path="ask/a.txt", content="after\n"),
            call("write_file", path="ask/b.txt", content="after\n"),
        )
    if content.startswith("write"):
        return Reply.tools(call("write_file", path="ask/x.txt", content="after\n"))
    if content.startswith("wait"):
        return Reply.tools(call("bash", command="sleep 60"))
    return Reply.answer(f"You said: {content}", chunk_chars=4)


@dataclass
class A2ASystem:
    config: Config
    llm: ScriptedLlm
    bus: Bus
    project: Path
    project_id: str
    base_url: str
    #: A second gateway replica on the same bus (another port): no state shared but the bus.
    replica_url: str
    token: str

    @property
    def agent_url(self) -> str:
        return f"{self.base_url}/projects/{self.project_id}"

    @property
    def replica_agent_url(self) -> str:
        return f"{self.replica_url}/projects/{self.project_id}"

    def http(self, **kw: Any) -> httpx.AsyncClient:
        """An HTTP client carrying the gateway's token."""
        return httpx.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=TURN_S, **kw)


def _write_project(root: Path) -> None:
    (root / ".jido" / "skills" / "review").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Read", "Bash(sleep:*)"], "ask": ["Edit(ask/**)"]},
                "tools": {"approval_timeout_s": 120},
            }
        )
    )
    (root / ".jido" / "skills" / "review" / "SKILL.md").write_text(
        "---\nname: review\ndescription: Review a change for bugs and style\n---\nLook closely.\n"
    )
    (root / ".jido" / "commands").mkdir()
    (root / ".jido" / "commands" / "explain.md").write_text(
        "---\ndescription: Explain a file\narguments: [file]\n---\nExplain {{file}}\n"
    )
    (root / ".jido" / "workflows").mkdir()
    (root / ".jido" / "workflows" / "tidy.yaml").write_text(
        "description: Tidy the project\nsteps:\n  - tool: bash\n    args: {command: 'echo tidy'}\n"
    )
    (root / "ask").mkdir()
    (root / "ask" / "x.txt").write_text("before\n")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def a2a_system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A2ASystem]:
    base = tmp_path_factory.mktemp("a2a")
    home = base / "jido_home"
    home.mkdir()
    project = base / "proj"
    project.mkdir()
    _write_project(project)
    trust_project(base, home=home)
    server = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JIDO_CODE_HOME", str(home))
        async with ScriptedLlm(responder=respond) as llm:
            mp.setenv("JIDO_LLM_MODEL", "openai/scripted")
            mp.setenv("JIDO_LLM_API_BASE", llm.api_base)
            config = Config(nats_url=server.url, jido_home=home, instance="test")
            stop = asyncio.Event()
            services = asyncio.create_task(serve_many(config, stop, SERVICES))
            bus = await Bus.connect(config, "a2a-tests")
            gateway_bus = await Bus.connect(config, "gateway")
            settings = GatewaySettings(host="127.0.0.1", port=0, token=TOKEN, data_home=base / "data")
            gateway = GatewayServer(make_context(gateway_bus, config, settings))
            replica_bus = await Bus.connect(config, "gateway")
            replica = GatewayServer(make_context(replica_bus, config, settings))
            try:
                await wait_for_services(config, SERVICES, timeout=60)
                await gateway.start()
                await replica.start()
                info = await EngineClient(bus, timeout=30).start_project(str(project))
                yield A2ASystem(
                    config=config,
                    llm=llm,
                    bus=bus,
                    project=project,
                    project_id=info.project_id,
                    base_url=gateway.base_url,
                    replica_url=replica.base_url,
                    token=TOKEN,
                )
            finally:
                await gateway.stop()
                await replica.stop()
                stop.set()
                await asyncio.wait_for(asyncio.gather(services, return_exceptions=True), 30)
                await gateway_bus.close()
                await replica_bus.close()
                await bus.close()
                await asyncio.to_thread(server.stop)
