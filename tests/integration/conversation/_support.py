"""Doubles and helpers for the conversation service tests (real NATS, no mocks of it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jidocode.services.conversation.ports import (
    LlmRequest,
    LlmResult,
    LlmTokenUsage,
    LlmToolCall,
    LlmToolSpec,
)
from jidocode.services.conversation.runtime import Runtime
from jidocode.services.conversation.service import serve
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.services.conversation.subagents.core import SubagentSettings
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import AssistantDelta
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta, ToolCatalog, ToolResult
from jidocode.shared.trust import trust_project

P = "proj1"


class ScriptLlm:
    """An LlmPort double answering from a script; a step may be an ``asyncio.Event`` to wait on first."""

    def __init__(self, *steps: LlmResult | JidoError | asyncio.Event) -> None:
        self.steps: list[LlmResult | JidoError | asyncio.Event] = list(steps)
        self.requests: list[LlmRequest] = []
        self.called = asyncio.Queue[LlmRequest]()

    def add(self, *steps: LlmResult | JidoError | asyncio.Event) -> None:
        self.steps.extend(steps)

    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        self.requests.append(request)
        await self.called.put(request)
        while self.steps and isinstance(self.steps[0], asyncio.Event):
            gate = self.steps.pop(0)
            assert isinstance(gate, asyncio.Event)
            await gate.wait()
        if not self.steps:
            raise JidoError("script exhausted", error_type="llm_error")
        step = self.steps.pop(0)
        if isinstance(step, JidoError):
            raise step
        assert isinstance(step, LlmResult)
        for i in range(0, len(step.content), 4):
            await on_delta(step.content[i : i + 4])
        return step


def answer(text: str) -> LlmResult:
    return LlmResult(content=text, usage=LlmTokenUsage(prompt_tokens=10, completion_tokens=3, cost_usd=0.001))


def tool_calls(*names: str, text: str = "") -> LlmResult:
    return LlmResult(
        content=text,
        tool_calls=[LlmToolCall(id=f"call_{i}", name=n, arguments={"n": i}) for i, n in enumerate(names)],
        usage=LlmTokenUsage(prompt_tokens=5, completion_tokens=2),
    )


class ToolsDouble:
    """A ToolPort double: records calls; results come from ``respond`` (default ok) after an optional gate."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any], ToolCallMeta]] = []
        self.cancels: list[str] = []
        self.started = asyncio.Queue[str]()
        self.cancelled = asyncio.Queue[str]()
        self.gate: asyncio.Event | None = None

    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        self.runs.append((name, args, meta))
        await self.started.put(meta.request_id)
        if self.gate is not None:
            await self.gate.wait()
        return ToolResult(ok=True, data=f"{name} says {json.dumps(args, sort_keys=True)}")

    async def cancel(self, project_id: str, request_id: str, conversation_id: str | None = None) -> None:
        self.cancels.append(request_id)
        await self.cancelled.put(request_id)


async def register_project(config: Config, project_id: str = P, root: Path | None = None) -> Path:
    """Put ``project_id`` in the project registry as the engine would (the conversation
    service's ``start`` looks the project up there); returns its root.

    The default root lies beside the test's JidoCode home (a root may not contain it, decision
    0303), is the test's own, and is trusted as the test's ``tmp_path`` is."""
    if root is None:
        root = config.jido_home.with_name(f"{config.jido_home.name}-root-{project_id}")
        root.mkdir(parents=True, exist_ok=True)
        trust_project(root, home=config.jido_home)
    root.mkdir(parents=True, exist_ok=True)
    info = ProjectInfo(project_id=project_id, root_path=str(root), started_at="2026-01-01T00:00:00Z")
    bus = await Bus.connect(config, "engine")
    try:
        registry = await bus.kv(subjects.BUCKET_PROJECTS, history=1)
        await registry.put(project_id, info.model_dump_json().encode())
    finally:
        await bus.close()
    return root


def conversations(bus: Bus, project_id: str = P) -> ConversationsClient:
    return ConversationsClient(bus, project_id, timeout=10)


@asynccontextmanager
async def running_service(
    config: Config,
    llm: Any,
    tools: Any,
    settings: RuntimeSettings | None = None,
    *,
    instance: str | None = None,
) -> AsyncIterator[Runtime]:
    """The conversation service in this process, with project ``P`` registered; yields its runtime.

    ``instance`` tells replicas in one process apart (in their bus source). Sub-agents (the
    ``task`` tool) are off unless ``settings`` sets ``subagents``: these tests count the tools
    the model is offered (``test_subagents.py`` runs them on the whole system)."""
    await register_project(config)
    settings = settings or RuntimeSettings(lease_ttl_s=5.0, list_tools_patience_s=0.0)
    if "subagents" not in settings.model_fields_set:
        settings = settings.model_copy(update={"subagents": SubagentSettings(enabled=False)})
    stop = asyncio.Event()
    started = asyncio.Event()
    runtimes: list[Runtime] = []
    task = asyncio.create_task(
        serve(
            config.model_copy(update={"instance": instance}) if instance else config,
            stop,
            llm=llm,
            tools=tools,
            settings=settings,
            started=started,
            on_runtime=runtimes.append,
        )
    )
    done, _ = await asyncio.wait(
        {task, asyncio.ensure_future(started.wait())}, timeout=20, return_when="FIRST_COMPLETED"
    )
    if task in done:
        task.result()
    try:
        yield runtimes[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


class Outputs:
    """Collects a conversation's output events (live) and waits for them by type."""

    def __init__(self) -> None:
        self.events: list[Envelope] = []
        self._changed = asyncio.Condition()

    async def handler(self, env: Envelope) -> None:
        async with self._changed:
            self.events.append(env)
            self._changed.notify_all()

    async def wait_for(
        self, predicate: Callable[[Envelope], bool], count: int = 1, timeout: float = 15.0
    ) -> list[Envelope]:
        async def _wait() -> list[Envelope]:
            async with self._changed:
                await self._changed.wait_for(lambda: len([e for e in self.events if predicate(e)]) >= count)
                return [e for e in self.events if predicate(e)]

        return await asyncio.wait_for(_wait(), timeout)

    async def wait_type(self, type_: str, count: int = 1, timeout: float = 15.0) -> list[Envelope]:
        return await self.wait_for(lambda e: e.type == type_, count, timeout)

    def types(self) -> list[str]:
        return [e.type for e in self.events if e.type != AssistantDelta.TYPE]


async def follow(bus: Bus, conversation_id: str, project_id: str = P) -> Outputs:
    out = Outputs()
    await bus.subscribe(subjects.conversation_out_filter(project_id, conversation_id), out.handler)
    await bus.nc.flush()
    return out


def normalized(value: Any, *ids: str) -> Any:
    """A projection with the given ids replaced and times dropped, to compare two conversations."""
    text = json.dumps(value, sort_keys=True)
    for i, cid in enumerate(ids):
        text = text.replace(cid, f"<id{i}>")
    return _drop_times(json.loads(text))


def _drop_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_times(v) for k, v in value.items() if k != "time"}
    if isinstance(value, list):
        return [_drop_times(v) for v in value]
    return value


async def answer_list_tools(bus: Bus, specs: list[LlmToolSpec], project_id: str = P) -> Any:
    """Answer the project's ``list_tools`` like the project service would."""

    async def _cb(msg: Any) -> None:
        catalog = ToolCatalog.model_validate({"tools": [s.model_dump() for s in specs]})
        await msg.respond(encode(Envelope.new(catalog, source="test/project"))[0])

    sub = await bus.nc.subscribe(subjects.project(project_id, "list_tools"), cb=_cb)
    await bus.nc.flush()
    return sub
