"""Observability of every service: traces, metrics and structured logs.

This package is light (what the bus and every command import): whether tracing
is on and a tracer per bus connection (:mod:`._switch`), the log formatters
(:mod:`._logging`). What runs only while tracing is on, or only in a service,
is in its own module, imported there:

* :mod:`.spans`: spans around blocks, the trace context on the envelope;
* :mod:`.export`: finished spans onto the bus (``jido.trace.…``) for ``jidocode trace``;
* :mod:`.metrics`: the Prometheus metrics, one registry per process, served on a port.

See ``docs/observability.md``.
"""

from ._logging import JsonFormatter, TextFormatter, log_format, log_scope, make_formatter, set_log_scope
from ._switch import (
    ATTR_CONVERSATION,
    ATTR_PROJECT,
    ATTR_SERVICE,
    Exporter,
    config_from_env,
    enabled,
    flush,
    install,
    reset,
    setup_from_env,
    tracer,
)

__all__ = [
    "ATTR_CONVERSATION",
    "ATTR_PROJECT",
    "ATTR_SERVICE",
    "Exporter",
    "JsonFormatter",
    "TextFormatter",
    "config_from_env",
    "enabled",
    "flush",
    "install",
    "log_format",
    "log_scope",
    "make_formatter",
    "reset",
    "set_log_scope",
    "setup_from_env",
    "tracer",
]
