"""One tool call as a span and as metrics: tool, decision, sandbox, duration, exit code, outcome.

:func:`call_span` wraps a call's run in the pipeline (a ``tool <name>`` span,
child of the ``tools.run`` request's server span, when tracing is on); the steps
that learn something about the call note it with :func:`note` (the decision
once authorized, the sandbox once chosen) through a context variable, so the
pipeline's signatures stay as they are. :func:`approval_wait` times a human's
answer (``approval wait`` span, ``jido_approval_wait_seconds``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.telemetry import ATTR_CONVERSATION, ATTR_PROJECT, metrics

from .call import Call

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["ApprovalWait", "CallReport", "approval_wait", "call_span", "note"]


class CallReport:
    """What the pipeline learned about one call."""

    __slots__ = ("decision", "name", "sandbox", "span", "started")

    def __init__(self, name: str, span: Span | None) -> None:
        self.name = name
        self.span = span
        self.decision = "none"
        self.sandbox: str | None = None
        self.started = time.perf_counter()

    def finish(self, result: ToolResult) -> None:
        elapsed = time.perf_counter() - self.started
        outcome = "completed" if result.ok else (result.error.type if result.error else "failed")
        metrics.TOOL_CALLS.labels(self.name, self.decision, outcome).inc()
        metrics.TOOL_DURATION.labels(self.name).observe(elapsed)
        if self.span is None:
            return
        attrs: dict[str, Any] = {"jido.decision": self.decision, "jido.outcome": outcome}
        if self.sandbox is not None:
            attrs["jido.sandbox"] = self.sandbox
        data = result.data
        if isinstance(data, dict) and isinstance(data.get("exit_code"), int):
            attrs["process.exit.code"] = data["exit_code"]
        self.span.set_attributes(attrs)
        if not result.ok:
            from jidocode.shared.telemetry.spans import record_error

            record_error(self.span, result.error.message if result.error else outcome, outcome)


_CURRENT: contextvars.ContextVar[CallReport | None] = contextvars.ContextVar("jido_tool_call", default=None)


def note(*, decision: str | None = None, sandbox: str | None = None) -> None:
    """Record what a step learned about the current call (nothing outside :func:`call_span`)."""
    report = _CURRENT.get()
    if report is None:
        return
    if decision is not None:
        report.decision = decision
    if sandbox is not None:
        report.sandbox = sandbox


@contextmanager
def call_span(bus: Bus, call: Call) -> Iterator[CallReport]:
    """The run of ``call``: its span (tracing on) and its metrics once :meth:`CallReport.finish` is called."""
    if bus.tracer is None:
        report = CallReport(call.name, None)
        token = _CURRENT.set(report)
        try:
            yield report
        finally:
            _CURRENT.reset(token)
        return
    from jidocode.shared.telemetry.spans import span

    attrs = {
        ATTR_PROJECT: call.project_id,
        ATTR_CONVERSATION: call.conversation_id,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "jido.request_id": call.request_id,
    }
    with span(bus.tracer, f"tool {call.name}", attributes=attrs) as sp:
        report = CallReport(call.name, sp)
        token = _CURRENT.set(report)
        try:
            yield report
        finally:
            _CURRENT.reset(token)


class ApprovalWait:
    """A wait for a human's answer; :meth:`answered` records how it ended."""

    def __init__(self, span: Span | None) -> None:
        self.span = span
        self.started = time.perf_counter()

    def answered(self, answer: str) -> None:
        metrics.APPROVAL_WAIT.labels(answer).observe(time.perf_counter() - self.started)
        if self.span is not None:
            self.span.set_attribute("jido.approval", answer)


@contextmanager
def approval_wait(bus: Bus, call: Call) -> Iterator[ApprovalWait]:
    """The wait for the approval of ``call``."""
    if bus.tracer is None:
        yield ApprovalWait(None)
        return
    from jidocode.shared.telemetry.spans import span

    attrs = {
        ATTR_PROJECT: call.project_id,
        ATTR_CONVERSATION: call.conversation_id,
        "gen_ai.tool.name": call.name,
    }
    with span(bus.tracer, "approval wait", attributes=attrs) as sp:
        yield ApprovalWait(sp)
