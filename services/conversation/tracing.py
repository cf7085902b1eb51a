"""Turns, model calls, tool calls and journal writes of one conversation, as spans and metrics.

One trace per user message: :meth:`TurnTraces.begin` opens a ``conversation.turn``
span when a user message arrives on the conversation's input, as a child of the
span its envelope carries (``traceparent``: the ``send_event`` request's server
span, itself the child of the client's send). Everything the actor does for that
message shares its correlation id, so the model calls, tool calls and journal
writes of the turn are made children of the turn through it, and the tool
runner's spans follow through the request's ``traceparent``. The turn ends at the
first journaled entry that closes it (:func:`turn_outcome`).

The turn latency, model latency and tokens, queue depths and overflows are
Prometheus metrics, recorded whether tracing is on or not. With tracing off
every span helper here is a test of ``None``.

Limits: at most :data:`MAX_OPEN_TURNS` turns are followed at once per
conversation; past that the oldest is ended with outcome ``untracked``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import (
    Cancel,
    LlmCompleted,
    LlmFailed,
    LoopStopped,
    QueueOverflow,
    UserMessage,
)
from jidocode.shared.telemetry import ATTR_CONVERSATION, ATTR_PROJECT, metrics

from .core import Signal
from .ports import LlmRequest, LlmResult

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["MAX_OPEN_TURNS", "LlmCall", "TurnTraces", "turn_outcome"]

MAX_OPEN_TURNS: Final = 64


def turn_outcome(entry: Signal) -> str | None:
    """How ``entry`` ends its turn (``answered``, ``failed``, ``stopped``, ``cancelled``), or ``None``."""
    if entry.type == LlmCompleted.TYPE:
        return None if entry.data.get("tool_calls") else "answered"
    if entry.type == LlmFailed.TYPE:
        return "failed"
    if entry.type == LoopStopped.TYPE:
        return "stopped"
    if entry.type == Cancel.TYPE:
        return "cancelled"
    return None


class _Turn:
    __slots__ = ("context", "span", "started")

    def __init__(self, started: float, span: Span | None, context: Context | None) -> None:
        self.started = started
        self.span = span
        self.context = context


class LlmCall:
    """What a model call reports when it ends (its span, when tracing is on, and the metrics)."""

    def __init__(self, span: Span | None, model: str) -> None:
        self.span = span
        self.model = model
        self.started = time.perf_counter()

    def completed(self, result: LlmResult) -> None:
        model = result.model or self.model
        usage = result.usage
        metrics.LLM_DURATION.labels(model, "completed").observe(time.perf_counter() - self.started)
        metrics.LLM_TOKENS.labels(model, "input").inc(usage.prompt_tokens)
        metrics.LLM_TOKENS.labels(model, "output").inc(usage.completion_tokens)
        if self.span is not None:
            self.span.set_attribute("gen_ai.response.model", model)
            self.span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
            self.span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            if result.finish_reason:
                self.span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
            self.span.set_attribute("jido.tool_calls", len(result.tool_calls))

    def failed(self, error_type: str, message: str) -> None:
        metrics.LLM_DURATION.labels(self.model, "failed").observe(time.perf_counter() - self.started)
        if self.span is not None:
            from jidocode.shared.telemetry.spans import record_error

            record_error(self.span, message, error_type)


class TurnTraces:
    """The open turns of one conversation, by correlation id."""

    def __init__(self, tracer: Tracer | None, project_id: str, conversation_id: str) -> None:
        self.tracer = tracer
        self.project_id = project_id
        self.conversation_id = conversation_id
        self._turns: OrderedDict[str, _Turn] = OrderedDict()

    def _attrs(self) -> dict[str, Any]:
        return {ATTR_PROJECT: self.project_id, ATTR_CONVERSATION: self.conversation_id}

    def __len__(self) -> int:
        return len(self._turns)

    def begin(self, signal: Signal, env: Envelope | None) -> None:
        """A user message arrived: its turn starts now (a copy of one already open changes nothing)."""
        if signal.type != UserMessage.TYPE or signal.correlation_id in self._turns:
            return
        span = context = None
        if self.tracer is not None:
            from opentelemetry.trace import set_span_in_context

            from jidocode.shared.telemetry.spans import extract

            parent = extract(env.extensions) if env is not None else None
            attrs = {**self._attrs(), "jido.correlation_id": signal.correlation_id}
            span = self.tracer.start_span("conversation.turn", context=parent, attributes=attrs)
            context = set_span_in_context(span)
        self._turns[signal.correlation_id] = _Turn(time.perf_counter(), span, context)
        while len(self._turns) > MAX_OPEN_TURNS:
            _, oldest = self._turns.popitem(last=False)
            self._end(oldest, "untracked")

    def context(self, correlation_id: str) -> Context | None:
        turn = self._turns.get(correlation_id)
        return turn.context if turn is not None else None

    @contextmanager
    def within(self, correlation_id: str) -> Iterator[None]:
        """Make the turn of ``correlation_id`` the current span for the block (a directive's task)."""
        ctx = self.context(correlation_id) if self.tracer is not None else None
        if ctx is None:
            yield
            return
        from opentelemetry import context as otel_context

        token = otel_context.attach(ctx)
        try:
            yield
        finally:
            otel_context.detach(token)

    @contextmanager
    def llm_call(self, request: LlmRequest) -> Iterator[LlmCall]:
        """A model call of the turn: a ``chat <model>`` span (GenAI conventions) and the metrics."""
        model = str(request.settings.get("model") or "")
        if self.tracer is None:
            yield LlmCall(None, model)
            return
        from jidocode.shared.telemetry.spans import SpanKind, span

        attrs = {
            **self._attrs(),
            "gen_ai.operation.name": "chat",
            "gen_ai.system": model.split("/", 1)[0] if "/" in model else None,
            "gen_ai.request.model": model,
            "gen_ai.request.temperature": request.settings.get("temperature"),
            "jido.request_id": request.request_id,
            "jido.messages": len(request.messages),
            "jido.tools_offered": len(request.tools),
        }
        ctx = self.context(request.correlation_id)
        with span(self.tracer, f"chat {model}", context=ctx, kind=SpanKind.CLIENT, attributes=attrs) as sp:
            yield LlmCall(sp, model)

    @contextmanager
    def tool_call(
        self, correlation_id: str, name: str, call_id: str, request_id: str
    ) -> Iterator[Span | None]:
        """A tool call of the turn, as the conversation sees it (the tool runner adds its own span)."""
        if self.tracer is None:
            yield None
            return
        from jidocode.shared.telemetry.spans import span

        attrs = {
            **self._attrs(),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "jido.request_id": request_id,
        }
        ctx = self.context(correlation_id)
        with span(self.tracer, f"execute_tool {name}", context=ctx, attributes=attrs) as sp:
            yield sp

    @contextmanager
    def journal_write(self, entries: Sequence[Signal]) -> Iterator[None]:
        """A JetStream journal append of ``entries``, in the turn of the first of them."""
        if self.tracer is None or not entries:
            yield
            return
        from jidocode.shared.telemetry.spans import SpanKind, span

        attrs = {
            **self._attrs(),
            "messaging.system": "nats",
            "messaging.operation.type": "publish",
            "messaging.batch.message_count": len(entries),
            "jido.event_types": sorted({e.type for e in entries}),
        }
        ctx = self.context(entries[0].correlation_id)
        with span(self.tracer, "journal append", context=ctx, kind=SpanKind.PRODUCER, attributes=attrs):
            yield

    def observe(self, entries: Sequence[Signal], queue_size: int | None = None) -> None:
        """Journaled ``entries``: count overflows, end the turns they close."""
        for entry in entries:
            if entry.type == QueueOverflow.TYPE:
                metrics.QUEUE_OVERFLOWS.inc()
            outcome = turn_outcome(entry)
            if outcome is not None:
                turn = self._turns.pop(entry.correlation_id, None)
                if turn is not None:
                    self._end(turn, outcome)
        if queue_size is not None:
            metrics.QUEUE_DEPTH.observe(queue_size)

    def _end(self, turn: _Turn, outcome: str) -> None:
        metrics.TURN_DURATION.labels(outcome).observe(time.perf_counter() - turn.started)
        if turn.span is not None:
            turn.span.set_attribute("jido.outcome", outcome)
            if outcome in ("failed", "stopped"):
                from jidocode.shared.telemetry.spans import record_error

                record_error(turn.span, f"the turn ended {outcome}", outcome)
            turn.span.end()

    def close(self) -> None:
        """The actor goes: the turns still open end as ``released``."""
        turns, self._turns = self._turns, OrderedDict()
        for turn in turns.values():
            self._end(turn, "released")
