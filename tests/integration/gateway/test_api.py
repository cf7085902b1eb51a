"""The gateway's HTTP API and SSE against the running system (issue 16 item 2).

A real HTTP client (httpx) talks to uvicorn on a random loopback port; the
services run in this process on a real nats-server, the model is the scripted
OpenAI-compatible server that real litellm calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import nats.js.errors
import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.services.gateway.streams import CONSUMER_PREFIX
from jidocode.shared import subjects
from tests.integration.gateway.conftest import PATIENCE_S, TOKEN, Gateway, until
from tests.sse_reader import SseMessage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ANSWER = "conversation.assistant.message"


async def _project(gw: Gateway, http: httpx.AsyncClient) -> str:
    response = await http.post("/api/projects", json={"root": str(gw.project)})
    assert response.status_code == 200, response.text
    return str(response.json()["project_id"])


async def _conversation(http: httpx.AsyncClient, pid: str, cid: str | None = None) -> str:
    body: dict[str, Any] = {"conversation_id": cid} if cid else {}
    response = await http.post(f"/api/projects/{pid}/conversations", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["conversation_id"])


def _answer_to(correlation_id: str) -> Any:
    def done(message: SseMessage) -> bool:
        return message.event == ANSWER and message.json().get("correlationid") == correlation_id

    return done


async def test_a_turn_streams_over_sse_and_resumes_from_last_event_id(gateway: Gateway) -> None:
    gateway.llm.script(Reply.tools(call("read_file", path="README.md")), Reply.answer("It says hello."))
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        consumers_before = await _consumers(gateway)
        listed = (await http.get("/api/projects")).json()
        assert pid in [p["project_id"] for p in listed["projects"]]
        cid = await _conversation(http, pid)
        sent = await http.post(f"/api/projects/{pid}/conversations/{cid}/messages", json={"text": "Read it"})
        assert sent.status_code == 202, sent.text
        accepted = sent.json()
        path = f"/api/projects/{pid}/conversations/{cid}/events"
        events = await gateway.collect(http, path, _answer_to(accepted["correlation_id"]))

        ids = [m.id for m in events]
        assert all(ids) and len(set(ids)) == len(ids)
        types = [m.event for m in events]
        assert types[0] == "conversation.user.message" and events[0].id == accepted["id"]
        assert "conversation.tool.completed" in types and types[-1] == ANSWER
        assert events[-1].json()["data"]["text"] == "It says hello."
        for message in events:  # structured mode: the SSE id and event are the CloudEvent's
            event = message.json()
            assert (event["id"], event["type"], event["specversion"]) == (message.id, message.event, "1.0")

        # resume from the middle: exactly the rest, nothing lost or repeated
        middle = len(events) // 2
        rest = await gateway.collect(
            http, path, _answer_to(accepted["correlation_id"]), headers={"Last-Event-ID": str(ids[middle])}
        )
        assert [m.id for m in rest] == ids[middle + 1 :]
        same = await gateway.collect(
            http, f"{path}?after={ids[middle]}", _answer_to(accepted["correlation_id"])
        )
        assert [m.id for m in same] == ids[middle + 1 :]

        # then live: a second turn reaches a viewer resumed at the end of the first
        gateway.llm.script(Reply.answer("Still here."))
        opened = asyncio.Event()
        holder: dict[str, str] = {}

        def second_answer(message: SseMessage) -> bool:
            return message.event == ANSWER and message.json().get("correlationid") == holder.get("cid")

        viewer = asyncio.create_task(
            gateway.collect(http, path, second_answer, headers={"Last-Event-ID": str(ids[-1])}, opened=opened)
        )
        await asyncio.wait_for(opened.wait(), 60)
        again = await http.post(
            f"/api/projects/{pid}/conversations/{cid}/messages", json={"text": "And now?"}
        )
        holder["cid"] = again.json()["correlation_id"]
        live = await viewer
        # resumed at the first turn's answer: that turn's end (decision 0317), then the second turn
        assert live[0].event == "conversation.turn.ended"
        assert live[0].json()["correlationid"] == accepted["correlation_id"]
        assert live[1].id == again.json()["id"] and live[-1].json()["data"]["text"] == "Still here."

        missing = await http.get(path, headers={"Last-Event-ID": "01NOTANEVENTID0000000000000"})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"

        # projections and usage
        timeline = await http.get(f"/api/projects/{pid}/conversations/{cid}/projections/timeline")
        assert timeline.status_code == 200 and timeline.json()["name"] == "timeline"
        assert isinstance(timeline.json()["value"], list) and timeline.json()["value"]
        usage = (await http.get(f"/api/projects/{pid}/conversations/{cid}/usage")).json()
        assert usage["calls"] == 3 and usage["conversation_id"] == cid and usage["total_tokens"] > 0
        conversations = (await http.get(f"/api/projects/{pid}/conversations")).json()
        assert cid in [c["conversation_id"] for c in conversations["conversations"]]
        tools = (await http.get(f"/api/projects/{pid}/tools")).json()
        assert "read_file" in [t["name"] for t in tools["tools"]]
        assets = await http.get(f"/api/projects/{pid}/assets", params={"kind": "skill"})
        assert assets.status_code == 200 and isinstance(assets.json()["items"], list)

    # every viewer has left: its stream ended and its consumer is gone from the server
    await until(lambda: gateway.server.ctx.streams.open == 0)
    assert await _consumers(gateway) == consumers_before == 0


async def _consumers(gateway: Gateway) -> int:
    """The gateway's SSE consumers on the conversations' output stream."""
    try:
        infos = await gateway.bus.js.consumers_info(subjects.STREAM_EVENTS)
    except nats.js.errors.NotFoundError:  # no conversation has run yet
        return 0
    return sum(1 for info in infos if (info.name or "").startswith(CONSUMER_PREFIX))


async def test_an_approval_is_answered_over_http(gateway: Gateway) -> None:
    gateway.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")), Reply.answer("Written.")
    )
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        cid = await _conversation(http, pid)
        sent = (
            await http.post(f"/api/projects/{pid}/conversations/{cid}/messages", json={"text": "Write"})
        ).json()
        path = f"/api/projects/{pid}/conversations/{cid}/events"
        asked = await gateway.collect(http, path, lambda m: m.event == "conversation.approval.requested")
        request = asked[-1].json()["data"]
        assert request["tool"] == "write_file"
        answer = await http.post(
            f"/api/projects/{pid}/conversations/{cid}/approvals/{request['request_id']}",
            json={"decision": "allow"},
        )
        assert answer.status_code == 202, answer.text
        done = await gateway.collect(
            http, path, _answer_to(sent["correlation_id"]), headers={"Last-Event-ID": str(asked[-1].id)}
        )
        assert done[-1].json()["data"]["text"] == "Written."
        assert (gateway.project / "ask" / "x.txt").read_text() == "after\n"


async def test_the_bus_stream_is_filtered(gateway: Gateway) -> None:
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        watched, other = await _conversation(http, pid), await _conversation(http, pid)
        opened = asyncio.Event()
        viewer = asyncio.create_task(
            gateway.collect(
                http,
                f"/api/events?conversation={watched}&type=conversation.assistant.*&type=conversation.user.message",
                lambda m: m.event == ANSWER,
                opened=opened,
            )
        )
        await asyncio.wait_for(opened.wait(), 60)
        gateway.llm.script(Reply.answer("other"), Reply.answer("watched"))
        await http.post(f"/api/projects/{pid}/conversations/{other}/messages", json={"text": "a"})
        await http.post(f"/api/projects/{pid}/conversations/{watched}/messages", json={"text": "b"})
        seen = await viewer
        assert {m.json()["conversationid"] for m in seen} == {watched}
        assert {m.event for m in seen} <= {
            "conversation.user.message",
            "conversation.assistant.delta",
            ANSWER,
        }
        assert seen[0].event == "conversation.user.message" and seen[0].json()["data"]["text"] == "b"
        assert len({m.id for m in seen}) == len(seen)  # once each, though it travels on several subjects

        bad = await http.get("/api/events", params={"type": "conv*ersation"})
        assert bad.status_code == 400 and "type filter" in bad.json()["error"]["message"]


async def test_bad_requests_get_clear_errors(gateway: Gateway) -> None:
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        cid = await _conversation(http, pid)
        base = f"/api/projects/{pid}/conversations/{cid}"
        not_json = await http.post(
            f"{base}/messages", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]
        empty = await http.post(f"{base}/messages", json={"text": ""})
        assert empty.status_code == 422 and empty.json()["error"]["details"]["errors"][0]["field"] == "text"
        extra = await http.post(f"{base}/messages", json={"text": "x", "role": "system"})
        assert extra.status_code == 422 and "role" in extra.json()["error"]["message"]
        decision = await http.post(f"{base}/approvals/r1", json={"decision": "maybe"})
        assert decision.status_code == 422 and "decision" in decision.json()["error"]["message"]
        kind = await http.get(f"/api/projects/{pid}/assets", params={"kind": "nonsense"})
        assert kind.status_code == 400 and "skill" in kind.json()["error"]["message"]
        limit = await http.get(f"/api/projects/{pid}/conversations", params={"limit": "0"})
        assert limit.status_code == 400 and "limit" in limit.json()["error"]["message"]
        bad_id = await http.get("/api/projects/a.b/tools")
        assert bad_id.status_code == 400 and bad_id.json()["error"]["type"] == "invalid_input"
        unknown = await http.post("/api/projects", json={"root": str(gateway.project / "missing")})
        assert unknown.status_code in (400, 404) and unknown.json()["error"]["message"]
        limit_bytes = gateway.server.ctx.settings.max_body_bytes
        big = await http.post(f"{base}/messages", json={"text": "x" * (limit_bytes + 1)})
        assert big.status_code == 413 and str(limit_bytes) in big.json()["error"]["message"]

        async def chunks() -> Any:  # no Content-Length: the limit holds on the bytes read
            for _ in range(limit_bytes // 65536 + 2):
                yield b"x" * 65536

        streamed = await http.post(f"{base}/messages", content=chunks())
        assert streamed.status_code == 413 and streamed.json()["error"]["type"] == "payload_too_large"


async def test_openapi_names_every_operation(gateway: Gateway) -> None:
    async with gateway.client() as http:
        doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path, method in [
        ("/api/projects", "get"),
        ("/api/projects", "post"),
        ("/api/projects/{pid}/stop", "post"),
        ("/api/projects/{pid}/conversations/{cid}/messages", "post"),
        ("/api/projects/{pid}/conversations/{cid}/approvals/{request_id}", "post"),
        ("/api/projects/{pid}/conversations/{cid}/events", "get"),
        ("/api/events", "get"),
    ]:
        assert method in paths[path], (path, method)
    body = paths["/api/projects/{pid}/conversations/{cid}/messages"]["post"]["requestBody"]
    schema_name = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert doc["components"]["schemas"][schema_name]["required"] == ["text"]


async def test_a_project_is_an_mcp_server_behind_the_token(gateway: Gateway) -> None:
    """``/projects/<p>/mcp``: the project's MCP server (docs/mcp.md) over streamable HTTP, with the
    official SDK's client, only with the gateway's token; every call is a tool-runner call."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with gateway.client() as http:
        pid = await _project(gateway, http)
    url = f"{gateway.url}/projects/{pid}/mcp"

    async with httpx.AsyncClient(timeout=PATIENCE_S) as anonymous:
        refused = await anonymous.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=PATIENCE_S) as authed,
        Client(streamable_http_client(url, http_client=authed)) as client,
    ):
        listed = await client.list_tools()
        names = {tool.name for tool in listed.tools}
        assert {"read_file", "chat", "cancel"} <= names
        result = await client.call_tool("read_file", {"path": "README.md"})
        assert result.is_error is False
        assert "hello" in " ".join(getattr(c, "text", "") for c in result.content).lower()
    assert gateway.server.app.state.mcp.projects == [pid]


async def test_the_console_s_rewind_goes_back_before_a_message(gateway: Gateway) -> None:
    """``POST …/rewind`` (the console's button per user message, docs/rewind.md)."""
    gateway.llm.script(Reply.answer("first back"), Reply.answer("second back"))
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        cid = await _conversation(http, pid)
        base = f"/api/projects/{pid}/conversations/{cid}"
        sent = []
        for text in ("first", "second"):
            accepted = (await http.post(f"{base}/messages", json={"text": text})).json()
            await gateway.collect(http, f"{base}/events", _answer_to(accepted["correlation_id"]))
            sent.append(accepted["id"])

        unknown = await http.post(f"{base}/rewind", json={"message_id": "no-such-message"})
        assert unknown.status_code == 404 and "not a user message" in unknown.json()["error"]["message"]
        rewound = await http.post(f"{base}/rewind", json={"message_id": sent[1]})
        assert rewound.status_code == 200, rewound.text
        assert (rewound.json()["message_id"], rewound.json()["dropped"]) == (sent[1], 2)
        context = (await http.get(f"{base}/projections/llm_context")).json()["value"]
        assert context == [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "first back"},
        ]


async def test_a_question_id_of_several_segments_is_answered_over_http(gateway: Gateway) -> None:
    """The egress proxy asks as ``<request id>/net/<host>:<port>``: the console's route takes it whole."""
    async with gateway.client() as http:
        pid = await _project(gateway, http)
        cid = await _conversation(http, pid)
        answer = await http.post(
            f"/api/projects/{pid}/conversations/{cid}/approvals/r1/net/pypi.org:443",
            json={"decision": "deny"},
        )
        assert answer.status_code == 202, answer.text
        path = f"/api/projects/{pid}/conversations/{cid}/events"
        seen = await gateway.collect(http, path, lambda m: m.event == "conversation.approval.response")
        assert seen[-1].json()["data"]["request_id"] == "r1/net/pypi.org:443"
