"""A turn with two tool calls is one trace across services, exported, scraped and read back from the bus.

The system (``conftest.py``) runs every service in this process with tracing on
(an in-memory exporter and an OTLP/HTTP receiver), and one turn: the model asks
for two ``read_file`` calls, then answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.cli.trace import last_turn_trace, load_last_turn, render_tree
from jidocode.shared import telemetry

from .conftest import DEADLINE, Traced

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _service(span: ReadableSpan) -> str:
    return str(span.resource.attributes.get("service.name", ""))


async def _turn_spans(traced: Traced, until: Callable[[list[ReadableSpan]], bool]) -> list[ReadableSpan]:
    """The spans of the turn's trace once ``until`` holds for them (spans end a little after the answer)."""

    async def _wait() -> list[ReadableSpan]:
        while True:
            spans = list(traced.memory.get_finished_spans())
            roots = [s for s in spans if s.name == "send_message"]
            if roots:
                assert roots[0].context is not None
                trace_id = roots[0].context.trace_id
                mine = [s for s in spans if s.context is not None and s.context.trace_id == trace_id]
                if until(mine):
                    return mine
            await asyncio.sleep(0.05)  # polling the exporter's list; bounded by wait_for

    return await asyncio.wait_for(_wait(), DEADLINE)


def _complete(spans: list[ReadableSpan]) -> bool:
    names = [s.name for s in spans]
    return "conversation.turn" in names and names.count("tool read_file") == 2


async def test_one_trace_crosses_services_with_the_right_parents(traced: Traced) -> None:
    assert traced.answer == "Both files read."
    spans = await _turn_spans(traced, _complete)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def parent(span: ReadableSpan) -> ReadableSpan | None:
        return by_id.get(span.parent.span_id) if span.parent is not None else None

    def ancestors(span: ReadableSpan) -> list[str]:
        out = []
        node = parent(span)
        while node is not None:
            out.append(node.name)
            node = parent(node)
        return out

    [root] = [s for s in spans if s.parent is None]
    assert root.name == "send_message" and _service(root) == "jidocode-client"
    # every other span's parent is in the trace: no broken link anywhere
    assert all(parent(s) is not None for s in spans if s is not root)
    assert {"jidocode-client", "jidocode-conversation", "jidocode-tool_runner"} <= {
        _service(s) for s in spans
    }

    [turn] = [s for s in spans if s.name == "conversation.turn"]
    assert _service(turn) == "jidocode-conversation"
    assert parent(turn) is not None and parent(turn).name == "conversation.send_event"  # type: ignore[union-attr]
    assert ancestors(turn)[-1] == "send_message"
    assert (turn.attributes or {})["jido.outcome"] == "answered"

    chats = [s for s in spans if s.name == "chat openai/scripted"]
    assert len(chats) == 2 and all(parent(c) is turn for c in chats)
    first, second = sorted(chats, key=lambda s: s.start_time or 0)
    assert (first.attributes or {})["gen_ai.request.model"] == "openai/scripted"
    assert tuple((first.attributes or {})["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert (second.attributes or {})["gen_ai.usage.input_tokens"] == 30
    assert (second.attributes or {})["gen_ai.usage.output_tokens"] == 4

    runs = [s for s in spans if s.name == "tool read_file"]
    for run in runs:
        assert _service(run) == "jidocode-tool_runner"
        assert (run.attributes or {})["jido.decision"] == "allow"
        assert (run.attributes or {})["jido.outcome"] == "completed"
        # tool runner span <- its endpoint's server span <- the conversation's request <- its tool call <- the turn
        assert ancestors(run)[:4] == [
            "tool_runner.run",
            "request tool.run",
            "execute_tool read_file",
            "conversation.turn",
        ]
    journal = [s for s in spans if s.name == "journal append"]
    assert journal and all("conversation.turn" in ancestors(s) for s in journal)


async def test_the_otlp_receiver_gets_the_same_trace(traced: Traced) -> None:
    spans = await _turn_spans(traced, _complete)
    trace_id = spans[0].context.trace_id.to_bytes(16, "big")  # type: ignore[union-attr]
    await asyncio.to_thread(telemetry.flush)

    def _received() -> list[tuple[str, Any]]:
        with traced.otlp.received:
            traced.otlp.received.wait_for(
                lambda: sum(1 for _, s in traced.otlp.spans() if s.trace_id == trace_id) >= len(spans),
                DEADLINE,
            )
        return [(svc, s) for svc, s in traced.otlp.spans() if s.trace_id == trace_id]

    received = await asyncio.to_thread(_received)
    assert {s.span_id for _, s in received} >= {x.context.span_id.to_bytes(8, "big") for x in spans}  # type: ignore[union-attr]
    assert {"jidocode-client", "jidocode-conversation", "jidocode-tool_runner"} <= {
        svc for svc, _ in received
    }


async def test_metrics_moved_by_the_turn(traced: Traced) -> None:
    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return traced.after.get(key, 0.0) - traced.before.get(key, 0.0)

    assert moved("jido_requests_total", service="tool_runner", endpoint="run") == 2
    assert moved("jido_requests_total", service="conversation", endpoint="send_event") == 1
    assert moved("jido_tool_calls_total", tool="read_file", decision="allow", outcome="completed") == 2
    assert moved("jido_tool_duration_seconds_count", tool="read_file") == 2
    assert moved("jido_llm_duration_seconds_count", model="openai/scripted", outcome="completed") == 2
    assert moved("jido_llm_tokens_total", model="openai/scripted", direction="output") >= 4
    assert moved("jido_turn_duration_seconds_count", outcome="answered") == 1
    owned = [v for (name, _), v in traced.after.items() if name == "jido_conversations_owned"]
    assert owned and max(owned) >= 1


async def test_jidocode_trace_reads_the_turn_from_the_bus(traced: Traced) -> None:
    spans = await _turn_spans(traced, _complete)
    wanted = {format(s.context.span_id, "016x") for s in spans}  # type: ignore[union-attr]
    info = await traced.client.conversations.list(conversation_id=traced.client.conversation_id)
    assert info.conversations

    async def _read() -> list[Any]:
        while True:  # the services publish their spans a moment after they end
            records = await load_last_turn(
                traced.bus, traced.client.project_id, traced.client.conversation_id or ""
            )
            if wanted <= {r.span_id for r in records}:
                return records
            await asyncio.sleep(0.1)

    records = await asyncio.wait_for(_read(), DEADLINE)
    assert last_turn_trace(records) == format(spans[0].context.trace_id, "032x")  # type: ignore[union-attr]
    lines = render_tree(records)
    assert lines[0].startswith("send_message ") and "[client]" in lines[0]
    text = "\n".join(lines)
    for expected in ("conversation.turn", "chat openai/scripted", "tool read_file", "decision=allow"):
        assert expected in text
    # the tool runner's span sits under the conversation's tool call, indented deeper
    turn_line = next(i for i, line in enumerate(lines) if "conversation.turn" in line)
    tool_line = next(
        i for i, line in enumerate(lines) if "tool read_file" in line and "execute_tool" not in line
    )
    assert tool_line > turn_line
    depth = lambda line: len(line) - len(line.lstrip("│ ├└─"))  # noqa: E731
    assert depth(lines[tool_line]) > depth(lines[turn_line])


async def test_the_trace_command_prints_the_tree(traced: Traced, monkeypatch: pytest.MonkeyPatch) -> None:
    await _turn_spans(traced, _complete)
    monkeypatch.setenv("NATS_URL", traced.config.nats_url)
    cid = traced.client.conversation_id or ""

    def _invoke(*args: str) -> Any:
        return CliRunner().invoke(app, ["trace", *args])

    async def _until_complete() -> Any:
        while True:  # the spans of the turn's end may still be on their way to the stream
            result = await asyncio.to_thread(_invoke, cid, "-p", str(traced.project))
            assert result.exit_code == 0, result.output
            if result.output.count("─ tool read_file  ") == 2 and "conversation.turn" in result.output:
                return result
            await asyncio.sleep(0.2)

    result = await asyncio.wait_for(_until_complete(), DEADLINE)
    lines = result.output.splitlines()
    assert lines[0].startswith("trace ") and "spans from" in lines[0] and "tool_runner" in lines[0]
    assert lines[1].startswith("send_message ")
    missing = await asyncio.to_thread(_invoke, "nosuchconversation", "-p", str(traced.project))
    assert missing.exit_code == 2 and "no traced turn of conversation 'nosuchconversation'" in missing.output
    bad = await asyncio.to_thread(_invoke, "not.a.token", "-p", str(traced.project))
    assert bad.exit_code == 2 and "conversation id" in bad.output
