"""Prometheus metrics of every service: one registry per process, labelled by service.

Every metric is defined here, once, on :data:`REGISTRY` (names ``jido_…``); the
services only increment them. Collecting costs a lock and an addition, so they
are always collected; they are served over HTTP only when a port is configured
(:func:`serve_from_env`, :func:`serve`):

* ``JIDO_METRICS_PORT_<SERVICE>`` (``JIDO_METRICS_PORT_TOOL_RUNNER=9467``): that service's port;
* else ``JIDO_METRICS_PORT`` is a base: each service adds its place in
  :data:`METRICS_SERVICES` (engine +0, project +1, conversation +2, tool_runner +3,
  asset_loader +4, then the front ends: gateway +5, then prd +6), so the processes of one ``jidocode up``
  never collide;
* neither set: not served.

Services that share a process (tests, ``bench/turn.py --services inline``) share
the registry and one server; the ``service`` label tells them apart.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from jidocode.shared.subjects import SERVICE_NAMES

__all__ = [
    "APPROVAL_WAIT",
    "ASSET_RELOADS",
    "CONVERSATIONS_OWNED",
    "JS_PUBLISH_RETRIES",
    "LLM_DURATION",
    "LLM_TOKENS",
    "METRICS_SERVICES",
    "QUEUE_DEPTH",
    "QUEUE_OVERFLOWS",
    "REGISTRY",
    "REQUESTS",
    "REQUEST_DURATION",
    "REQUEST_ERRORS",
    "TOOL_CALLS",
    "TOOL_DURATION",
    "TURN_DURATION",
    "metrics_port",
    "serve",
    "serve_from_env",
]

log = logging.getLogger("jidocode.telemetry")

REGISTRY: Final = CollectorRegistry()

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_WAITS = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)

REQUESTS: Final = Counter(
    "jido_requests", "Requests answered per endpoint", ("service", "endpoint"), registry=REGISTRY
)
REQUEST_ERRORS: Final = Counter(
    "jido_request_errors",
    "Requests answered with an error, per endpoint and error type",
    ("service", "endpoint", "error_type"),
    registry=REGISTRY,
)
REQUEST_DURATION: Final = Histogram(
    "jido_request_duration_seconds",
    "Time to answer a request, per endpoint",
    ("service", "endpoint"),
    buckets=_LATENCY,
    registry=REGISTRY,
)
TURN_DURATION: Final = Histogram(
    "jido_turn_duration_seconds",
    "A user message to the end of its turn (answer, failure, stop, cancel)",
    ("outcome",),
    buckets=_LATENCY,
    registry=REGISTRY,
)
LLM_DURATION: Final = Histogram(
    "jido_llm_duration_seconds",
    "One model call (its retries included), per model and outcome",
    ("model", "outcome"),
    buckets=_LATENCY,
    registry=REGISTRY,
)
LLM_TOKENS: Final = Counter(
    "jido_llm_tokens",
    "Tokens of model calls, per model and direction (input/output)",
    ("model", "direction"),
    registry=REGISTRY,
)
TOOL_CALLS: Final = Counter(
    "jido_tool_calls",
    "Tool calls, per tool, policy decision (allow/ask/deny) and outcome (completed/failed/denied …)",
    ("tool", "decision", "outcome"),
    registry=REGISTRY,
)
TOOL_DURATION: Final = Histogram(
    "jido_tool_duration_seconds",
    "One tool call in the tool runner, per tool",
    ("tool",),
    buckets=_LATENCY,
    registry=REGISTRY,
)
APPROVAL_WAIT: Final = Histogram(
    "jido_approval_wait_seconds",
    "Time a tool call waited for a human's answer, per outcome (approved/denied/expired)",
    ("outcome",),
    buckets=_WAITS,
    registry=REGISTRY,
)
QUEUE_DEPTH: Final = Histogram(
    "jido_conversation_queue_depth",
    "Signals queued in a conversation after each step of its actor",
    buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
QUEUE_OVERFLOWS: Final = Counter(
    "jido_conversation_queue_overflows", "Signals dropped at a full conversation queue", registry=REGISTRY
)
CONVERSATIONS_OWNED: Final = Gauge(
    "jido_conversations_owned",
    "Conversations this replica owns (holds the lease of)",
    ("instance",),
    registry=REGISTRY,
)
JS_PUBLISH_RETRIES: Final = Counter(
    "jido_jetstream_publish_retries",
    "JetStream publishes retried after a timeout or a missing stream, per service",
    ("service",),
    registry=REGISTRY,
)
ASSET_RELOADS: Final = Counter(
    "jido_asset_reloads", "Asset loads and reloads of a project, per trigger", ("trigger",), registry=REGISTRY
)


class _Served:
    port: int | None = None


_served = _Served()

#: Every process that may serve metrics, in port-offset order: the nats.micro services, then the
#: front ends that answer no requests on the bus (the HTTP gateway).
METRICS_SERVICES: Final[tuple[str, ...]] = (
    *(name for name in SERVICE_NAMES if name != "prd"),
    "gateway",
    "prd",
)


def metrics_port(service: str, env: Mapping[str, str] | None = None) -> int | None:
    """The port ``service`` serves its metrics on, or ``None`` (not served).

    Raises ``ValueError`` naming the variable whose value is not a port (0 … 65535).
    """
    env = os.environ if env is None else env
    if service not in METRICS_SERVICES:
        raise ValueError(f"unknown service {service!r}: expected one of {sorted(METRICS_SERVICES)}")
    own = f"JIDO_METRICS_PORT_{service.upper()}"
    if env.get(own, "").strip():
        return _port(own, env[own], 0)
    if env.get("JIDO_METRICS_PORT", "").strip():
        offset = METRICS_SERVICES.index(service)
        return _port("JIDO_METRICS_PORT", env["JIDO_METRICS_PORT"], offset)
    return None


def _port(name: str, raw: str, offset: int) -> int:
    try:
        base = int(raw.strip())
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a port number") from None
    if not 0 <= base <= 65535 or base + offset > 65535 or (base == 0 and offset):
        raise ValueError(
            f"{name}={raw!r} is out of range: a port is 1 … 65535"
            + (f" (this service adds {offset} to it)" if offset else " (0 = any free port)")
        )
    return base + offset


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve :data:`REGISTRY` on ``port`` (0 = a free one) once per process; returns the port."""
    if _served.port is not None:
        return _served.port
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    _served.port = int(server.server_port)
    log.info("metrics on http://%s:%d/metrics", addr, _served.port)
    return _served.port


def serve_from_env(service: str, env: Mapping[str, str] | None = None) -> int | None:
    """Serve the metrics when the environment gives ``service`` a port; returns the port."""
    port = metrics_port(service, env)
    if port is None:
        return None
    addr = (os.environ if env is None else env).get("JIDO_METRICS_ADDR", "0.0.0.0")
    return serve(port, addr)
