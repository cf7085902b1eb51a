"""One cost, titles and full ids, markdown for the console (issue 25 point 6), through the running
system: the gateway on a loopback port, every service, the scripted model behind real litellm
(``openai/scripted``: a model litellm has no price for), and the real CLI in a process of its own.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply
from tests.integration.gateway.conftest import PATIENCE_S, Gateway
from tests.sse_reader import SseMessage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ANSWER = "conversation.assistant.message"
#: Longer than a terminal of 80 columns: the CLI must print it whole.
LONG_ID = "a-conversation-whose-id-is-longer-than-a-terminal-of-eighty-columns-is-listed-whole-0123"
FIRST = "Please fix the failing test\n   in tests/unit and tell me why it broke"
TITLE = "Please fix the failing test in tests/unit and tell me why it broke"
ATTACK = (
    "# Result\n\n**done** with `code`\n\n"
    "[site](https://example.com) [evil](javascript:alert(1)) <script>alert(2)</script>"
    '<img src=x onerror="alert(3)">'
)


async def _project(http: httpx.AsyncClient, gw: Gateway) -> str:
    response = await http.post("/api/projects", json={"root": str(gw.project)})
    assert response.status_code == 200, response.text
    return str(response.json()["project_id"])


async def _turn(gw: Gateway, http: httpx.AsyncClient, pid: str, cid: str, text: str) -> list[SseMessage]:
    """Send ``text`` and read the conversation's stream up to its answer."""
    sent = await http.post(f"/api/projects/{pid}/conversations/{cid}/messages", json={"text": text})
    assert sent.status_code == 202, sent.text
    correlation = sent.json()["correlation_id"]

    def answered(message: SseMessage) -> bool:
        return message.event == ANSWER and message.json().get("correlationid") == correlation

    return await gw.collect(http, f"/api/projects/{pid}/conversations/{cid}/events", answered)


async def _cli(gw: Gateway, *args: str) -> str:
    """``jidocode …`` in a process of its own, 80 columns wide, against this system's NATS."""
    env = {
        **os.environ,
        "NATS_URL": gw.config.nats_url,
        "JIDO_CODE_HOME": str(gw.config.jido_home),
        "COLUMNS": "80",
    }
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "jidocode"),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), PATIENCE_S)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def conversation(gateway: Gateway) -> dict[str, Any]:
    """A conversation with a long id and two turns of a model without a price."""
    gateway.llm.script(Reply.answer("First answer."), Reply.answer("Second answer."))
    async with gateway.client() as http:
        pid = await _project(http, gateway)
        started = await http.post(f"/api/projects/{pid}/conversations", json={"conversation_id": LONG_ID})
        assert started.status_code == 200, started.text
        await _turn(gateway, http, pid, LONG_ID, FIRST)
        await _turn(gateway, http, pid, LONG_ID, "And a second message, which is not the title")
    return {"pid": pid, "cid": LONG_ID}


async def test_unpriced_calls_make_the_api_cost_unknown(
    gateway: Gateway, conversation: dict[str, Any]
) -> None:
    async with gateway.client() as http:
        usage = await http.get(f"/api/projects/{conversation['pid']}/conversations/{LONG_ID}/usage")
    assert usage.status_code == 200, usage.text
    body = usage.json()
    assert body["calls"] == 2
    assert body["unpriced_calls"] == 2
    assert body["cost_usd"] is None
    assert body["priced_cost_usd"] == 0.0
    assert body["cost"] == "unknown (2 calls unpriced)"


async def test_the_first_message_is_the_title_in_the_api_and_the_console(
    gateway: Gateway, conversation: dict[str, Any]
) -> None:
    async with gateway.client() as http:
        listed = (await http.get(f"/api/projects/{conversation['pid']}/conversations")).json()
        page = await http.get(f"/console/projects/{conversation['pid']}")
    found = {c["conversation_id"]: c for c in listed["conversations"]}
    assert found[LONG_ID]["title"] == TITLE
    assert page.status_code == 200
    assert f">{LONG_ID}</a>" in page.text
    assert f'<td class="title">{TITLE}</td>' in page.text


async def test_the_cli_lists_whole_ids_with_titles_and_an_unknown_cost(
    gateway: Gateway, conversation: dict[str, Any]
) -> None:
    listed = await _cli(gateway, "conversations", "list", str(gateway.project))
    lines = listed.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(LONG_ID))
    assert lines[head + 1].strip() == TITLE
    shown = await _cli(gateway, "conversations", "show", str(gateway.project), LONG_ID)
    assert "cost:          unknown (2 calls unpriced)" in shown
    assert f"title:         {TITLE}" in shown
    assert f"conversation:  {LONG_ID}\n" in shown
    usage = await _cli(gateway, "chat", str(gateway.project), "--conversation", LONG_ID, "/usage")
    assert "· unknown (2 calls unpriced)" in usage and "$0" not in usage


async def test_an_assistant_message_comes_with_an_inert_markdown_tree(gateway: Gateway) -> None:
    gateway.llm.script(Reply.answer(ATTACK))
    async with gateway.client() as http:
        pid = await _project(http, gateway)
        started = await http.post(f"/api/projects/{pid}/conversations", json={})
        cid = started.json()["conversation_id"]
        events = await _turn(gateway, http, pid, cid, "Answer with markdown")
    answer = events[-1].json()
    assert answer["data"]["text"] == ATTACK  # the event itself is as the model sent it
    tree = answer["jidomarkdown"]
    assert tree[0] == ["h1", {}, ["Result"]]
    assert ["strong", {}, ["done"]] in tree[1][2] and ["code", {}, ["code"]] in tree[1][2]
    links = tree[2][2]
    assert ["a", {"href": "https://example.com"}, ["site"]] in links
    flat = repr(tree)
    assert "javascript" not in repr([n for n in links if isinstance(n, list)])
    assert "<script>alert(2)</script>" in flat and 'onerror="alert(3)"' in flat  # as text
    assert all(n[0] != "img" and n[0] != "script" for n in links if isinstance(n, list))
    others = [m.json() for m in events if m.event != ANSWER]
    assert all("jidomarkdown" not in event for event in others)
