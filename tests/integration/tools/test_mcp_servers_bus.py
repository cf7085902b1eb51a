"""MCP servers as tools, on a real nats-server with every service (and a scripted LLM over real litellm).

Real third-party servers from PyPI (``mcp-server-time``, ``mcp-server-git``) and the tests' own
misbehaving one (mcp_test_server.py), each started by the tool runner inside the OS sandbox.
One system per module: servers start once and are shared by the tests, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.session import ClientRequestContext

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import ApprovalAnswer, ApprovalRequest, JidoClient
from jidocode.client._callbacks import approval_request_of
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.service import serve as serve_conversation
from jidocode.services.mcp_gateway import build_server
from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.mcp.approvals import approve_server
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ProjectClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.conversation import ApprovalResponse
from jidocode.shared.events.tools import ToolCatalog, ToolResult
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.e2e.test_first_chat import Terminal
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import FLAKY, sandbox_readable, stdio, write_mcp_json
from tests.integration.tools.support import failure, run_tool
from tests.integration.tools.test_tools_cli import jidocode

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class McpSystem:
    config: Config
    bus: Bus
    runner: ToolRunner
    base: Path
    home: Path
    root: Path
    pid: str
    llm: ScriptedLlm

    async def run(self, name: str, args: dict[str, Any], rid: str, **kw: Any) -> ToolResult:
        return await run_tool(self.bus, self.pid, name, args, request_id=rid, **kw)

    async def start(self, root: Path) -> str:
        return (await EngineClient(self.bus).start_project(str(root), timeout=20)).project_id


def _processes_of(root: Path) -> list[int]:
    """Processes whose command line names ``root`` (a project's MCP servers and their launchers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(root).encode() in cmdline:
                found.append(int(entry.name))
    return found


async def _until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait until ``cond()`` holds: checked after every turn of the loop, bounded by ``timeout``."""

    async def loop() -> None:
        while not cond():  # noqa: ASYNC110  # white-box: the runner's state, changed by a signal
            await asyncio.sleep(0.05)

    await asyncio.wait_for(loop(), timeout)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpSystem]:
    base = tmp_path_factory.mktemp("mcp")
    home = base / "home"
    root = base / "proj"
    root.mkdir()
    home.mkdir()
    (home / "secret.txt").write_text("global secret\n")
    (home / "settings.json").write_text(
        json.dumps({"permissions": {"additional_directories": sandbox_readable()}})
    )
    (root / "README.md").write_text("inside the project\n")
    git = await asyncio.create_subprocess_exec("git", "init", "-q", str(root))
    assert await git.wait() == 0
    # the user's own server (global layer), and the project's (trusted below)
    write_mcp_json(home, {"flaky": stdio(FLAKY, env={"FLAKY_GREETING": "hi"})})
    write_mcp_json(
        root,
        {
            "time": stdio("-m", "mcp_server_time", "--local-timezone", "UTC"),
            "git": stdio("-m", "mcp_server_git", "--repository", str(root)),
        },
    )
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {
                    "allow": ["Read", "mcp__time", "mcp__flaky", "mcp__git__git_status"],
                    "deny": ["mcp__git__git_commit"],
                },
            }
        )
    )
    trust_project(root, home=home)
    async with ScriptedLlm() as llm, contextlib.AsyncExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setenv("JIDO_CODE_HOME", str(home))
        mp.setenv("JIDO_LLM_MODEL", "openai/scripted")
        mp.setenv("JIDO_LLM_API_BASE", llm.api_base)
        mp.setenv("JIDO_MCP_START_TIMEOUT_S", "60")  # a loaded machine starts Python slowly
        server = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
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
        try:
            names = ("engine", "project", "asset_loader", "conversation", "tool_runner")
            await wait_for_services(config, names, timeout=30)
            pid = (await EngineClient(bus).start_project(str(root), timeout=20)).project_id
            yield McpSystem(config, bus, runner, base, home, root, pid, llm)
        finally:
            await runner.stop()
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await runner_bus.close()
            await llm_bus.close()
            await asyncio.to_thread(server.stop)


async def _catalogue_with(system: McpSystem, pid: str, wanted: set[str]) -> ToolCatalog:
    """The project's catalogue once it lists ``wanted`` (a listing waits for a server's start for
    10 s at most: on a loaded machine a Python server may take longer)."""

    async def loop() -> ToolCatalog:
        while True:
            catalog = await ProjectClient(system.bus, pid).list_tools(timeout=60)
            if wanted <= {t.name for t in catalog.tools}:
                return catalog

    return await asyncio.wait_for(loop(), 120)


async def test_catalogue_lists_the_servers_tools_under_the_rules(system: McpSystem) -> None:
    wanted = {"mcp__time__get_current_time", "mcp__time__convert_time", "mcp__git__git_status"}
    catalog = await _catalogue_with(system, system.pid, wanted)
    names = {t.name for t in catalog.tools}
    assert {"mcp__flaky__echo", "read_file"} <= names  # the global layer's server, the built-ins
    assert "mcp__git__git_commit" not in names  # a deny rule hides it
    spec = next(t for t in catalog.tools if t.name == "mcp__time__get_current_time")
    assert "timezone" in json.dumps(spec.input_schema)
    hidden = await ToolsClient(system.bus, system.pid).mcp_tools(include_hidden=True, timeout=60)
    assert "mcp__git__git_commit" in {t.name for t in hidden.tools}


async def test_cli_runs_mcp_tools(system: McpSystem) -> None:
    """``jidocode tools run`` (its ``tools list`` reads the same catalogue as the test above)."""
    code, out, err = await jidocode(
        system.config,
        "tools",
        "run",
        str(system.root),
        "mcp__time__get_current_time",
        "--args",
        '{"timezone": "UTC"}',
    )
    assert code == 0, err
    assert json.loads(out)["data"]["structured"]["timezone"] == "UTC"


async def test_a_conversation_calls_an_mcp_tool_and_the_plugin_registry(system: McpSystem) -> None:
    """End to end: the model (the scripted LLM, over real litellm) calls ``mcp__time__…`` under the
    allow rule ``mcp__time``; the SDK's plugin registry lists the server and takes it away."""
    system.llm.script(
        Reply.tools(call("mcp__time__get_current_time", timezone="UTC")),
        Reply.answer("It is late in UTC."),
    )
    client = await JidoClient.connect(
        project_dir=system.root,
        bus=system.bus,
        settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
    )
    assert await client.send_message("What time is it in UTC?", timeout=90) == "It is late in UTC."
    first, second = await system.llm.wait_requests(2, timeout=30)
    assert "mcp__time__get_current_time" in {t["function"]["name"] for t in first.get("tools", [])}
    (tool,) = [m for m in second["messages"] if m.get("role") == "tool"]
    assert '"timezone": "UTC"' in tool["content"]

    plugins = {p.name: p for p in await client.plugins.discover()}
    assert plugins["builtin"].kind == "builtin" and "read_file" in plugins["builtin"].tools
    time_plugin = plugins["mcp__time"]
    assert time_plugin.kind == "mcp" and time_plugin.state == "ready" and time_plugin.layer == "project"
    assert "mcp__time__get_current_time" in time_plugin.tools and time_plugin.exposed
    assert plugins["mcp__flaky"].layer == "global"
    direct = await client.plugins.call_mcp_tool("time", "get_current_time", {"timezone": "UTC"})
    assert direct.ok and direct.data["structured"]["timezone"] == "UTC"
    await client.plugins.unexpose_tool("mcp__time")
    assert not {p.name: p for p in await client.plugins.discover()}["mcp__time"].exposed
    system.llm.script(Reply.answer("No clock."))
    assert await client.send_message("And now?", timeout=90) == "No clock."
    offered = {
        t["function"]["name"] for t in (await system.llm.wait_requests(3, timeout=30))[2].get("tools", [])
    }
    assert "read_file" in offered and not any(name.startswith("mcp__time") for name in offered)
    await client.close()


async def test_results_text_structured_images_errors(system: McpSystem) -> None:
    now = await system.run("mcp__time__get_current_time", {"timezone": "UTC"}, "t1")
    assert now.ok, now
    assert now.data["structured"]["timezone"] == "UTC"
    assert '"timezone": "UTC"' in now.data["text"]

    status = await system.run("mcp__git__git_status", {"repo_path": str(system.root)}, "g1")
    assert status.ok, status
    assert "branch" in status.data["text"].lower()

    err = failure(await system.run("mcp__flaky__fail", {"message": "boom"}, "f1"))
    assert err.type == "mcp_tool_error" and "boom" in err.message
    assert err.details == {"server": "flaky", "tool": "fail"}

    img = await system.run("mcp__flaky__image", {}, "f2")
    assert img.ok and img.artifacts[0]["type"] == "image" and img.artifacts[0]["mime_type"] == "image/png"
    sq = await system.run("mcp__flaky__square", {"n": 7}, "f3")
    assert sq.ok and sq.data["structured"] == {"n": 7, "square": 49}
    bad = failure(await system.run("mcp__flaky__square", {"n": "seven"}, "f4"))
    assert bad.type in ("mcp_tool_error", "invalid_input"), bad


async def test_rules_default_ask_deny_and_unknown_names(system: McpSystem) -> None:
    asked = failure(await system.run("mcp__git__git_log", {"repo_path": str(system.root)}, "r1"))
    assert asked.type == "permission_denied" and "ask" in asked.message.lower()
    denied = failure(await system.run("mcp__git__git_commit", {"repo_path": ".", "message": "x"}, "r2"))
    assert denied.type == "permission_denied" and "deny" in denied.message
    no_tool = failure(await system.run("mcp__time__nope", {}, "r3"))
    assert no_tool.type == "not_found" and "get_current_time" in no_tool.message
    no_server = failure(await system.run("mcp__nosuch__x", {}, "r4"))
    assert no_server.type == "not_found" and "flaky" in no_server.message


async def test_a_crashed_server_restarts(system: McpSystem) -> None:
    first = await system.run("mcp__flaky__boot", {}, "c1")
    assert first.ok
    gone = failure(await system.run("mcp__flaky__crash", {}, "c2"))
    assert gone.type == "mcp_server_unavailable" and "went away" in gone.message
    again = await system.run("mcp__flaky__boot", {}, "c3")
    assert again.ok and again.data["text"] != first.data["text"]  # a new run of the server
    conn = system.runner._pipeline().mcp._projects[system.pid].connections["flaky"]
    assert conn.starts == 2 and conn.backoff.crashes == 1


async def test_the_sandbox_holds_a_stdio_server(system: McpSystem) -> None:
    inside = await system.run("mcp__flaky__read", {"path": str(system.root / "README.md")}, "s1")
    assert inside.data["text"] == "inside the project\n"
    secret = await system.run("mcp__flaky__read", {"path": str(system.home / "secret.txt")}, "s2")
    assert secret.data["text"].startswith("cannot read"), secret  # the global home is hidden
    outside = system.base / "outside.txt"
    await system.run("mcp__flaky__write", {"path": str(outside), "text": "x"}, "s3")
    assert not outside.exists()
    wrote = await system.run("mcp__flaky__write", {"path": str(system.root / "made.txt"), "text": "y"}, "s4")
    assert wrote.data["text"] == "written" and (system.root / "made.txt").read_text() == "y"
    greeting = await system.run("mcp__flaky__env", {"name": "FLAKY_GREETING"}, "s5")
    assert greeting.data["text"] == "hi"  # the server's env of .mcp.json
    leaked = await system.run("mcp__flaky__env", {"name": "JIDO_CODE_HOME"}, "s6")
    assert leaked.data["text"] == "<unset>"  # the runner's own environment does not reach it


async def _settled(system: McpSystem, pid: str, name: str) -> ToolResult:
    """Call ``name`` until its server is no longer starting (a call may end before the start does)."""

    async def loop() -> ToolResult:
        for i in range(1000):
            result = await run_tool(system.bus, pid, name, {"text": "warm"}, request_id=f"{name}-{i}")
            if result.ok or failure(result).details.get("reason") != "starting":
                return result
        raise AssertionError(f"{name} kept starting")

    return await asyncio.wait_for(loop(), 120)


async def test_trust_gate_failing_and_hanging_servers_and_stop(system: McpSystem) -> None:
    """A project whose calls get 4 s: a working server, one that never starts, one that exits."""
    root = system.base / "edge"
    write_mcp_json(
        root,
        {
            "edge": stdio(FLAKY),
            "stuck": stdio(FLAKY, "--hang-on-start"),
            "broken": stdio(FLAKY, "--exit-on-start"),
        },
    )
    (root / ".jido").mkdir()
    settings = {"permissions": {"allow": ["Read", "mcp__edge", "mcp__stuck", "mcp__broken"]}}
    (root / ".jido" / "settings.json").write_text(json.dumps(settings))
    pid = await system.start(root)

    # untrusted: the user's own servers only; the project's are not started
    names = {t.name for t in (await _catalogue_with(system, pid, {"mcp__flaky__echo"})).tools}
    assert not any(n.startswith(("mcp__edge", "mcp__stuck", "mcp__broken")) for n in names)
    refused = failure(await run_tool(system.bus, pid, "mcp__edge__echo", {"text": "x"}, request_id="u1"))
    assert refused.type == "not_found" and "not trusted" in refused.message
    host = system.runner._pipeline().mcp
    assert set(host.running(pid)) == {"flaky"}

    trust_project(root, home=system.home)
    (root / ".jido" / "settings.json").write_text(json.dumps({**settings, "tools": {"timeout_s": 4}}))
    stuck, broken, edge = await asyncio.gather(
        run_tool(system.bus, pid, "mcp__stuck__echo", {"text": "x"}, request_id="b1"),
        _settled(system, pid, "mcp__broken__echo"),
        _settled(system, pid, "mcp__edge__echo"),
    )
    assert edge.ok and edge.data["text"] == "warm", edge
    # a server that does not start within the call's time fails that call, and keeps starting
    assert failure(stuck).type == "mcp_server_unavailable" and "still starting" in failure(stuck).message
    # one that exits: its stderr, quoted
    assert failure(broken).type == "mcp_server_unavailable" and "did not start" in failure(broken).message
    assert "configured to exit at start" in failure(broken).message

    # a call that hangs times out (the project's 4 s) and holds up no other call
    hang = asyncio.create_task(run_tool(system.bus, pid, "mcp__edge__hang", {}, request_id="h1"))
    echo = asyncio.create_task(
        run_tool(system.bus, pid, "mcp__edge__echo", {"text": "still here"}, request_id="h2")
    )
    done, _ = await asyncio.wait({hang, echo}, return_when=asyncio.FIRST_COMPLETED, timeout=60)
    assert echo in done and hang not in done
    assert echo.result().ok and echo.result().data["text"] == "still here"
    err = failure(await asyncio.wait_for(hang, 60))
    assert err.type == "timeout" and "'edge'" in err.message and "'hang'" in err.message

    # the catalogue leaves the failing servers out and keeps everything else
    names = {t.name for t in (await ProjectClient(system.bus, pid).list_tools(timeout=60)).tools}
    assert {"read_file", "mcp__edge__echo", "mcp__flaky__echo"} <= names
    assert not any(n.startswith(("mcp__stuck", "mcp__broken")) for n in names)

    # stopping the project stops its servers on the replica
    assert host.running(pid)["edge"] == "ready"
    assert _processes_of(root)  # the servers' processes (launcher, sandbox, server) are there
    await EngineClient(system.bus).stop_project(pid, timeout=20)
    await _until(lambda: host.running(pid) == {})
    assert _processes_of(root) == []  # ... and gone, the one still starting too


async def _listening(port: int, timeout: float = 60.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""

    async def loop() -> None:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)  # not listening yet; bounded by the wait_for below
                continue
            writer.close()
            await writer.wait_closed()
            return

    await asyncio.wait_for(loop(), timeout)


async def test_a_stdio_servers_elicitation_is_asked_in_the_calls_conversation(system: McpSystem) -> None:
    """A question of a server in the sandbox (over its pipes) reaches the call's conversation."""
    asked: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_out(env: Envelope) -> None:
        if env.type == "conversation.approval.requested":
            await asked.put(env)

    sub = await system.bus.subscribe(subjects.conversation_out_filter(system.pid, "c-stdio"), on_out)
    await system.bus.nc.flush()
    try:
        call = asyncio.create_task(system.run("mcp__flaky__confirm", {}, "q1", conversation_id="c-stdio"))
        env = await asyncio.wait_for(asked.get(), 60)
        assert env.data["request_id"].startswith("q1/elicitation-") and "Go ahead?" in env.data["reason"]
        await system.bus.publish(
            subjects.conversation_in(system.pid, "c-stdio"),
            ApprovalResponse(request_id=env.data["request_id"], decision="deny"),
            project_id=system.pid,
            conversation_id="c-stdio",
        )
        result = await call
        assert result.ok and result.data["text"] == "decline", result
    finally:
        await sub.unsubscribe()


async def test_a_streamable_http_server_with_headers(system: McpSystem) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        FLAKY,
        "--http",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        root = system.base / "web"
        url = f"http://127.0.0.1:{port}/mcp"
        write_mcp_json(
            root,
            {
                "web": {"type": "http", "url": url, "headers": {"X-Test-Token": "s3cret"}},
                "down": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
            },
        )
        (root / ".jido").mkdir()
        (root / ".jido" / "settings.json").write_text(
            json.dumps({"permissions": {"allow": ["mcp__web", "mcp__down"]}})
        )
        trust_project(root, home=system.home)
        approve_server(root, "web", url, home=system.home)  # a project's URLs need the user's approval
        approve_server(root, "down", "http://127.0.0.1:9/mcp", home=system.home)
        pid = await system.start(root)
        await _listening(port)
        echo = await run_tool(system.bus, pid, "mcp__web__echo", {"text": "over http"}, request_id="w1")
        assert echo.ok and echo.data["text"] == "over http", echo
        token = await run_tool(system.bus, pid, "mcp__web__header", {"name": "X-Test-Token"}, request_id="w2")
        assert token.ok and token.data["text"] == "s3cret", token  # the configured headers go along
        down = failure(await run_tool(system.bus, pid, "mcp__down__echo", {}, request_id="w3"))
        assert down.type == "mcp_server_unavailable" and "did not start" in down.message
        statuses = {s.name: s for s in (await ToolsClient(system.bus, pid).mcp_servers()).servers}
        assert statuses["web"].transport == "http" and statuses["web"].state == "ready"
        assert statuses["down"].state == "crashed" and statuses["down"].error
    finally:
        proc.kill()
        await proc.wait()


async def test_each_replica_has_its_own_connections(system: McpSystem) -> None:
    """A second tool-runner replica: calls spread over both, each runs its own server process."""
    cfg = system.config.model_copy(update={"instance": "second"})
    bus2 = await Bus.connect(cfg, "tool_runner")
    second = ToolRunner(bus2, cfg)
    await second.start()
    try:
        boots: set[str] = set()

        async def spread() -> None:
            i = 0
            while len(boots) < 2:  # the queue group hands calls to both replicas
                batch = await asyncio.gather(
                    *(system.run("mcp__flaky__boot", {}, f"rep-{i}-{j}") for j in range(8))
                )
                boots.update(r.data["text"] for r in batch if r.ok)
                i += 1

        await asyncio.wait_for(spread(), 120)
        first_host, second_host = system.runner._pipeline().mcp, second._pipeline().mcp
        assert first_host.running(system.pid)["flaky"] == "ready"
        assert second_host.running(system.pid)["flaky"] == "ready"
        assert first_host is not second_host
    finally:
        await second.stop()
        await bus2.close()


ORDER = {"name": "Ada", "count": 3, "ok": True, "colour": "green"}


async def test_a_form_elicitation_answered_through_the_sdk_gives_the_server_typed_values(
    system: McpSystem,
) -> None:
    """The server's form (``requestedSchema``) reaches the SDK's ``approve`` callback; the values
    it answers reach the server typed (an int stays an int, a bool a bool)."""
    asked: asyncio.Queue[ApprovalRequest] = asyncio.Queue()

    async def approve(request: ApprovalRequest) -> ApprovalAnswer:
        await asked.put(request)
        return ApprovalAnswer(content=ORDER)

    client = await JidoClient.connect(project_dir=system.root, bus=system.bus)
    try:
        await client.configure_tools(approve=approve)
        cid = await client.start_conversation()
        result = await system.run("mcp__flaky__order", {}, "order-sdk", conversation_id=cid)
        assert result.ok and json.loads(result.data["text"]) == ORDER, result
        request = asked.get_nowait()
        assert request.request_id.startswith("order-sdk/elicitation-") and request.form is not None
        assert request.form["properties"]["colour"]["enum"] == ["red", "green", "blue"]
        assert request.form["required"] == ["name", "count", "ok", "colour"]
    finally:
        await client.close()


async def _order_asked(system: McpSystem, cid: str, rid: str) -> tuple[asyncio.Task[ToolResult], Envelope]:
    """``mcp__flaky__order`` running in ``cid``, and the question its server asked."""
    asked: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_out(env: Envelope) -> None:
        if env.type == "conversation.approval.requested":
            await asked.put(env)

    sub = await system.bus.subscribe(subjects.conversation_out_filter(system.pid, cid), on_out)
    await system.bus.nc.flush()
    try:
        call = asyncio.create_task(system.run("mcp__flaky__order", {}, rid, conversation_id=cid))
        return call, await asyncio.wait_for(asked.get(), 60)
    finally:
        await sub.unsubscribe()


async def test_a_wrong_type_is_refused_naming_the_field_and_never_reaches_the_server(
    system: McpSystem,
) -> None:
    """The SDK refuses content that does not fit the form before sending, naming the field; the
    runner checks again (a client need not be the SDK): the server then gets ``cancel``."""
    client = await JidoClient.connect(project_dir=system.root, bus=system.bus)
    try:
        cid = await client.start_conversation()
        call, env = await _order_asked(system, cid, "order-wrong")
        request = approval_request_of(env, cid)
        assert request is not None
        with pytest.raises(InvalidInput, match=r"'count'.*integer"):
            await client.answer_approval(request, ApprovalAnswer(content={**ORDER, "count": "3"}))
        with pytest.raises(InvalidInput, match=r"'colour'.*red, green, blue"):
            await client.answer_approval(request, ApprovalAnswer(content={**ORDER, "colour": "pink"}))
        await system.bus.publish(  # not through the SDK: the runner checks
            subjects.conversation_in(system.pid, cid),
            ApprovalResponse(
                request_id=request.request_id, decision="approve_once", content={**ORDER, "ok": "y"}
            ),
            project_id=system.pid,
            conversation_id=cid,
        )
        result = await call
        assert result.ok and result.data["text"] == "cancel", result
    finally:
        await client.close()


async def test_a_form_declined_is_declined(system: McpSystem) -> None:
    client = await JidoClient.connect(project_dir=system.root, bus=system.bus)
    try:
        cid = await client.start_conversation()
        call, env = await _order_asked(system, cid, "order-deny")
        request = approval_request_of(env, cid)
        assert request is not None
        await client.answer_approval(request, ApprovalAnswer(decision="deny"))
        result = await call
        assert result.ok and result.data["text"] == "decline", result
    finally:
        await client.close()


class _FormFiller:
    """An MCP client's elicitation callback: answers every form with ``content`` (``None``:
    declines), and keeps what it was asked."""

    def __init__(self, content: dict[str, Any] | None) -> None:
        self.content = content
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        if self.content is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=self.content)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_form_reaches_an_mcp_client_of_jidocode_mcp_and_its_values_the_server(
    system: McpSystem, mode: str
) -> None:
    """A call through JidoCode's own MCP server (``jidocode mcp``) to a tool whose MCP server asks a
    form: the client is asked that form, fields and all (a round of the call on a 2026-07-28
    connection, an elicitation request on a 2025 one), and the values it gives reach the server
    typed; a decline is the server's decline."""
    filler = _FormFiller(ORDER)
    async with Client(
        build_server(system.bus, system.pid),
        mode=mode,
        elicitation_callback=filler,  # type: ignore[arg-type]
    ) as client:
        result = await client.call_tool("mcp__flaky__order", {})
        assert result.is_error is False, result
        [asked] = filler.asked
        assert "asks" in asked.message and asked.requested_schema["required"] == [
            "name",
            "count",
            "ok",
            "colour",
        ]
        # the server's own result, valid against its output schema ({"result": <text>})
        assert result.structured_content is not None
        assert json.loads(result.structured_content["result"]) == ORDER  # an int stays an int …
        filler.content = None
        declined = await client.call_tool("mcp__flaky__order", {})
        assert declined.structured_content == {"result": "decline"} and len(filler.asked) == 2


@pytest.mark.timeout(300)
async def test_chat_on_a_terminal_answers_a_form_field_by_field(system: McpSystem) -> None:
    """``jidocode chat`` on a pseudo-terminal: the yes asks each field (the enum's choices
    numbered), a wrong value is asked again naming the field, the server gets typed values."""
    asked_before = len(system.llm.requests)
    system.llm.script(Reply.tools(call("mcp__flaky__order")), Reply.answer("Ordered."))
    env = {
        **os.environ,
        "NATS_URL": system.config.nats_url,
        "JIDO_CODE_HOME": str(system.home),
        "COLUMNS": "200",
    }
    term = Terminal([sys.executable, "-m", "jidocode.cli.main", "chat", str(system.root), "order"], env)
    at = await term.expect("needs approval")
    at = await term.expect("Your order?", after=at)
    at = await term.expect("[N]o:", after=at)
    term.type("y")
    for shown, typed in [
        ("Who orders", "Ada"),
        ("count", "three"),
        ("field 'count': 'three' is not an integer", "3"),
        ("y/n", "yes"),
        ("1) red  2) green  3) blue", "2"),
    ]:
        at = await term.expect(shown, after=at)
        at = await term.expect("> ", after=at)
        term.type(typed)
    await term.expect("Ordered.", after=at)
    assert await term.close() == 0
    last = (await system.llm.wait_requests(asked_before + 2, timeout=30))[-1]
    (tool,) = [m for m in last["messages"] if m.get("role") == "tool"]
    assert json.dumps(json.dumps(ORDER))[1:-1] in tool["content"], tool
