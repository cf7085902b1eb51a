"""Seed 000 §6 llm.* signals on ``jido.sig.>``: real litellm against the scripted server, a real bus."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.services.conversation.llm import LitellmPort, make_llm_port
from jidocode.services.conversation.llm.deltas import max_deltas
from jidocode.services.conversation.llm.ledger import bus_sink
from jidocode.services.conversation.ports import LlmRequest
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError

from ._support import SignalLog

#: A long answer: many streamed chunks (8 characters each).
ANSWER = "".join(f"line {i:04d} of a long streamed answer. " for i in range(120))


def _request(settings: dict[str, Any], text: str = "hi") -> LlmRequest:
    return LlmRequest(
        project_id="p1",
        conversation_id="c1",
        correlation_id="corr-1",
        messages=[{"role": "user", "content": text}],
        settings=settings,
    )


async def _nothing(_: str) -> None:
    return None


def _of_call(log: SignalLog, event_type: str, call_id: str) -> list[Envelope]:
    return log.of(event_type, lambda e: e.data.get("call_id") == call_id)


async def test_a_call_is_started_deltas_completed_with_one_call_id(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    port = make_llm_port(config, bus=bus)
    scripted_llm.script(Reply.answer(ANSWER, prompt_tokens=40, completion_tokens=300))
    began = time.monotonic()
    result = await port.complete(_request(scripted_llm_settings), _nothing)
    took = time.monotonic() - began
    assert result.content == ANSWER

    completed = await log.wait("llm.completed")
    call_id = completed.data["call_id"]
    assert completed.nats_subject == "jido.sig.llm.completed"
    assert (completed.project_id, completed.conversation_id, completed.correlation_id) == (
        "p1",
        "c1",
        "corr-1",
    )
    assert {
        k: completed.data[k] for k in ("model", "prompt_tokens", "completion_tokens", "total_tokens")
    } == {
        "model": "openai/scripted",
        "prompt_tokens": 40,
        "completion_tokens": 300,
        "total_tokens": 340,
    }
    assert completed.data["finish_reason"] == "stop" and completed.data["retries"] == 0
    assert completed.data["content_chars"] == len(ANSWER) and completed.data["tool_calls"] == 0
    assert 0 < completed.data["duration_ms"] <= took * 1000
    assert "cost_usd" in completed.data  # None: litellm has no price for the scripted model

    [started] = _of_call(log, "llm.started", call_id)
    assert started.nats_subject == "jido.sig.llm.started"
    assert (started.project_id, started.conversation_id, started.correlation_id) == ("p1", "c1", "corr-1")
    assert (started.data["model"], started.data["messages"], started.data["tools"]) == (
        "openai/scripted",
        1,
        0,
    )

    deltas = _of_call(log, "llm.delta", call_id)
    assert 1 <= len(deltas) <= max_deltas(len(ANSWER), took, interval_s=0.25, max_chars=4096)
    assert len(deltas) < len(ANSWER) // 8  # coalesced: fewer signals than streamed chunks
    assert [d.data["seq"] for d in deltas] == list(range(len(deltas)))
    assert "".join(d.data["text"] for d in deltas) == ANSWER
    assert completed.data["deltas"] == len(deltas)

    # one call, in this order, on the one subject space: llm.completed carries the usage and
    # the model's window (no separate llm.usage signal repeats them, decision 0350)
    order = [e.type for e in log.seen if e.data.get("call_id") == call_id]
    assert order == ["llm.started", *["llm.delta"] * len(deltas), "llm.completed"]
    assert completed.data["context_window"] > 0


async def test_deltas_are_sliced_and_bounded_by_the_port_limits(
    bus: Bus, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    port = LitellmPort(sink=bus_sink(bus), delta_interval_s=0.05, delta_max_chars=300)
    scripted_llm.script(Reply.answer(ANSWER, chunk_chars=64, chunk_delay_s=0.002))
    began = time.monotonic()
    await port.complete(_request(scripted_llm_settings), _nothing)
    took = time.monotonic() - began
    completed = await log.wait("llm.completed")
    deltas = _of_call(log, "llm.delta", completed.data["call_id"])
    texts = [d.data["text"] for d in deltas]
    assert "".join(texts) == ANSWER
    assert all(0 < len(t) <= 300 for t in texts)
    assert len(deltas) >= len(ANSWER) // 300  # the size limit cut it
    assert len(deltas) <= max_deltas(len(ANSWER), took, interval_s=0.05, max_chars=300)
    assert completed.data["deltas"] == len(deltas)


async def test_a_refused_call_is_started_then_failed(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    port = make_llm_port(config, bus=bus)
    scripted_llm.script(Reply.error(401))
    with pytest.raises(JidoError):
        await port.complete(_request(scripted_llm_settings), _nothing)
    failed = await log.wait("llm.failed")
    assert failed.nats_subject == "jido.sig.llm.failed"
    assert (failed.data["error_type"], failed.data["attempts"], failed.data["model"]) == (
        "llm_auth",
        1,
        "openai/scripted",
    )
    [started] = _of_call(log, "llm.started", failed.data["call_id"])
    assert started.conversation_id == failed.conversation_id == "c1"
    assert not log.of("llm.completed")


async def test_a_retried_call_names_its_call_in_every_signal(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    port = make_llm_port(config, bus=bus)
    scripted_llm.script(Reply.error(503), Reply.answer("fine"))
    await port.complete(_request(scripted_llm_settings), _nothing)
    completed = await log.wait("llm.completed")
    call_id = completed.data["call_id"]
    assert completed.data["retries"] == 1
    [retrying] = _of_call(log, "llm.retrying", call_id)
    assert retrying.data["attempt"] == 1
    assert len(_of_call(log, "llm.started", call_id)) == 1  # once per call, not per attempt
    assert "".join(d.data["text"] for d in _of_call(log, "llm.delta", call_id)) == "fine"


async def test_a_cancelled_call_ends_with_llm_failed(
    bus: Bus, config: Config, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    log = await SignalLog.follow(bus)
    port = make_llm_port(config, bus=bus)
    scripted_llm.script(Reply.answer(ANSWER, chunk_delay_s=0.05))
    call = asyncio.create_task(port.complete(_request(scripted_llm_settings), _nothing))
    first = await log.wait("llm.delta")  # the first piece goes out at once
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    failed = await log.wait("llm.failed")
    assert failed.data["error_type"] == "llm_cancelled"
    call_id = failed.data["call_id"]
    assert first.data["call_id"] == call_id and first.data["seq"] == 0
    assert len(_of_call(log, "llm.started", call_id)) == 1
    # what streamed before the cancel was published, and nothing after the end
    assert ANSWER.startswith("".join(d.data["text"] for d in _of_call(log, "llm.delta", call_id)))
    assert log.seen[-1].type == "llm.failed"


async def test_a_call_without_a_model_fails_without_starting(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JIDO_LLM_MODEL", raising=False)
    log = await SignalLog.follow(bus)
    port = make_llm_port(config, bus=bus)
    with pytest.raises(JidoError):
        await port.complete(_request({}), _nothing)
    failed = await log.wait("llm.failed")
    assert failed.data["error_type"] == "llm_not_configured" and failed.data["call_id"]
    assert not log.of("llm.started")
