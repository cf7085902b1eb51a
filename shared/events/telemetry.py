"""Telemetry events: the finished spans a service publishes while tracing is on.

Published on ``subjects.trace(<p>, <c>, <trace id>)`` (``jido.trace.…``), not on
a signal subject: the subject carries the trace id, so ``jidocode trace`` reads
one trace from the ``JIDO_TRACES`` stream with a subject filter. A batch holds
spans of one trace only, ended by one service shortly one after another.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import EventModel

__all__ = ["EVENTS", "SpanRecord", "TraceSpans"]

#: A span attribute's value as OpenTelemetry allows it (lists of one scalar type included).
AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]


class SpanRecord(BaseModel):
    """One finished span: ids (lowercase hex as in ``traceparent``), name, service, times in ns."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    trace_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    span_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    parent_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")
    name: str = Field(max_length=256)
    #: The service that ended it (``engine``, ``conversation`` … or ``client``).
    service: str = Field(max_length=64)
    kind: Literal["internal", "server", "client", "producer", "consumer"] = "internal"
    start_ns: int = Field(ge=0)
    end_ns: int = Field(ge=0)
    status: Literal["unset", "ok", "error"] = "unset"
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


class TraceSpans(EventModel):
    """Finished spans of one trace, from one service (``jido.trace.<p>.<c>.<trace id>``)."""

    channel: ClassVar[str] = "trace"
    type: Literal["trace.spans"] = "trace.spans"
    spans: list[SpanRecord] = Field(min_length=1, max_length=512)


EVENTS: tuple[type[EventModel], ...] = (TraceSpans,)
