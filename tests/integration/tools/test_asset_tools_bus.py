"""Asset-derived tools: listed by the catalog, authorized by name, forwarded to the asset loader."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient
from jidocode.shared.config import Config
from tests.helpers import wait_for_services
from tests.integration.tools.support import failure, run_tool, start_project

COMMAND = """---
description: Say hello
arguments: [who]
---
Hello {{who}}, welcome.
"""


@pytest.fixture
async def system(config: Config) -> AsyncIterator[Config]:
    names = ("engine", "project", "asset_loader", "tool_runner")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, names))
    try:
        await wait_for_services(config, names, timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_asset_tool_listed_authorized_and_forwarded(system: Config, bus: Bus, tmp_path: Path) -> None:
    (tmp_path / ".jido" / "commands").mkdir(parents=True)
    (tmp_path / ".jido" / "commands" / "hello.md").write_text(COMMAND)
    pid = await start_project(
        bus, tmp_path, {"permissions": {"allow": ["run_command"], "deny": ["invoke_skill"]}}
    )

    names = {s.name for s in (await ProjectClient(bus, pid).list_tools()).tools}
    assert "run_command" in names and "invoke_skill" not in names and "bash" not in names

    result = await run_tool(
        bus, pid, "run_command", {"name": "hello", "arguments": {"who": "Ada"}}, request_id="c1"
    )
    assert result.ok, result
    assert "Hello Ada" in str(result.data)

    denied = await run_tool(bus, pid, "invoke_skill", {"skill": "x", "route": "y"}, request_id="d1")
    assert failure(denied).type == "permission_denied"
    unlisted = await run_tool(bus, pid, "not_an_asset_tool", {}, request_id="d2")
    assert failure(unlisted).type == "not_found"
