"""`jidocode trace <conversation>`: the conversation's last turn as a tree of spans, read from the bus.

While tracing is on (``OTEL_*``, see ``docs/observability.md``) every service
publishes the spans it ends on ``jido.trace.<p>.<c>.<trace id>``, kept by the
``JIDO_TRACES`` stream for an hour. This command needs no collector:

1. it reads the conversation's spans (``jido.trace.<p>.<c>.*``) and takes the
   trace of the newest ``conversation.turn`` span (the last user message);
2. it reads that whole trace (``jido.trace.*.*.<trace id>``: spans of services
   that did not know the conversation, such as a request to the project service,
   are filed under ``_``);
3. it prints the spans as a tree by their parent links, with durations and the
   attributes worth reading (model, tokens, tool, decision, sandbox, exit code).

A span whose parent is not among the spans read (the client's own span when the
client was not traced) is shown as a root.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import nats.errors
import nats.js.errors
import typer
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.markup import escape

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import decode
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.telemetry import SpanRecord, TraceSpans

from .common import cli_bus, console, print_json, resolve_project, run

__all__ = ["TURN_SPAN", "last_turn_trace", "read_spans", "render_tree", "trace"]

#: The span that opens one turn (``services/conversation/tracing.py``).
TURN_SPAN = "conversation.turn"
#: The attributes shown beside a span's name, in this order, when it has them.
SHOWN = (
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.name",
    "jido.decision",
    "jido.sandbox",
    "process.exit.code",
    "jido.approval",
    "jido.outcome",
    "error.type",
)
#: Spans read at most for one trace (a long agentic turn has a few hundred).
MAX_SPANS = 10_000


async def read_spans(bus: Bus, subject_filter: str, *, idle: float = 0.5) -> list[SpanRecord]:
    """Every span stored under ``subject_filter``, in stream order (an empty list when none is)."""
    out: list[SpanRecord] = []
    done = asyncio.Event()

    async def _cb(msg: Any) -> None:
        try:
            event = decode(msg.data, msg.headers).event()
        except JidoError:
            return
        if isinstance(event, TraceSpans):
            out.extend(event.spans)
        if msg.metadata.num_pending == 0 or len(out) >= MAX_SPANS:
            done.set()

    try:
        sub = await bus.js.subscribe(
            subject_filter,
            stream=subjects.STREAM_TRACES,
            cb=_cb,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
    except nats.js.errors.NotFoundError:
        return []  # tracing never ran on this system: no stream
    try:
        info = await sub.consumer_info()
        # consumer_seq counts what this consumer delivered (stream_seq moves past other subjects too)
        if info.num_pending or (info.delivered and info.delivered.consumer_seq):
            await asyncio.wait_for(done.wait(), max(idle, 30.0))
    except (TimeoutError, nats.errors.TimeoutError):
        pass  # show what arrived
    finally:
        await sub.unsubscribe()
    return out[:MAX_SPANS]


def last_turn_trace(spans: Iterable[SpanRecord]) -> str | None:
    """The trace id of the newest turn among ``spans`` (by start time), or ``None``."""
    turns = [s for s in spans if s.name == TURN_SPAN]
    return max(turns, key=lambda s: s.start_ns).trace_id if turns else None


def _label(span: SpanRecord) -> str:
    parts = [f"{k.rsplit('.', 1)[-1]}={_text(span.attributes[k])}" for k in SHOWN if k in span.attributes]
    return " ".join(parts)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def render_tree(spans: Iterable[SpanRecord]) -> list[str]:
    """The spans as tree lines: ``<name> <duration> [<service>] <attributes>``, children by start time.

    Spans are deduplicated by span id; one whose parent is missing is a root.
    """
    by_id: dict[str, SpanRecord] = {}
    for span in spans:
        by_id.setdefault(span.span_id, span)
    children: dict[str | None, list[SpanRecord]] = {}
    for span in by_id.values():
        parent = span.parent_id if span.parent_id in by_id else None
        children.setdefault(parent, []).append(span)
    for group in children.values():
        group.sort(key=lambda s: (s.start_ns, s.span_id))
    lines: list[str] = []

    def walk(span: SpanRecord, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        status = " ERROR" if span.status == "error" else ""
        extra = _label(span)
        lines.append(
            f"{prefix}{branch}{span.name}  {span.duration_s * 1000:.1f} ms  [{span.service}]{status}"
            + (f"  {extra}" if extra else "")
        )
        kids = children.get(span.span_id, [])
        below = prefix if root else prefix + ("   " if last else "│  ")
        for i, kid in enumerate(kids):
            walk(kid, below, i == len(kids) - 1, False)

    for root in children.get(None, []):
        walk(root, "", True, True)
    return lines


async def load_last_turn(bus: Bus, project_id: str, conversation_id: str) -> list[SpanRecord]:
    """The spans of the conversation's last turn (``NotFound`` naming why there are none)."""
    own = await read_spans(bus, subjects.trace_filter(project_id, conversation_id))
    trace_id = last_turn_trace(own)
    if trace_id is None:
        raise NotFound(
            f"no traced turn of conversation {conversation_id!r} in stream {subjects.STREAM_TRACES}: "
            "tracing is off unless the services run with OTEL_TRACES_EXPORTER (e.g. jido, or otlp with "
            "OTEL_EXPORTER_OTLP_ENDPOINT); spans are kept for an hour",
            details={"conversation_id": conversation_id, "project_id": project_id},
        )
    return await read_spans(bus, subjects.trace_filter(trace_id=trace_id))


def trace(
    conversation: str = typer.Argument(..., help="the conversation id"),
    project_dir: str = typer.Option(".", "--project", "-p", help="the project's directory"),
    json_out: bool = typer.Option(False, "--json", help="print the spans as JSON"),
) -> None:
    """The conversation's last turn as a tree of spans with durations (tracing must be on)."""
    try:
        subjects.validate_token(conversation, "conversation id")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def main() -> list[SpanRecord]:
        async with cli_bus("trace") as bus:
            info = await resolve_project(bus, project_dir)
            return await load_last_turn(bus, info.project_id, conversation)

    spans = run(main)
    if json_out:
        print_json([s.model_dump(mode="json") for s in spans])
        return
    services = sorted({s.service for s in spans})
    console.print(
        f"trace {escape(spans[0].trace_id)}: {len(spans)} spans from {', '.join(services)}",
        highlight=False,
        soft_wrap=True,  # one line, whatever the terminal's width: it is read by tools too
    )
    for line in render_tree(spans):
        console.print(escape(line), highlight=False, soft_wrap=True)
