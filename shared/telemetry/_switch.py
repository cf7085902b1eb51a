"""Whether tracing is on in this process, and a tracer per bus connection.

Light on purpose (no OpenTelemetry import until tracing is on): the bus, the
endpoint middleware and every CLI command import it.

**On or off** is decided once per process, from the standard variables
(:func:`config_from_env`), or by :func:`install` (tests, benchmarks):

* ``OTEL_SDK_DISABLED=true`` → off, whatever else is set;
* ``OTEL_TRACES_EXPORTER`` (comma-separated ``otlp``, ``console``, ``jido``;
  ``none`` alone → off) → on with those exporters;
* else on with ``otlp`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, off otherwise.

``jido`` means the bus only: when tracing is on, every service also publishes
its finished spans on ``jido.trace.<p>.<c>.<trace id>`` (:mod:`.export`), which is
what ``jidocode trace`` reads; no collector is needed for that.

**Off costs a test of ``None``**: :func:`tracer` returns ``None``, and the bus,
the endpoint middleware and the spans in the services check that before doing
anything else: no SDK object is made, no SDK module is even imported.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer

__all__ = [
    "ATTR_CONVERSATION",
    "ATTR_PROJECT",
    "ATTR_SERVICE",
    "Exporter",
    "config_from_env",
    "enabled",
    "flush",
    "install",
    "reset",
    "setup_from_env",
    "tracer",
]

log = logging.getLogger("jidocode.telemetry")

Exporter = Literal["otlp", "console", "jido"]
_EXPORTERS: tuple[Exporter, ...] = ("otlp", "console", "jido")

#: Span attributes naming the project and conversation a span works for.
ATTR_PROJECT = "jido.project_id"
ATTR_CONVERSATION = "jido.conversation_id"
#: The JidoCode service that made a span (also in ``service.name`` of its resource).
ATTR_SERVICE = "jido.service"


class _State:
    """The process's tracing: ``processors is None`` = off."""

    processors: list[SpanProcessor] | None = None
    configured = False
    providers: list[TracerProvider] = []


_state = _State()


def config_from_env(env: Mapping[str, str] | None = None) -> tuple[Exporter, ...] | None:
    """The exporters the ``OTEL_*`` variables ask for, or ``None`` for off.

    Raises ``ValueError`` naming an unknown ``OTEL_TRACES_EXPORTER`` value.
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if named:
        values = [v.strip().lower() for v in named.split(",") if v.strip()]
        if values == ["none"]:
            return None
        unknown = [v for v in values if v not in _EXPORTERS]
        if unknown:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}: "
                f"JidoCode knows {', '.join(_EXPORTERS)} (or none)"
            )
        return tuple(v for v in _EXPORTERS if v in values)
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return ("otlp",)
    return None


def setup_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on as the environment says (once per process; later calls do nothing).

    Returns whether tracing is on.
    """
    if _state.configured:
        return _state.processors is not None
    exporters = config_from_env(env)
    _state.configured = True
    if exporters is None:
        return False
    processors: list[SpanProcessor] = []
    if "otlp" in exporters:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
    if "console" in exporters:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    _state.processors = processors
    # A short-lived process (a CLI command, an SDK script) would lose the spans still queued
    # for the exporter: they are exported when it exits.
    atexit.register(flush, 5_000)
    log.info("tracing on (%s)", ", ".join(exporters))
    return True


def install(processors: Sequence[SpanProcessor] = ()) -> None:
    """Turn tracing on in this process with these processors (plus the bus export of each
    bus made from now on). For tests and benchmarks: an in-memory exporter, a test receiver."""
    _state.processors = list(processors)
    _state.configured = True


def reset() -> None:
    """Tracing off again; the providers made so far are flushed and shut down."""
    for provider in _state.providers:
        provider.force_flush()
        provider.shutdown()
    _state.providers = []
    _state.processors = None
    _state.configured = False


def flush(timeout_millis: int = 30_000) -> bool:
    """Export what every provider of this process holds (blocks: call it off the event loop
    when an exporter may need the loop). Whether all finished in time."""
    return all(p.force_flush(timeout_millis) for p in list(_state.providers))


def enabled() -> bool:
    return _state.processors is not None


def tracer(service: str, *, instance: str = "", extra: Sequence[SpanProcessor] = ()) -> Tracer | None:
    """A tracer whose spans name ``service``, or ``None`` when tracing is off.

    One provider per call (a bus connection): its resource is the service's, so
    services sharing a process (tests, ``--services inline``) still tell their spans
    apart; ``extra`` processors (the bus export) belong to this provider alone.
    """
    if _state.processors is None:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    attrs: dict[str, Any] = {"service.name": f"jidocode-{service}", "service.namespace": "jidocode"}
    if instance:
        attrs["service.instance.id"] = instance
    provider = TracerProvider(resource=Resource.create(attrs), shutdown_on_exit=False)
    for processor in (*_state.processors, *extra):
        provider.add_span_processor(processor)
    _state.providers.append(provider)
    return provider.get_tracer("jidocode")
