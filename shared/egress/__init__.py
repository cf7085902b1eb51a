"""The egress proxy: the one way out of the sandbox to the network, under the project's rules.

- :mod:`._proxy`: :class:`EgressProxy` (unix socket + loopback TCP port, one per replica)
- :mod:`._scope`: :class:`CallScope` (whose connection it is) and :class:`Pass` (its token, URL, env)
- :mod:`._admission`: :func:`admit`, the decision of one connection (rules, ask, addresses)
- :mod:`._opener`: :class:`LazyProxy` (started on first use) and :func:`domains_opener` (passes
  of one process that may reach named domains: a PRD provider CLI's API hosts)
- :mod:`._resolver`: the system resolver, and a table in front of it (``JIDO_EGRESS_HOSTS``)
- :mod:`._runtime`: :func:`runtime_endpoints`, the runtime's own endpoints (NATS, the gateway),
  refused by every proxy
- :mod:`._wire`: request heads and the proxy's own answers

``docs/network.md`` says what is allowed and why; the rules themselves are pure and live in
:mod:`jidocode.shared.policy.domains` and :mod:`jidocode.shared.policy.network`.
"""

from __future__ import annotations

from ._admission import Admission, admit
from ._opener import DomainsOpener, LazyProxy, domains_opener
from ._proxy import EgressProxy, EventSink
from ._resolver import HOSTS_ENV, Resolver, parse_hosts, system_resolver, table_resolver
from ._runtime import runtime_endpoints
from ._scope import PROXY_USER, Asker, CallScope, Pass
from ._wire import REFUSED_HEADER

__all__ = [
    "HOSTS_ENV",
    "PROXY_USER",
    "REFUSED_HEADER",
    "Admission",
    "Asker",
    "CallScope",
    "DomainsOpener",
    "EgressProxy",
    "EventSink",
    "LazyProxy",
    "Pass",
    "Resolver",
    "admit",
    "domains_opener",
    "parse_hosts",
    "runtime_endpoints",
    "system_resolver",
    "table_resolver",
]
