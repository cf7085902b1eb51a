"""End to end: a conversation's model calls an MCP server's tool (``mcp__time__get_current_time``);
the SDK's plugin registry lists the server and takes it away from the conversation.

Every service on a real nats-server, real litellm against the scripted LLM, the client SDK's
``send_message``; the server is ``mcp-server-time`` from PyPI, started by the tool runner inside
the OS sandbox; an allow rule (``mcp__time``) lets the call run without asking.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ProjectClient
from jidocode.shared.config import Config
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import stdio, write_mcp_json

pytestmark = pytest.mark.slow

OTHERS = ("engine", "project", "tool_runner", "asset_loader")


@pytest.fixture
async def project(
    config: Config, scripted_llm: ScriptedLlm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Path]:
    monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
    monkeypatch.setenv("JIDO_LLM_API_BASE", scripted_llm.api_base)
    monkeypatch.setenv("JIDO_MCP_START_TIMEOUT_S", "60")
    root = tmp_path / "proj"
    write_mcp_json(root, {"time": stdio("-m", "mcp_server_time", "--local-timezone", "UTC")})
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__time"]}}))
    stop = asyncio.Event()
    llm_bus = await Bus.connect(config, "conversation-llm")
    from jidocode.services.conversation.service import serve as serve_conversation

    tasks = [
        asyncio.create_task(serve_many(config, stop, OTHERS)),
        asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
    ]
    try:
        await wait_for_services(config, (*OTHERS, "conversation"), timeout=30)
        yield root
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await llm_bus.close()


async def test_the_model_calls_an_mcp_tool(project: Path, bus: Bus, scripted_llm: ScriptedLlm) -> None:
    # the first listing starts the server (a conversation would wait for it as well)
    pid = (await EngineClient(bus).start_project(str(project), timeout=20)).project_id
    catalog = await ProjectClient(bus, pid).list_tools(timeout=60)
    assert "mcp__time__get_current_time" in {t.name for t in catalog.tools}

    scripted_llm.script(
        Reply.tools(call("mcp__time__get_current_time", timezone="UTC")),
        Reply.answer("It is late in UTC."),
    )
    client = await JidoClient.connect(
        project_dir=project, bus=bus, settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05}
    )
    assert await client.send_message("What time is it in UTC?", timeout=90) == "It is late in UTC."
    first, second = await scripted_llm.wait_requests(2, timeout=30)
    assert "mcp__time__get_current_time" in {t["function"]["name"] for t in first.get("tools", [])}
    (tool,) = [m for m in second["messages"] if m.get("role") == "tool"]
    assert '"timezone": "UTC"' in tool["content"]

    # seed 003's plugin registry: discover the plugins, take one away from this conversation
    plugins = {p.name: p for p in await client.plugins.discover()}
    assert plugins["builtin"].kind == "builtin"
    time_plugin = plugins["mcp__time"]
    assert time_plugin.kind == "mcp" and time_plugin.state == "ready" and time_plugin.layer == "project"
    assert "mcp__time__get_current_time" in time_plugin.tools and time_plugin.exposed
    await client.plugins.unexpose_tool("mcp__time")
    assert not {p.name: p for p in await client.plugins.discover()}["mcp__time"].exposed
    scripted_llm.script(Reply.answer("No clock."))
    assert await client.send_message("And now?", timeout=90) == "No clock."
    third = (await scripted_llm.wait_requests(3, timeout=30))[2]
    offered = {t["function"]["name"] for t in third.get("tools", [])}
    assert not any(name.startswith("mcp__time") for name in offered)
