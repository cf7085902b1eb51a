"""The console's bus page shows the egress proxy's decisions (issue 29, point 2): a ``web_fetch``
call's ``tool.network`` event reaches the page's feed (``/api/events``, what ``bus.js`` reads)
with its host and outcome, and the page listens for that type.

Every service on a real nats-server (the gateway fixture's system); the call goes to the real
tool runner, whose proxy refuses the allowed name ``localhost`` once it resolves to loopback.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path

import pytest

from tests.integration.gateway.conftest import PATIENCE_S, Gateway
from tests.integration.tools.support import run_tool
from tests.sse_reader import SseMessage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def _project(root: Path) -> Path:
    """A project (trusted: beside the fixture's) whose rules allow fetching from ``localhost``."""
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Read", "WebFetch(domain:localhost)"]}})
    )
    return root


async def test_a_web_fetchs_network_event_reaches_the_consoles_bus_feed(gateway: Gateway) -> None:
    root = _project(gateway.project.parent / "fetching")
    async with gateway.client() as http:
        page = await http.get("/console/bus")
        assert page.status_code == 200, page.text
        listened = re.search(r'data-event-types="([^"]*)"', page.text)
        assert listened is not None and "tool.network" in json.loads(html.unescape(listened.group(1)))

        pid = (await http.post("/api/projects", json={"root": str(root)})).json()["project_id"]

        def network(message: SseMessage) -> bool:
            return message.event == "tool.network" and message.json()["data"]["request_id"] == "net-1"

        opened = asyncio.Event()
        feed = asyncio.create_task(
            gateway.collect(http, f"/api/events?project={pid}&type=tool.network", network, opened=opened)
        )
        await asyncio.wait_for(opened.wait(), PATIENCE_S)
        result = await run_tool(
            gateway.bus, pid, "web_fetch", {"url": "http://localhost:9/page"}, request_id="net-1", timeout=60
        )
        assert not result.ok and result.error is not None and "localhost" in result.error.message
        event = (await feed)[-1].json()
    assert event["type"] == "tool.network" and event["projectid"] == pid
    data = event["data"]
    assert (data["host"], data["port"], data["outcome"]) == ("localhost", 9, "denied")
    assert "loopback" in data["reason"], data
