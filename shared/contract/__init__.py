"""The published contract of the bus, generated from the code that implements it.

:func:`build_asyncapi` returns the AsyncAPI 3.0 document of every channel,
message and request/reply pair (see :mod:`.asyncapi`), :func:`to_yaml` writes it
out; ``jidocode contract asyncapi`` prints it and ``docs/asyncapi.yaml`` is that
output. :data:`SIGNALS` and friends say who publishes and who acts on each event
that is not a request or a reply. Pure functions: no I/O.
"""

from __future__ import annotations

from ._routes import INPUT_RECEIVERS, NOT_JOURNALED, OUTPUT_SENDERS, SIGNALS, Route
from .asyncapi import ASYNCAPI_VERSION, build_asyncapi, message_key, to_yaml

__all__ = [
    "ASYNCAPI_VERSION",
    "INPUT_RECEIVERS",
    "NOT_JOURNALED",
    "OUTPUT_SENDERS",
    "SIGNALS",
    "Route",
    "build_asyncapi",
    "message_key",
    "to_yaml",
]
