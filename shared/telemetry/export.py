"""Finished spans onto the bus: ``jido.trace.<p>.<c>.<trace id>``, for ``jidocode trace``.

:class:`BusSpanProcessor` is added to each service's tracer provider while
tracing is on. ``on_end`` (called where the span ends, normally the event loop)
turns the span into a :class:`SpanRecord` and queues it; one callback per loop
turn publishes the queue, a :class:`TraceSpans` event per trace (and per
:data:`BATCH_SPANS` spans), with core NATS: losing a batch loses a tree's
branch, never a request.

The project and conversation tokens of the subject come from the span's own
attributes (``jido.project_id``, ``jido.conversation_id``), else from what an
earlier span of the same trace in this process said (a bounded map, learned at
span start), else ``_``: a tool runner's span inside a request that named its
conversation is filed under that conversation.

Limits: at most :data:`MAX_PENDING` spans wait for publishing (older ones are
dropped and counted), attribute strings are cut to :data:`MAX_ATTR_CHARS`,
the trace→scope map keeps :data:`MAX_SCOPES` traces.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from jidocode.shared import subjects
from jidocode.shared.events.telemetry import SpanRecord, TraceSpans

from ._switch import ATTR_CONVERSATION, ATTR_PROJECT


class StreamMaker(Protocol):
    """What :func:`ensure_trace_stream` needs of a bus (``shared.bus.Bus``)."""

    async def ensure_stream(self, name: str, subjects: Sequence[str], **config: Any) -> None: ...


__all__ = [
    "BATCH_SPANS",
    "MAX_ATTR_CHARS",
    "MAX_PENDING",
    "MAX_SCOPES",
    "TRACES_MAX_AGE_S",
    "TRACES_MAX_BYTES",
    "BusSpanProcessor",
    "StreamMaker",
    "ensure_trace_stream",
    "to_record",
]

log = logging.getLogger("jidocode.telemetry")

BATCH_SPANS = 64
MAX_PENDING = 4096
MAX_ATTR_CHARS = 512
MAX_SCOPES = 4096
#: How long ``JIDO_TRACES`` keeps spans, and how many bytes of them (the oldest go first).
TRACES_MAX_AGE_S = 3600.0
TRACES_MAX_BYTES = 256 * 1024 * 1024

_KINDS = {
    SpanKind.INTERNAL: "internal",
    SpanKind.SERVER: "server",
    SpanKind.CLIENT: "client",
    SpanKind.PRODUCER: "producer",
    SpanKind.CONSUMER: "consumer",
}
_STATUS = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}

#: Publishes one batch: ``(subject, event)``.
Publish = Callable[[str, TraceSpans], Awaitable[None]]
Scope = tuple[str | None, str | None]


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return value[:MAX_ATTR_CHARS]
    if isinstance(value, tuple | list):
        return [v[:MAX_ATTR_CHARS] if isinstance(v, str) else v for v in value]
    return value


def to_record(span: ReadableSpan, service: str) -> SpanRecord:
    """The bus form of a finished span."""
    ctx = span.context
    assert ctx is not None
    parent = span.parent
    return SpanRecord.model_construct(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else None,
        name=span.name[:256],
        service=service,
        kind=_KINDS.get(span.kind, "internal"),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        status=_STATUS.get(span.status.status_code, "unset"),
        attributes={k: _value(v) for k, v in (span.attributes or {}).items()},
    )


def _scope_of(attributes: Any) -> Scope | None:
    if not attributes:
        return None
    p = attributes.get(ATTR_PROJECT)
    c = attributes.get(ATTR_CONVERSATION)
    if p is None and c is None:
        return None
    return (p if isinstance(p, str) else None, c if isinstance(c, str) else None)


class BusSpanProcessor(SpanProcessor):
    """Publishes the spans a service ends on ``jido.trace.<p>.<c>.<trace id>``."""

    def __init__(
        self, service: str, publish: Publish, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.service = service
        self._publish = publish
        self._loop = loop or asyncio.get_running_loop()
        self._pending: list[tuple[Scope, SpanRecord]] = []
        self._scheduled = False
        self._scopes: OrderedDict[int, Scope] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Spans dropped because :data:`MAX_PENDING` were waiting already.
        self.dropped = 0

    def _learn(self, trace_id: int, scope: Scope) -> None:
        known = self._scopes.get(trace_id)
        if known is not None:
            # keep what is known; a later span may add the conversation to a project-only scope
            scope = (known[0] or scope[0], known[1] or scope[1])
        self._scopes[trace_id] = scope
        self._scopes.move_to_end(trace_id)
        while len(self._scopes) > MAX_SCOPES:
            self._scopes.popitem(last=False)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        scope = _scope_of(span.attributes)
        if scope is not None and span.context is not None:
            self._learn(span.context.trace_id, scope)

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None:
            return
        scope = _scope_of(span.attributes)
        if scope is not None:
            self._learn(ctx.trace_id, scope)
        known = self._scopes.get(ctx.trace_id)
        if known is not None:
            scope = (scope[0] or known[0], scope[1] or known[1]) if scope is not None else known
        self._pending.append((scope or (None, None), to_record(span, self.service)))
        if len(self._pending) > MAX_PENDING:
            del self._pending[0]
            self.dropped += 1
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._flush)
            except RuntimeError:  # the loop is closed: nobody will publish these
                self._scheduled = False
                self._pending.clear()

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        batches: dict[tuple[str | None, str | None, str], list[SpanRecord]] = {}
        for (p, c), record in pending:
            batches.setdefault((p, c, record.trace_id), []).append(record)
        for (p, c, trace_id), records in batches.items():
            try:
                subject = subjects.trace(p, c, trace_id)
            except ValueError:  # an id that is no subject token: filed under no scope
                subject = subjects.trace(None, None, trace_id)
            for start in range(0, len(records), BATCH_SPANS):
                event = TraceSpans.model_construct(spans=records[start : start + BATCH_SPANS])
                task = self._loop.create_task(self._send(subject, event))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, subject: str, event: TraceSpans) -> None:
        try:
            await self._publish(subject, event)
        except Exception as exc:  # a lost batch of spans is a lost branch, never a failure
            log.debug("could not publish %d span(s) on %s: %s", len(event.spans), subject, exc)

    async def drain(self) -> None:
        """Publish what is queued and wait for the publishes in flight (before the bus closes)."""
        if self._pending:
            self._flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def shutdown(self) -> None:
        self._pending.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


async def ensure_trace_stream(bus: StreamMaker) -> None:
    """The ``JIDO_TRACES`` stream over ``jido.trace.>`` (an hour, 256 MiB; idempotent)."""
    from nats.js.api import DiscardPolicy

    await bus.ensure_stream(
        subjects.STREAM_TRACES,
        [subjects.trace_filter()],
        max_age=TRACES_MAX_AGE_S,
        max_bytes=TRACES_MAX_BYTES,
        discard=DiscardPolicy.OLD,
    )
