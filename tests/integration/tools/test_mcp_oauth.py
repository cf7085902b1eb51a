"""HTTP MCP servers behind OAuth: the user's login (the real CLI), the tool runner's use of it;
and the server's elicitations, asked through the calling conversation's approval flow.

A local authorization server on authlib and the SDK's MCP server with its auth settings
(oauth_fixture.py), a real nats-server with the engine, project and asset-loader services and a
tool runner. The test plays the user's browser: it opens the authorization URL the CLI prints
and follows the redirect to the CLI's loopback callback. One system per module, in order:
no login yet → login → calls → an expired token refreshed → a revoked grant asks for a new login
→ elicitations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import ApprovalRequest, JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.service import serve as serve_conversation
from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.mcp.host import McpHost
from jidocode.services.tool_runner.mcp.oauth import TokenFile, login_path
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import ApprovalResponse
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import write_mcp_json
from tests.integration.tools.oauth_fixture import OAuthWorld, oauth_world
from tests.integration.tools.support import failure, run_tool

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SERVER = "guarded"


@dataclass
class OAuthSystem:
    config: Config
    bus: Bus
    host: McpHost
    world: OAuthWorld
    home: Path
    data: Path
    root: Path
    pid: str
    llm: ScriptedLlm

    async def run(self, rid: str) -> ToolResult:
        return await run_tool(self.bus, self.pid, f"mcp__{SERVER}__whoami", {}, request_id=rid, timeout=60)

    def login_file(self) -> Path:
        return login_path(self.data, SERVER, self.world.url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OAuthSystem]:
    base = tmp_path_factory.mktemp("oauth")
    home, data, root = base / "home", base / "data", base / "proj"
    for d in (home, data, root):
        d.mkdir()
    (home / "settings.json").write_text(json.dumps({"permissions": {"allow": [f"mcp__{SERVER}"]}}))
    trust_project(root, home=home)
    async with oauth_world() as world, ScriptedLlm() as llm, contextlib.AsyncExitStack() as stack:
        write_mcp_json(home, {SERVER: {"type": "http", "url": world.url}})  # the user's own server
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setenv("JIDO_CODE_HOME", str(home))
        mp.setenv("JIDO_DATA_HOME", str(data))
        mp.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # the test's authorization server is on http://
        mp.setenv("JIDO_LLM_MODEL", "openai/scripted")
        mp.setenv("JIDO_LLM_API_BASE", llm.api_base)
        server = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
        config = Config(nats_url=server.url, jido_home=home, instance="test")
        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        tasks = [
            asyncio.create_task(serve_many(config, stop, ("engine", "project", "asset_loader"))),
            asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
        ]
        host = McpHost(jido_home=home, data_home=data, start_timeout_s=60)
        runner_bus = await Bus.connect(config, "tool_runner")
        runner = ToolRunner(runner_bus, config, mcp=host)
        await runner.start()
        bus = await Bus.connect(config, "test")
        try:
            names = ("engine", "project", "asset_loader", "conversation", "tool_runner")
            await wait_for_services(config, names, timeout=30)
            pid = (await EngineClient(bus).start_project(str(root), timeout=20)).project_id
            yield OAuthSystem(config, bus, host, world, home, data, root, pid, llm)
        finally:
            await runner.stop()
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await runner_bus.close()
            await llm_bus.close()
            await asyncio.to_thread(server.stop)


async def _read_url(stdout: asyncio.StreamReader) -> str:
    """The authorization URL the CLI prints (the line after its ``open this URL`` line)."""
    while True:
        line = (await stdout.readline()).decode()
        assert line, "the CLI ended without printing an authorization URL"
        if line.startswith("http"):
            return line.strip()


async def login_as_user(system: OAuthSystem, *, refuse: bool = False) -> str:
    """``jidocode mcp-servers login <root> guarded --no-browser``, the test acting as the browser:
    the authorization server consents and redirects to the CLI's loopback callback (``refuse``:
    the browser comes back with the authorization server's ``access_denied``). Its output."""
    env = {**os.environ, "JIDO_CODE_HOME": str(system.home), "JIDO_DATA_HOME": str(system.data)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from jidocode.cli.main import app; app()",
        "mcp-servers",
        "login",
        str(system.root),
        SERVER,
        "--no-browser",
        "--timeout",
        "120",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        url = await asyncio.wait_for(_read_url(proc.stdout), 90)
        async with httpx.AsyncClient() as browser:
            if refuse:
                return await _refused(browser, url, proc)
            consent = await browser.get(url)
            assert consent.status_code == 302, consent.text
            callback = consent.headers["location"]
            assert callback.startswith("http://127.0.0.1:") and "/callback?" in callback
            landed = await browser.get(callback)
            assert landed.status_code == 200 and "logged in" in landed.text
        rest, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    return rest.decode()


async def _refused(browser: httpx.AsyncClient, url: str, proc: asyncio.subprocess.Process) -> str:
    query = dict(parse_qsl(urlsplit(url).query))
    denied = (
        f"{query['redirect_uri']}?error=access_denied&error_description=nope%20today&state={query['state']}"
    )
    assert (await browser.get(denied)).status_code == 400
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 1, (out, err)
    return err.decode()


async def test_before_any_login_a_call_says_to_log_in(system: OAuthSystem) -> None:
    error = failure(await system.run("before"))
    assert error.type == "mcp_login_required", error
    assert f"jidocode mcp-servers login {system.root} {SERVER}" in error.message
    assert system.world.url in error.message
    assert not [t for t in system.world.auth.store.tokens]  # no token was issued


async def test_the_users_login_discovers_registers_with_pkce_and_stores_tokens(system: OAuthSystem) -> None:
    out = await login_as_user(system)
    assert f"logged in to {SERVER}: 3 tool(s)" in " ".join(out.split())
    auth = system.world.auth.store
    assert auth.challenges[-1] == "S256"  # PKCE
    assert auth.grants[-1] == "authorization_code"
    assert auth.tokens[-1].resource == system.world.url  # RFC 8707: the token is for this server
    [client] = auth.clients.values()  # registered by the login (the runner registers none)
    assert client.metadata["redirect_uris"][0].startswith("http://127.0.0.1:")

    path = system.login_file()
    assert path.is_relative_to(system.data) and not path.is_relative_to(system.root)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stored = TokenFile(path, system.world.url).read()
    assert stored.tokens is not None and stored.tokens.access_token == auth.tokens[-1].access_token

    # the tool runner uses the stored login at once (a refused login costs no backoff)
    result = await system.run("after-login")
    assert result.ok and result.data["text"] == "hello alice", result


async def test_an_expired_access_token_is_refreshed_from_the_stored_login(system: OAuthSystem) -> None:
    auth = system.world.auth
    before = len(auth.store.tokens)
    auth.expire_access_tokens()  # the server no longer takes them
    file = TokenFile(system.login_file(), system.world.url)
    file.update(expires_at=1.0)  # and the stored login knows it (time passed)
    await system.host.stop_project(system.pid)  # the next call starts a new connection from the file

    result = await system.run("after-expiry")
    assert result.ok and result.data["text"] == "hello alice", result
    assert auth.store.grants[-1] == "refresh_token"
    assert len(auth.store.tokens) == before + 1
    stored = file.read()
    assert stored.tokens is not None and stored.tokens.access_token == auth.store.tokens[-1].access_token
    assert auth.store.tokens[-1].resource == system.world.url


async def test_a_revoked_grant_asks_for_a_new_login_and_the_login_repairs_it(system: OAuthSystem) -> None:
    system.world.auth.revoke_all()  # the user withdrew the grant at the authorization server
    error = failure(await system.run("after-revoke"))  # the live connection meets a 401
    assert error.type == "mcp_login_required", error
    assert f"jidocode mcp-servers login {system.root} {SERVER}" in error.message

    await system.host.stop_project(system.pid)
    again = failure(await system.run("after-revoke-restart"))  # a new one: the refresh is refused too
    assert again.type == "mcp_login_required", again

    await login_as_user(system)
    result = await system.run("after-new-login")
    assert result.ok and result.data["text"] == "hello alice", result


async def test_a_refused_login_says_why_and_keeps_the_earlier_login(system: OAuthSystem) -> None:
    before = system.login_file().read_bytes()
    err = await login_as_user(system, refuse=True)
    assert "mcp_login_failed" in err and "refused the login: nope today" in " ".join(err.split())
    assert "Traceback" not in err, err  # one plain line, not the SDK's log
    assert system.login_file().read_bytes() == before
    assert not list(system.login_file().parent.glob(".*.pending"))
    result = await system.run("after-refused-login")
    assert result.ok, result


async def _answering(
    system: OAuthSystem, cid: str, decision: str | None, asked: list[Envelope]
) -> AsyncIterator[None]:
    """Answer every question on conversation ``cid`` with ``decision`` (as a client would; ``None``:
    collect them, answer none)."""

    async def on_out(env: Envelope) -> None:
        if env.type == "conversation.approval.requested":
            asked.append(env)
            if decision is None:
                return
            await system.bus.publish(
                subjects.conversation_in(system.pid, cid),
                ApprovalResponse(request_id=env.data["request_id"], decision=decision),  # type: ignore[arg-type]
                project_id=system.pid,
                conversation_id=cid,
            )

    sub = await system.bus.subscribe(subjects.conversation_out_filter(system.pid, cid), on_out)
    await system.bus.nc.flush()
    try:
        yield
    finally:
        await sub.unsubscribe()


answering = contextlib.asynccontextmanager(_answering)


async def _call(system: OAuthSystem, tool: str, rid: str, cid: str | None) -> str:
    result = await run_tool(
        system.bus, system.pid, f"mcp__{SERVER}__{tool}", {}, request_id=rid, conversation_id=cid
    )
    assert result.ok, result
    return str(result.data["text"])


async def test_an_elicitation_is_asked_through_the_calls_approval_flow(system: OAuthSystem) -> None:
    asked: list[Envelope] = []
    async with answering(system, "c-yes", "approve_once", asked):
        assert await _call(system, "deploy", "e1", "c-yes") == "accept:True"
    [question] = asked
    assert question.data["request_id"].startswith("e1/elicitation-")  # the call's own question
    assert question.data["tool"] == f"mcp__{SERVER}__deploy"
    assert "Deploy to production?" in question.data["reason"]
    assert question.data["args"]["schema"]["properties"]["approve"]["type"] == "boolean"

    asked.clear()
    async with answering(system, "c-no", "deny", asked):
        assert await _call(system, "deploy", "e2", "c-no") == "decline"
    assert len(asked) == 1

    # nobody to ask (no conversation): cancel; a form a yes cannot fill is asked with its form
    # (a client may fill it, decision 0344), and a yes without content is a cancel
    assert await _call(system, "deploy", "e3", None) == "cancel"
    asked.clear()
    async with answering(system, "c-form", "approve_once", asked):
        assert await _call(system, "colour", "e4", "c-form") == "cancel"
    assert [env.data["form"]["required"] for env in asked] == [["colour"]]


async def test_the_sdks_approve_callback_answers_an_elicitation_of_the_model_s_call(
    system: OAuthSystem,
) -> None:
    """End to end: the model calls the tool, the server asks, the SDK client's ``approve`` callback
    (the one every approval reaches) says yes, and the model reads the accepted answer."""
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return "approve_once"

    system.llm.script(Reply.tools(call(f"mcp__{SERVER}__deploy")), Reply.answer("Deployed."))
    client = await JidoClient.connect(
        project_dir=system.root,
        bus=system.bus,
        settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
    )
    try:
        await client.configure_tools(approve=approve)
        assert await client.send_message("Deploy it.", timeout=90) == "Deployed."
    finally:
        await client.close()
    [request] = asked
    assert request.tool == f"mcp__{SERVER}__deploy" and "Deploy to production?" in request.reason
    _, second = await system.llm.wait_requests(2, timeout=30)
    (tool,) = [m for m in second["messages"] if m.get("role") == "tool"]
    assert "accept:True" in tool["content"]


async def test_an_unanswered_elicitation_is_cancelled(system: OAuthSystem) -> None:
    (system.root / ".jido").mkdir(exist_ok=True)
    (system.root / ".jido" / "settings.json").write_text(json.dumps({"tools": {"approval_timeout_s": 1}}))
    asked: list[Envelope] = []
    try:
        async with answering(system, "c-silent", None, asked):
            assert await _call(system, "deploy", "e5", "c-silent") == "cancel"
        assert len(asked) == 1  # asked, and nobody answered within the approval timeout
    finally:
        (system.root / ".jido" / "settings.json").unlink()
