"""The runtime's own endpoints: what every egress proxy refuses whatever the rules say.

A sandboxed program must never reach the bus (it would speak for the services) nor the gateway:
:func:`runtime_endpoints` lists the addresses and ports of the NATS servers of
``config.nats_url`` and the gateway's ``JIDO_GATEWAY_PORT`` on those addresses. The tool
runner's proxy and the PRD service's proxy are both given this list (docs/network.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from jidocode.shared.config import Config

from ._resolver import Resolver

__all__ = ["runtime_endpoints"]


async def runtime_endpoints(
    config: Config, resolver: Resolver, environ: Mapping[str, str] | None = None
) -> list[tuple[str, int]]:
    """The addresses and ports of the NATS servers (and of the gateway on them)."""
    env = os.environ if environ is None else environ
    gateway = env.get("JIDO_GATEWAY_PORT", "")
    out: list[tuple[str, int]] = []
    for url in filter(None, (u.strip() for u in config.nats_url.split(","))):
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        try:
            addresses = await resolver(host, port)
        except OSError:
            addresses = []
        for address in addresses:
            out.append((address, port))
            if gateway.isdigit():
                out.append((address, int(gateway)))
    return out
