"""web_fetch through the real services: the tool runner's egress proxy, its rules and its events.

One system for the module (NATS on this machine's LAN address, as a deployment has it; the
engine, project, asset loader, conversation with the scripted LLM, one tool runner) and the
stand-in internet on the same address. ``JIDO_EGRESS_HOSTS`` maps the test names to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import ApprovalRequest, JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.service import serve as serve_conversation
from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.tools.specs import WEB_FETCH
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.egress.support import Internet, internet, lan_address
from tests.integration.tools.support import Signals, failure, run_tool

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LAN = lan_address()


@dataclass
class System:
    bus: Bus
    pid: str
    root: Path
    web: Internet
    nats_url: str
    nats_port: int
    llm: ScriptedLlm
    signals: Signals


def _settings(lan: str) -> dict[str, object]:
    return {
        "sandbox": {"allowed_domains": [f"{lan}/32"], "denied_domains": ["bad.test"]},
        "permissions": {
            "allow": ["Read", "WebFetch(domain:pkg.test)", "Bash(curl:*)"],
            "ask": ["WebFetch(domain:ask.test)"],
        },
        "tools": {"approval_timeout_s": 60},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    if LAN is None:
        pytest.skip("this machine has no non-loopback address for the stand-in internet")
    base = tmp_path_factory.mktemp("egress")
    home, data, root = base / "home", base / "data", base / "proj"
    for d in (home, data, root):
        d.mkdir()
    (home / "settings.json").write_text(json.dumps(_settings(LAN)))
    trust_project(root, home=home)
    names = ",".join(f"{n}={LAN}" for n in ("pkg.test", "bad.test", "ask.test"))
    async with internet(LAN) as web, ScriptedLlm() as llm, contextlib.AsyncExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setenv("JIDO_CODE_HOME", str(home))
        mp.setenv("JIDO_DATA_HOME", str(data))
        mp.setenv("JIDO_EGRESS_HOSTS", names)
        mp.setenv("JIDO_LLM_MODEL", "openai/scripted")
        mp.setenv("JIDO_LLM_API_BASE", llm.api_base)
        server = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default", host=LAN).start)
        config = Config(nats_url=server.url, jido_home=home, instance="test")
        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        tasks = [
            asyncio.create_task(serve_many(config, stop, ("engine", "project", "asset_loader"))),
            asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
        ]
        runner_bus = await Bus.connect(config, "tool_runner")
        runner = ToolRunner(runner_bus, config)
        await runner.start()
        bus = await Bus.connect(config, "test")
        signals = Signals()
        await bus.subscribe(subjects.signal_filter(), signals.on)
        try:
            names_up = ("engine", "project", "asset_loader", "conversation", "tool_runner")
            await wait_for_services(config, names_up, timeout=30)
            pid = (await EngineClient(bus).start_project(str(root), timeout=20)).project_id
            yield System(bus, pid, root, web, server.url, server.port, llm, signals)
        finally:
            await runner.stop()
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await runner_bus.close()
            await llm_bus.close()
            await asyncio.to_thread(server.stop)


async def test_web_fetch_returns_the_page_as_markdown_and_says_so_on_the_bus(system: System) -> None:
    url = system.web.url("pkg.test")
    result = await run_tool(system.bus, system.pid, "web_fetch", {"url": url}, request_id="f1", timeout=60)
    assert result.ok, result.error
    assert result.data["url"] == url and result.data["status"] == 200
    assert "# Package index" in result.data["content"] and "**jidotest**" in result.data["content"]
    assert "<p>" not in result.data["content"]
    jsonschema.Draft202012Validator(WEB_FETCH.output_model.model_json_schema()).validate(result.data)
    allowed = await system.signals.wait(
        lambda e: (
            e.type == "tool.network" and e.data["request_id"] == "f1" and e.data["outcome"] == "allowed"
        ),
        timeout=30,
    )
    assert allowed.data["host"] == "pkg.test" and allowed.data["address"] == system.web.address
    closed = await system.signals.wait(
        lambda e: e.type == "tool.network" and e.data["request_id"] == "f1" and e.data["outcome"] == "closed",
        timeout=30,
    )
    assert closed.data["bytes_down"] > 0


async def test_web_fetch_follows_a_redirect_only_to_an_allowed_host(system: System) -> None:
    ok = await run_tool(
        system.bus,
        system.pid,
        "web_fetch",
        {"url": system.web.url("pkg.test", "/to-allowed")},
        request_id="f2",
    )
    assert ok.ok and ok.data["redirects"] == [system.web.url("pkg.test", "/to-allowed")], ok.error
    refused = await run_tool(
        system.bus,
        system.pid,
        "web_fetch",
        {"url": system.web.url("pkg.test", "/to-denied")},
        request_id="f3",
    )
    error = failure(refused)
    assert error.type == "permission_denied" and "bad.test" in error.message and "redirect" in error.message


async def test_web_fetch_never_reaches_the_runtimes_nats_port(system: System) -> None:
    url = f"http://pkg.test:{system.nats_port}/"
    error = failure(await run_tool(system.bus, system.pid, "web_fetch", {"url": url}, request_id="f4"))
    assert error.type == "permission_denied" and "runtime's own endpoint" in error.message


async def test_an_ask_rule_is_approved_and_denied_through_the_sdk(system: System) -> None:
    url = system.web.url("ask.test")
    answers = iter(["approve_once", "deny"])
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return next(answers)

    system.llm.script(
        Reply.tools(call("web_fetch", url=url)),
        Reply.answer("Read it."),
        Reply.tools(call("web_fetch", url=url)),
        Reply.answer("Refused."),
    )
    client = await JidoClient.connect(
        project_dir=system.root,
        bus=system.bus,
        settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
    )
    try:
        await client.configure_tools(approve=approve)
        assert await client.send_message("Fetch it.", timeout=90) == "Read it."
        assert await client.send_message("Again.", timeout=90) == "Refused."
    finally:
        await client.close()
    assert [r.tool for r in asked] == ["web_fetch", "web_fetch"]
    assert "WebFetch(domain:ask.test)" in asked[0].reason
    requests = await system.llm.wait_requests(4, timeout=30)
    tools = [m["content"] for r in requests for m in r["messages"] if m.get("role") == "tool"]
    assert "# Package index" in tools[0]
    assert "denied" in tools[-1] and "Package index" not in tools[-1]


async def test_jidocode_watch_shows_the_network_decisions(system: System) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "watch",
        "--json",
        "--type",
        "tool.network",
        "--limit",
        "1",
        env={**os.environ, "NATS_URL": system.nats_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    reader = asyncio.create_task(proc.stdout.readline())
    url = f"http://pkg.test:{system.nats_port}/"  # allowed by the rules, refused by the proxy
    for n in range(100):  # the watcher may still be subscribing: fetch until it prints one
        if reader.done():
            break
        await run_tool(system.bus, system.pid, "web_fetch", {"url": url}, request_id=f"w{n}")
        await asyncio.wait([reader], timeout=0.5)
    if not reader.done():
        proc.kill()
        assert proc.stderr is not None
        raise AssertionError((await proc.stderr.read()).decode())
    event = json.loads(await asyncio.wait_for(reader, 60))
    assert event["type"] == "tool.network" and event["data"]["host"] == "pkg.test"
    assert event["data"]["outcome"] == "denied" and "runtime's own endpoint" in event["data"]["reason"]
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_a_programs_connection_under_an_ask_rule_asks_through_the_sdk(system: System) -> None:
    """A sandboxed ``curl`` reaches ``ask.test`` through the proxy only once the SDK's ``approve``
    callback says yes to the proxy's question; a no is a 403 naming why."""
    command = f"curl -sS -m 60 {system.web.url('ask.test', '/plain')}"
    answers = iter(["approve_once", "deny"])
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return next(answers)

    system.llm.script(
        Reply.tools(call("bash", command=command)),
        Reply.answer("Got it."),
        Reply.tools(call("bash", command=command)),
        Reply.answer("Refused."),
    )
    seen = len(system.llm.requests)
    client = await JidoClient.connect(
        project_dir=system.root,
        bus=system.bus,
        settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
    )
    try:
        await client.configure_tools(approve=approve)
        assert await client.send_message("Download it.", timeout=90) == "Got it."
        assert await client.send_message("Again.", timeout=90) == "Refused."
    finally:
        await client.close()
    assert [(r.tool, r.args["host"]) for r in asked] == [("bash", "ask.test"), ("bash", "ask.test")]
    assert "WebFetch(domain:ask.test)" in asked[0].reason
    requests = (await system.llm.wait_requests(seen + 4, timeout=30))[seen:]
    tools = [m["content"] for r in requests for m in r["messages"] if m.get("role") == "tool"]
    assert "hello ask.test" in tools[0]
    assert "403" in tools[-1] or "did not approve" in tools[-1]
    assert "hello ask.test" not in tools[-1]
