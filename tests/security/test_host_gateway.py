"""Finding 10 of issue 24: cross-site requests to the gateway (decision 0305).

The browser of a user logged in to the console sends its session cookie with any request to
the gateway, whichever page made it: a page served on another port of the same machine (a
project's dev server, say) is the same *site*, so ``SameSite=Strict`` does not stop it. Such
a page can send a ``text/plain`` or form ``POST`` without a CORS preflight. Before, the
gateway parsed any body as JSON and checked no ``Origin``: the page could start and stop
projects, send messages and approve tool calls. MCP over HTTP did not check ``Origin`` or
``Host`` (DNS rebinding).

Each test runs against the real gateway (uvicorn on a loopback port) in front of the real
services on a real nats-server with the scripted model, and judges by what happened behind
the gateway: the project list, the conversation's events, a file an approval would have
written, the MCP servers the gateway built.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from tests.integration.gateway.conftest import PATIENCE_S, TOKEN, Gateway
from tests.integration.gateway.conftest import gateway as gateway  # the module's running system
from tests.sse_reader import SseMessage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

#: Another origin of the same site as the gateway: a page on another port of loopback.
SAME_SITE_PAGE = "http://127.0.0.1:1"
EVIL = "http://evil.example"
ANSWER = "conversation.assistant.message"
MCP_ACCEPT = "application/json, text/event-stream"


def _own(gw: Gateway) -> str:
    return gw.url


@asynccontextmanager
async def _browser(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding the console's session cookie (``/login?token=``) and no bearer header."""
    async with httpx.AsyncClient(base_url=gw.url, timeout=PATIENCE_S) as http:
        login = await http.get("/login", params={"token": TOKEN})
        assert login.status_code == 303, login.text
        assert http.cookies.get("jidocode_token") == TOKEN
        yield http


def _as_text(body: dict[str, Any], origin: str) -> dict[str, Any]:
    """What a cross-site page's ``fetch(url, {method: "POST", body: "…"})`` sends: text/plain."""
    return {
        "content": json.dumps(body).encode(),
        "headers": {"Content-Type": "text/plain;charset=UTF-8", "Origin": origin},
    }


def _refused(response: httpx.Response, status: int, error_type: str, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == error_type, error
    for word in words:
        assert word in error["message"], error


async def _project(gw: Gateway, name: str) -> str:
    root = gw.project.parent / name
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    return await _start(gw, root)


async def _start(gw: Gateway, root: Path) -> str:
    async with gw.client() as http:
        started = await http.post("/api/projects", json={"root": str(root)})
    assert started.status_code == 200, started.text
    return str(started.json()["project_id"])


async def _statuses(gw: Gateway) -> dict[str, str]:
    """Root -> status (``running``, ``stopped``) of every project the engine knows."""
    async with gw.client() as http:
        listed = await http.get("/api/projects")
    assert listed.status_code == 200, listed.text
    return {str(Path(p["root_path"]).resolve()): p["status"] for p in listed.json()["projects"]}


async def _conversation(gw: Gateway, pid: str) -> str:
    async with gw.client() as http:
        started = await http.post(f"/api/projects/{pid}/conversations", json={})
    assert started.status_code == 200, started.text
    return str(started.json()["conversation_id"])


def _answer_to(correlation_id: str) -> Any:
    def done(message: SseMessage) -> bool:
        return bool(message.event == ANSWER and message.json().get("correlationid") == correlation_id)

    return done


async def _user_messages_until_answer(gw: Gateway, pid: str, cid: str, correlation_id: str) -> list[str]:
    """The text of every user message in the conversation, read up to the answer to ``correlation_id``."""
    async with gw.client() as http:
        events = await gw.collect(
            http, f"/api/projects/{pid}/conversations/{cid}/events", _answer_to(correlation_id)
        )
    return [m.json()["data"]["text"] for m in events if m.event == "conversation.user.message"]


# -- state changes authenticated by the cookie ------------------------------------------------


async def test_a_cross_origin_text_plain_post_with_the_cookie_cannot_start_a_project(
    gateway: Gateway,
) -> None:
    root = gateway.project.parent / "planted"
    root.mkdir()
    async with _browser(gateway) as page:
        for origin in (SAME_SITE_PAGE, EVIL):
            response = await page.post("/api/projects", **_as_text({"root": str(root)}, origin))
            _refused(response, 403, "permission_denied", origin, "not this gateway's origin")
    assert str(root.resolve()) not in await _statuses(gateway)


async def test_a_cross_origin_post_with_the_cookie_cannot_stop_a_project(gateway: Gateway) -> None:
    pid = await _project(gateway, "kept-running")
    root = str((gateway.project.parent / "kept-running").resolve())
    assert (await _statuses(gateway))[root] == "running"
    async with _browser(gateway) as page:
        response = await page.post(f"/api/projects/{pid}/stop", **_as_text({}, SAME_SITE_PAGE))
        _refused(response, 403, "permission_denied", SAME_SITE_PAGE)
        without_body = await page.post(f"/api/projects/{pid}/stop", headers={"Origin": EVIL})
        _refused(without_body, 403, "permission_denied", EVIL)
    assert (await _statuses(gateway))[root] == "running"


async def test_a_cross_origin_post_with_the_cookie_cannot_approve_a_tool_call(gateway: Gateway) -> None:
    target = gateway.project / "ask" / "x.txt"
    before = target.read_text()
    gateway.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="written by a cross-site page\n")),
        Reply.answer("Done."),
    )
    pid = await _start(gateway, gateway.project)
    cid = await _conversation(gateway, pid)
    async with gateway.client() as http:
        sent = await http.post(f"/api/projects/{pid}/conversations/{cid}/messages", json={"text": "Write"})
        assert sent.status_code == 202, sent.text
        path = f"/api/projects/{pid}/conversations/{cid}/events"
        asked = await gateway.collect(http, path, lambda m: m.event == "conversation.approval.requested")
    request_id = asked[-1].json()["data"]["request_id"]
    approval = f"/api/projects/{pid}/conversations/{cid}/approvals/{request_id}"

    async with _browser(gateway) as page:
        refused = await page.post(approval, **_as_text({"decision": "approve_session"}, SAME_SITE_PAGE))
        _refused(refused, 403, "permission_denied", SAME_SITE_PAGE)
    assert target.read_text() == before

    # the request is still open: the user's own answer (deny) is the one that counts
    async with gateway.client() as http:
        denied = await http.post(approval, json={"decision": "deny"})
        assert denied.status_code == 202, denied.text
        done = await gateway.collect(
            http,
            path,
            _answer_to(sent.json()["correlation_id"]),
            headers={"Last-Event-ID": str(asked[-1].id)},
        )
    responses = [m.json()["data"] for m in done if m.event == "conversation.approval.response"]
    assert [r["decision"] for r in responses] == ["deny"], responses
    assert target.read_text() == before


async def _conversation_ids(gw: Gateway, pid: str) -> set[str]:
    async with gw.client() as http:
        listed = await http.get(f"/api/projects/{pid}/conversations")
    assert listed.status_code == 200, listed.text
    return {c["conversation_id"] for c in listed.json()["conversations"]}


async def test_a_cross_origin_post_with_the_cookie_cannot_start_a_conversation(gateway: Gateway) -> None:
    pid = await _project(gateway, "conversations")
    async with _browser(gateway) as page:
        response = await page.post(
            f"/api/projects/{pid}/conversations", **_as_text({"conversation_id": "planted"}, SAME_SITE_PAGE)
        )
        _refused(response, 403, "permission_denied", SAME_SITE_PAGE)
    served = await _conversation(gateway, pid)
    assert await _conversation_ids(gateway, pid) == {served}


def _a2a_send(task_id: str, text: str) -> dict[str, Any]:
    message = {
        "messageId": f"m-{task_id}",
        "contextId": task_id,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_a_cross_origin_a2a_message_with_the_cookie_runs_no_task(gateway: Gateway) -> None:
    gateway.llm.script(Reply.answer("Served over A2A."))
    pid = await _project(gateway, "a2a")
    rpc = f"/projects/{pid}/a2a/jsonrpc"
    headers = {"A2A-Version": "1.0"}
    async with _browser(gateway) as page:
        body = _as_text(_a2a_send("planted-task", "planted"), EVIL)
        response = await page.post(rpc, content=body["content"], headers={**body["headers"], **headers})
        _refused(response, 403, "permission_denied", EVIL)
    async with gateway.client() as http:  # the same request with the bearer header is a task
        served = await http.post(rpc, json=_a2a_send("served-task", "hello"), headers=headers)
        assert served.status_code == 200 and "error" not in served.json(), served.text
    assert await _conversation_ids(gateway, pid) == {"served-task"}


async def test_a_form_post_with_the_cookie_is_refused_and_sends_no_message(gateway: Gateway) -> None:
    gateway.llm.script(Reply.answer("Only the JSON one arrived."))
    pid = await _project(gateway, "forms")
    cid = await _conversation(gateway, pid)
    messages = f"/api/projects/{pid}/conversations/{cid}/messages"
    async with _browser(gateway) as page:
        # an HTML form on another origin: text/plain (its JSON-looking field) or urlencoded
        plain = await page.post(messages, **_as_text({"text": "from a form"}, SAME_SITE_PAGE))
        _refused(plain, 403, "permission_denied")
        form = await page.post(messages, data={"text": "from a form"}, headers={"Origin": EVIL})
        _refused(form, 403, "permission_denied", EVIL)
        # even from the gateway's own origin a form body is not served: only JSON is
        own_form = await page.post(messages, data={"text": "from a form"}, headers={"Origin": _own(gateway)})
        _refused(own_form, 415, "unsupported_media_type", "application/json")
        multipart = await page.post(
            messages, files={"text": (None, "from a form")}, headers={"Origin": _own(gateway)}
        )
        _refused(multipart, 415, "unsupported_media_type", "multipart/form-data")
        # a request that shows no origin at all (no Origin, no Referer) is not served by the cookie
        blind = await page.post(messages, json={"text": "from nowhere"})
        _refused(blind, 403, "permission_denied", "no Origin or Referer")
        served = await page.post(
            messages, json={"text": "from the console"}, headers={"Origin": _own(gateway)}
        )
        assert served.status_code == 202, served.text
    texts = await _user_messages_until_answer(gateway, pid, cid, served.json()["correlation_id"])
    assert texts == ["from the console"]


async def test_a_same_origin_json_post_with_the_cookie_is_served(gateway: Gateway) -> None:
    root = gateway.project.parent / "from-console"
    root.mkdir()
    async with _browser(gateway) as page:
        started = await page.post(
            "/api/projects",
            json={"root": str(root)},
            headers={"Origin": _own(gateway), "Content-Type": "application/json; charset=utf-8"},
        )
        assert started.status_code == 200, started.text
        pid = started.json()["project_id"]
        # without Origin, a Referer of one of the gateway's own pages stands for it
        conversation = await page.post(
            f"/api/projects/{pid}/conversations", json={}, headers={"Referer": f"{_own(gateway)}/"}
        )
        assert conversation.status_code == 200, conversation.text
        foreign_referer = await page.post(
            f"/api/projects/{pid}/conversations", json={}, headers={"Referer": f"{EVIL}/page"}
        )
        _refused(foreign_referer, 403, "permission_denied", "Referer", EVIL)
        # the gateway is also reached as localhost: the browser's origin then says so
        port = gateway.server.port
        stopped = await page.post(
            f"/api/projects/{pid}/stop", json={}, headers={"Origin": f"http://localhost:{port}"}
        )
        assert stopped.status_code == 200, stopped.text
    assert (await _statuses(gateway))[str(root.resolve())] == "stopped"


async def test_a_bearer_post_without_origin_is_served(gateway: Gateway) -> None:
    root = gateway.project.parent / "from-script"
    root.mkdir()
    async with gateway.client() as http:
        assert "origin" not in http.headers
        started = await http.post("/api/projects", json={"root": str(root)})
        assert started.status_code == 200, started.text
        # a script may send its body as it likes: the bearer header is no browser's doing
        cross = await http.post(
            f"/api/projects/{started.json()['project_id']}/conversations",
            content=b"{}",
            headers={"Content-Type": "text/plain", "Origin": EVIL},
        )
        assert cross.status_code == 200, cross.text
    assert (await _statuses(gateway))[str(root.resolve())] == "running"


async def test_an_authorization_header_without_the_token_does_not_pass_for_a_bearer(gateway: Gateway) -> None:
    """Only a bearer header that carries the token waives the origin check, not any header."""
    root = gateway.project.parent / "not-a-bearer"
    root.mkdir()
    body = json.dumps({"root": str(root)}).encode()
    async with _browser(gateway) as page:
        for authorization in ("Bearer", "Basic " + "x" * 20, "Token " + TOKEN):
            response = await page.post(
                "/api/projects",
                content=body,
                headers={"Authorization": authorization, "Content-Type": "text/plain", "Origin": EVIL},
            )
            _refused(response, 403, "permission_denied", EVIL)
    assert str(root.resolve()) not in await _statuses(gateway)


# -- MCP over HTTP: Origin and Host -----------------------------------------------------------


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "attacker", "version": "0"},
        },
    }


async def _mcp_post(gw: Gateway, pid: str, headers: dict[str, str]) -> httpx.Response:
    async with gw.client() as http:
        return await http.post(
            f"/projects/{pid}/mcp", json=_initialize(), headers={"Accept": MCP_ACCEPT, **headers}
        )


async def test_mcp_over_http_with_a_foreign_origin_is_403(gateway: Gateway) -> None:
    pid = await _project(gateway, "mcp-origin")
    for origin in (EVIL, SAME_SITE_PAGE, "null"):
        response = await _mcp_post(gateway, pid, {"Origin": origin})
        _refused(response, 403, "permission_denied", "Origin", origin)
    async with _browser(gateway) as page:  # the cookie does not make it better
        response = await page.post(
            f"/projects/{pid}/mcp",
            json=_initialize(),
            headers={"Accept": MCP_ACCEPT, "Origin": EVIL},
        )
        _refused(response, 403, "permission_denied", EVIL)
    assert pid not in gateway.server.app.state.mcp.projects  # no session was ever opened


async def test_mcp_over_http_with_a_rebinding_host_is_403(gateway: Gateway) -> None:
    pid = await _project(gateway, "mcp-host")
    port = gateway.server.port
    # a page of evil.example whose name now resolves to 127.0.0.1: its requests name its own host
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        response = await _mcp_post(gateway, pid, {"Host": host})
        _refused(response, 403, "permission_denied", "Host", host)
        response = await _mcp_post(gateway, pid, {"Host": host, "Origin": f"http://{host}"})
        _refused(response, 403, "permission_denied", "Host")
    async with gateway.client() as http:  # the session's stream and its end are checked too
        for method in ("GET", "DELETE"):
            response = await http.request(
                method, f"/projects/{pid}/mcp", headers={"Host": f"evil.example:{port}", "Accept": MCP_ACCEPT}
            )
            _refused(response, 403, "permission_denied", "Host")
    assert pid not in gateway.server.app.state.mcp.projects


async def test_mcp_over_http_from_the_gateways_own_origin_works(gateway: Gateway) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    pid = await _start(gateway, gateway.project)  # its settings allow Read
    url = f"{gateway.url}/projects/{pid}/mcp"
    for origin in (_own(gateway), f"http://localhost:{gateway.server.port}"):
        headers = {"Authorization": f"Bearer {TOKEN}", "Origin": origin}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=PATIENCE_S) as authed,
            Client(streamable_http_client(url, http_client=authed)) as client,
        ):
            result = await client.call_tool("read_file", {"path": "README.md"})
            assert result.is_error is False
            assert "hello" in " ".join(getattr(c, "text", "") for c in result.content)
    # without an Origin (a script, not a browser) and with the Host of the address: served too
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=PATIENCE_S) as authed,
        Client(streamable_http_client(url, http_client=authed)) as client,
    ):
        assert "read_file" in {tool.name for tool in (await client.list_tools()).tools}
    assert pid in gateway.server.app.state.mcp.projects
