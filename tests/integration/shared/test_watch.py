"""`jidocode watch` tails the real bus."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.engine import ProjectStarted, ProjectStopped


async def test_watch_prints_matching_events_as_json_lines(bus: Bus, nats_server: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "watch",
        "--json",
        "--type",
        "project.stopped",
        "--limit",
        "1",
        env={**os.environ, "NATS_URL": nats_server},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    async def publish_until_seen() -> bytes:
        assert proc.stdout is not None
        reader = asyncio.create_task(proc.stdout.readline())
        while not reader.done():
            await bus.publish(
                subjects.signal("project.started"), ProjectStarted(project_id="P1", root_path="/r")
            )
            await bus.publish(
                subjects.signal("project.stopped"),
                ProjectStopped(project_id="P1", root_path="/r"),
                project_id="P1",
            )
            await asyncio.wait([reader], timeout=0.2)  # the watcher may still be subscribing
        return reader.result()

    line = await asyncio.wait_for(publish_until_seen(), 60)
    event = json.loads(line)
    assert event["type"] == "project.stopped" and event["projectid"] == "P1"
    assert event["subject"] == subjects.signal("project.stopped")
    assert await asyncio.wait_for(proc.wait(), 30) == 0
