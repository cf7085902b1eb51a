"""Pin the public surface of ``jidocode.shared.egress`` (add deliberately, remove never silently)."""

from __future__ import annotations

import jidocode.shared.egress as egress

SURFACE = {
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
}


def test_the_egress_surface() -> None:
    assert set(egress.__all__) == SURFACE and len(egress.__all__) == len(SURFACE)
    assert all(hasattr(egress, name) for name in SURFACE)
