"""Spans onto the bus (scopes, batches, limits), turns as spans, the tree `jidocode trace` prints."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from cloudevents.core.formats.json import JSONFormat
from hypothesis import given
from hypothesis import strategies as st

from jidocode.cli.trace import last_turn_trace, render_tree
from jidocode.cli.watch_tree import MAX_TEXT, TurnTree, cloudevent_line
from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.tracing import MAX_OPEN_TURNS, TurnTraces, turn_outcome
from jidocode.shared import telemetry
from jidocode.shared.envelope import Envelope, new_id, now_iso
from jidocode.shared.events.telemetry import SpanRecord, TraceSpans
from jidocode.shared.telemetry import export, metrics
from jidocode.shared.telemetry.export import BusSpanProcessor


@pytest.fixture
def tracing_on() -> Iterator[None]:
    telemetry.install([])
    try:
        yield
    finally:
        telemetry.reset()


def test_off_means_no_tracer() -> None:
    telemetry.reset()
    assert not telemetry.enabled() and telemetry.tracer("engine") is None


async def test_spans_go_out_by_trace_under_the_scope_learned_from_the_trace(tracing_on: None) -> None:
    out: list[tuple[str, TraceSpans]] = []

    async def publish(subject: str, event: TraceSpans) -> None:
        out.append((subject, event))

    processor = BusSpanProcessor("tool_runner", publish)
    tracer = telemetry.tracer("tool_runner", extra=[processor])
    assert tracer is not None
    with (
        tracer.start_as_current_span(
            "tool_runner.run", attributes={telemetry.ATTR_PROJECT: "P1", telemetry.ATTR_CONVERSATION: "c1"}
        ) as outer,
        tracer.start_as_current_span("tool read_file", attributes={"long": "x" * 5000}),
    ):
        pass
    with tracer.start_as_current_span("engine.list_projects"):
        pass
    await asyncio.wait_for(processor.drain(), 10)
    assert sum(len(e.spans) for _, e in out) == 3
    trace_id = format(outer.get_span_context().trace_id, "032x")
    by_subject = {s: [sp.name for sp in e.spans] for s, e in out}
    assert by_subject[f"jido.trace.P1.c1.{trace_id}"] == ["tool read_file", "tool_runner.run"]
    [other] = [s for s in by_subject if s != f"jido.trace.P1.c1.{trace_id}"]
    assert other.startswith("jido.trace._._.") and by_subject[other] == ["engine.list_projects"]
    child = next(sp for _, e in out for sp in e.spans if sp.name == "tool read_file")
    assert child.parent_id == format(outer.get_span_context().span_id, "016x")
    assert child.service == "tool_runner" and len(str(child.attributes["long"])) == export.MAX_ATTR_CHARS
    # what goes on the wire is a valid catalogue event
    TraceSpans.model_validate(out[0][1].model_dump())


async def test_pending_spans_are_bounded(tracing_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "MAX_PENDING", 5)
    monkeypatch.setattr(export, "BATCH_SPANS", 2)
    out: list[tuple[str, TraceSpans]] = []

    async def publish(subject: str, event: TraceSpans) -> None:
        out.append((subject, event))

    processor = BusSpanProcessor("engine", publish)
    tracer = telemetry.tracer("engine", extra=[processor])
    assert tracer is not None
    with tracer.start_as_current_span("root"):
        for i in range(9):  # all end before the loop runs the flush: 9 + root = 10 queued, 5 kept
            tracer.start_span(f"s{i}").end()
    await processor.drain()
    assert processor.dropped == 5
    assert sum(len(e.spans) for _, e in out) == 5
    assert max(len(e.spans) for _, e in out) == 2


def _signal(type_: str, correlation: str, **data: object) -> Signal:
    return Signal(id=new_id(), type=type_, source="t", data=dict(data), correlation_id=correlation)


@pytest.mark.parametrize(
    ("type_", "data", "outcome"),
    [
        ("conversation.llm.completed", {"tool_calls": []}, "answered"),
        ("conversation.llm.completed", {"tool_calls": [{"id": "1"}]}, None),
        ("conversation.llm.failed", {}, "failed"),
        ("conversation.loop.stopped", {}, "stopped"),
        ("conversation.cancel", {}, "cancelled"),
        ("conversation.tool.completed", {}, None),
        ("conversation.user.message", {"text": "hi"}, None),
    ],
)
def test_which_entries_end_a_turn(type_: str, data: dict[str, object], outcome: str | None) -> None:
    assert turn_outcome(_signal(type_, "k", **data)) == outcome


def _turn_count(outcome: str) -> float:
    value = metrics.REGISTRY.get_sample_value("jido_turn_duration_seconds_count", {"outcome": outcome})
    return value or 0.0


def test_open_turns_are_bounded_and_end_with_their_outcome() -> None:
    traces = TurnTraces(None, "P1", "c1")
    before_untracked, before_answered = _turn_count("untracked"), _turn_count("answered")
    for i in range(MAX_OPEN_TURNS + 3):
        traces.begin(_signal("conversation.user.message", f"k{i}", text="hi"), None)
    assert len(traces) == MAX_OPEN_TURNS
    assert _turn_count("untracked") - before_untracked == 3
    traces.observe([_signal("conversation.llm.completed", f"k{MAX_OPEN_TURNS}", tool_calls=[])])
    assert len(traces) == MAX_OPEN_TURNS - 1
    assert _turn_count("answered") - before_answered == 1
    traces.close()
    assert len(traces) == 0


def _record(span_id: int, parent: int | None, start: int, name: str = "s") -> SpanRecord:
    return SpanRecord(
        trace_id="1" * 32,
        span_id=f"{span_id:016x}",
        parent_id=f"{parent:016x}" if parent is not None else None,
        name=name,
        service="conversation",
        start_ns=start,
        end_ns=start + 2_500_000,
    )


@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=30))
def test_every_span_is_one_line_of_the_tree(parents: list[int]) -> None:
    # span i's parent is some span j < i (or missing: a root); a missing parent id is a root too
    spans = [_record(i + 1, (p % (i + 1)) or None if i else None, i) for i, p in enumerate(parents)]
    spans.append(_record(999, 777, 5))  # its parent was never read
    lines = render_tree(spans + spans[:3])  # duplicates are shown once
    assert len(lines) == len(spans)
    ids = {s.span_id for s in spans}
    roots = sum(1 for s in spans if s.parent_id not in ids)
    assert sum(1 for line in lines if not line.startswith((" ", "│", "├", "└"))) == roots


def test_the_tree_shows_children_under_parents_with_durations() -> None:
    lines = render_tree(
        [
            _record(1, None, 0, "send_message"),
            _record(2, 1, 1, "conversation.turn"),
            _record(4, 2, 3, "tool read_file"),
            _record(3, 2, 2, "chat openai/x"),
        ]
    )
    assert [re.sub(r"  [0-9.]+ ms.*$", "", line) for line in lines] == [
        "send_message",
        "└─ conversation.turn",
        "   ├─ chat openai/x",
        "   └─ tool read_file",
    ]
    assert "2.5 ms" in lines[0]


def test_the_last_turn_is_the_newest_turn_span() -> None:
    old = _record(1, None, 10, "conversation.turn")
    new = _record(2, None, 20, "conversation.turn").model_copy(update={"trace_id": "2" * 32})
    assert last_turn_trace([new, old]) == "2" * 32
    assert last_turn_trace([_record(3, None, 1)]) is None


def _env(type_: str, correlation: str, **data: object) -> Envelope:
    return Envelope(
        id=new_id(),
        source="t",
        type=type_,
        data=dict(data),
        time=now_iso(),
        extensions={"projectid": "P1", "conversationid": "c1", "correlationid": correlation},
    )


def test_watch_json_lines_are_cloudevents() -> None:
    env = _env("conversation.user.message", "k1", text="hi")
    line = cloudevent_line(env, "jido.evt.P1.c1.conversation.user.message")
    event = JSONFormat().read(None, line)
    assert event.get_id() == env.id and event.get_type() == env.type and event.get_source() == "t"
    assert event.get_data() == {"text": "hi"}
    assert event.get_extension("natssubject") == "jido.evt.P1.c1.conversation.user.message"
    assert event.get_extension("conversationid") == "c1"


def test_watch_tree_groups_a_turn() -> None:
    tree = TurnTree()
    lines: list[str] = []
    for env in [
        _env("conversation.user.message", "k1", text="read " + "x" * 200),
        _env("conversation.llm.requested", "k1", turn=1),
        _env("conversation.llm.completed", "k1", tool_calls=[{"id": "1"}], usage={"prompt_tokens": 3}),
        _env("conversation.tool.requested", "k1", name="read_file", args={"path": "README.md"}),
        _env("conversation.assistant.delta", "k1", text="par"),
        _env("conversation.tool.completed", "k1", name="read_file"),
        _env("conversation.assistant.message", "k1", text="done"),
    ]:
        lines.extend(tree.add(env))
    assert lines[0] == "● conversation c1 (project P1)"
    assert lines[1].startswith("  ▸ turn k1: ") and len(lines[1]) < MAX_TEXT + 30
    assert lines[2:] == [
        "    ├ llm requested (loop turn 1)",
        "    ├ llm completed: 1 tool call · 3→0 tokens",
        '    │  ├ tool read_file requested {"path": "README.md"}',
        "    │  ├ tool read_file completed",
        '    ├ answer: "done"',
    ]


def test_log_lines_carry_the_current_span(tracing_on: None) -> None:
    import json
    import logging

    from jidocode.shared.telemetry import JsonFormatter, TextFormatter

    tracer = telemetry.tracer("engine")
    assert tracer is not None
    record = logging.LogRecord("jidocode.x", logging.INFO, __file__, 1, "inside", (), None)
    with tracer.start_as_current_span("work") as span:
        line = json.loads(JsonFormatter().format(record))
        text = TextFormatter().format(record)
    ctx = span.get_span_context()
    assert line["trace_id"] == format(ctx.trace_id, "032x") and line["span_id"] == format(ctx.span_id, "016x")
    assert f"trace_id={format(ctx.trace_id, '032x')[:16]}" in text
