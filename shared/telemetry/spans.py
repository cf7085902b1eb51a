"""Span helpers for the code that runs only while tracing is on (imports OpenTelemetry).

The context travels in the CloudEvents distributed-tracing extension: the
``traceparent`` and ``tracestate`` attributes of the envelope (W3C Trace Context
values), written by :func:`inject` and read by :func:`extract`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["SpanKind", "extract", "inject", "record_error", "set_attrs", "span"]

_PROPAGATOR = TraceContextTextMapPropagator()


def inject(carrier: MutableMapping[str, str], context: Context | None = None) -> None:
    """Write the current (or ``context``'s) span as ``traceparent``/``tracestate`` into ``carrier``."""
    _PROPAGATOR.inject(carrier, context=context)


def extract(extensions: Mapping[str, str]) -> Context | None:
    """The remote parent an envelope's extensions carry, or ``None`` when they carry none."""
    if "traceparent" not in extensions:
        return None
    ctx = _PROPAGATOR.extract(extensions)
    return ctx if trace_api.get_current_span(ctx).get_span_context().is_valid else None


def record_error(span_: Span, exc: BaseException | str, error_type: str | None = None) -> None:
    """Mark ``span_`` failed (``error.type``: the given type, a JidoError's type or the class name)."""
    span_.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
    kind = error_type or getattr(exc, "type", None) or type(exc).__name__
    span_.set_attribute("error.type", str(kind))


@contextmanager
def span(
    tracer: Tracer | None,
    name: str,
    *,
    context: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span | None]:
    """A current span around a block when ``tracer`` is set; nothing (``None``) when it is not.

    An exception leaving the block marks the span failed and goes on.
    """
    if tracer is None:
        yield None
        return
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attrs,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            record_error(current, exc)
            raise


def set_attrs(span_: Span | None, values: Mapping[str, Any]) -> None:
    """Set the attributes whose value is not ``None`` (nothing without a span)."""
    if span_ is None:
        return
    for key, value in values.items():
        if value is not None:
            span_.set_attribute(key, value)
