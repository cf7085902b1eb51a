"""Helpers of the tool-runner integration tests (imported by conftest and the tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import ToolCallMeta, ToolResult, ToolResultError

RunnerFactory = Callable[..., Awaitable[ToolRunner]]


def write_settings(root: Path, settings: dict[str, Any]) -> None:
    d = root / ".jido"
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps(settings))


async def start_project(bus: Bus, root: Path, settings: dict[str, Any] | None = None) -> str:
    if settings is not None:
        write_settings(root, settings)
    info = await EngineClient(bus).start_project(str(root), timeout=10)
    return info.project_id


async def run_tool(
    bus: Bus,
    project_id: str,
    name: str,
    args: dict[str, Any],
    *,
    request_id: str,
    conversation_id: str | None = None,
    timeout: float = 30.0,
) -> ToolResult:
    meta = ToolCallMeta(request_id=request_id, conversation_id=conversation_id)
    return await ToolsClient(bus, project_id).run(name, args, meta=meta, timeout=timeout)


def failure(result: ToolResult) -> ToolResultError:
    """The error of a failed result (and a test failure when the call succeeded)."""
    assert not result.ok and result.error is not None, result
    return result.error


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
