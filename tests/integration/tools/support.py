"""Helpers of the tool-runner integration tests (imported by conftest and the tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.engine import StartProject
from jidocode.shared.events.tools import RunTool, ToolCallMeta

RunnerFactory = Callable[..., Awaitable[ToolRunner]]


def write_settings(root: Path, settings: dict[str, Any]) -> None:
    d = root / ".jido"
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps(settings))


async def start_project(bus: Bus, root: Path, settings: dict[str, Any] | None = None) -> str:
    if settings is not None:
        write_settings(root, settings)
    info = await bus.request(subjects.engine("start_project"), StartProject(root_path=str(root)), timeout=10)
    return str(info["project_id"])


async def run_tool(
    bus: Bus,
    project_id: str,
    name: str,
    args: dict[str, Any],
    *,
    request_id: str,
    conversation_id: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    call = RunTool(
        name=name, args=args, meta=ToolCallMeta(request_id=request_id, conversation_id=conversation_id)
    )
    result = await bus.request(
        subjects.tools(project_id, "run"), call, timeout=timeout, project_id=project_id
    )
    assert isinstance(result, dict)
    return result


class Signals:
    """Collects ``jido.sig.tool.*`` envelopes; wait for one matching a predicate."""

    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self._changed = asyncio.Event()

    async def on(self, env: Envelope) -> None:
        if not env.type.startswith("tool."):
            return
        self.seen.append(env)
        self._changed.set()

    async def wait(self, pred: Callable[[Envelope], bool], timeout: float = 10.0) -> Envelope:
        async def loop() -> Envelope:
            while True:
                for env in self.seen:
                    if pred(env):
                        return env
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(loop(), timeout)
