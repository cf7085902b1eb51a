"""The KV ledger, bus signals and budgets on a real nats-server, with real litellm."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.services.conversation.llm import LitellmPort, make_llm_port
from jidocode.services.conversation.llm.ledger import KvLedger
from jidocode.services.conversation.ports import LlmRequest
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events.llm import LlmCallCompleted
from jidocode.shared.ledger import LedgerReader


def _request(settings: dict[str, Any], conversation_id: str = "c1") -> LlmRequest:
    return LlmRequest(
        project_id="p1",
        conversation_id=conversation_id,
        correlation_id="corr",
        messages=[{"role": "user", "content": "hi"}],
        settings=settings,
    )


async def _nothing(_: str) -> None:
    return None


async def test_usage_is_published_and_summed_per_conversation_and_project(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    seen: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_signal(env: Envelope) -> None:
        await seen.put(env)

    await bus.subscribe(subjects.signal("llm.completed"), on_signal)
    port = make_llm_port(config, bus=bus)
    scripted_llm.script(
        Reply.answer("a", prompt_tokens=10, completion_tokens=1),
        Reply.answer("b", prompt_tokens=20, completion_tokens=2),
        Reply.answer("c", prompt_tokens=40, completion_tokens=4),
    )
    await port.complete(_request(scripted_llm_settings, "c1"), _nothing)
    await port.complete(_request(scripted_llm_settings, "c1"), _nothing)
    await port.complete(_request(scripted_llm_settings, "c2"), _nothing)
    envs = [await asyncio.wait_for(seen.get(), 10) for _ in range(3)]
    assert isinstance(port, LitellmPort)
    await port.flush()
    assert [e.conversation_id for e in envs] == ["c1", "c1", "c2"]
    assert all(e.project_id == "p1" and e.correlation_id == "corr" for e in envs)
    first = envs[0].event()
    assert isinstance(first, LlmCallCompleted) and first.total_tokens == 11

    ledger = KvLedger(bus)
    c1 = await ledger.conversation("p1", "c1")
    assert (c1.calls, c1.total_tokens, c1.context_tokens) == (2, 33, 22)
    project = await ledger.project("p1")
    assert (project.calls, project.total_tokens) == (3, 77)
    assert (await ledger.project("nobody")).calls == 0
    # what the client reads: the shared reader sees the same totals
    reader = LedgerReader(bus)
    assert await reader.conversation("p1", "c1") == c1
    assert await reader.project("p1") == project


async def test_budget_stops_the_conversation_with_an_event(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    exceeded: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_signal(env: Envelope) -> None:
        await exceeded.put(env)

    await bus.subscribe(subjects.signal("llm.budget.exceeded"), on_signal)
    port = make_llm_port(config, bus=bus)
    settings = {**scripted_llm_settings, "budget_tokens": 50}
    scripted_llm.script(Reply.answer("spent", prompt_tokens=60, completion_tokens=5))
    await port.complete(_request(settings), _nothing)
    with pytest.raises(JidoError) as info:
        await port.complete(_request(settings), _nothing)
    assert info.value.type == "llm_budget_exceeded"
    assert "65/50 tokens" in info.value.message
    env = await asyncio.wait_for(exceeded.get(), 10)
    assert env.data["used_tokens"] == 65 and env.data["budget_tokens"] == 50
    assert len(scripted_llm.requests) == 1
    # another conversation of the same project has its own budget
    scripted_llm.script(Reply.answer("fine"))
    result = await port.complete(_request(settings, "c2"), _nothing)
    assert result.content == "fine"


async def test_two_writers_on_one_conversation_lose_nothing(bus: Bus) -> None:
    a, b = KvLedger(bus), KvLedger(bus)
    usage = LlmCallCompleted(project_id="p1", conversation_id="c9", call_id="k", model="m", total_tokens=5)
    await a.record(usage)
    await b.record(usage)  # a's cached revision is now stale
    await a.record(usage)
    await asyncio.gather(*(w.record(usage) for w in (a, b, a, b)))
    totals = await KvLedger(bus).conversation("p1", "c9")
    assert (totals.calls, totals.total_tokens) == (7, 35)
