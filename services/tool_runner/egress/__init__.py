"""The egress proxy: the one way out of the sandbox to the network, under the project's rules.

- :mod:`.proxy`: :class:`EgressProxy` (unix socket + loopback TCP port, one per replica)
- :mod:`.scope`: :class:`CallScope` (whose connection it is) and :class:`Pass` (its token, URL, env)
- :mod:`.admission`: :func:`admit`, the decision of one connection (rules, ask, addresses)
- :mod:`.resolver`: the system resolver, and a table in front of it (``JIDO_EGRESS_HOSTS``)
- :mod:`.wire`: request heads and the proxy's own answers

``docs/network.md`` says what is allowed and why; the rules themselves are pure and live in
:mod:`jidocode.shared.policy.domains` and :mod:`jidocode.shared.policy.network`.
"""

from __future__ import annotations

from .admission import Admission, admit
from .proxy import EgressProxy, EventSink
from .resolver import HOSTS_ENV, Resolver, parse_hosts, system_resolver, table_resolver
from .scope import PROXY_USER, Asker, CallScope, Pass

__all__ = [
    "HOSTS_ENV",
    "PROXY_USER",
    "Admission",
    "Asker",
    "CallScope",
    "EgressProxy",
    "EventSink",
    "Pass",
    "Resolver",
    "admit",
    "parse_hosts",
    "system_resolver",
    "table_resolver",
]
