"""How the egress proxy turns a host name into addresses: the system's resolver, or a table.

A :data:`Resolver` is called once per connection; the proxy checks every address it returns
and then connects to one of those same addresses (never resolving the name again), so a name
that changes its answer between the check and the connection (DNS rebinding) gains nothing.

``JIDO_EGRESS_HOSTS`` (``name=address,name=address``) puts a table in front of the system's
resolver, for the runtime only (``/etc/hosts`` is never touched): the tests map a name of their
own to their local server with it, and an operator can pin a mirror's address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

__all__ = ["HOSTS_ENV", "Resolver", "parse_hosts", "system_resolver", "table_resolver"]

#: A host name and port -> the addresses to try, in order (``OSError`` when it does not resolve).
Resolver = Callable[[str, int], Awaitable[list[str]]]

HOSTS_ENV: Final = "JIDO_EGRESS_HOSTS"


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system's resolver (IPv4 and IPv6, duplicates dropped)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in out:
            out.append(address)
    return out


def table_resolver(table: Mapping[str, str], fallback: Resolver = system_resolver) -> Resolver:
    """A resolver answering the names of ``table`` itself (lower-case names) and asking
    ``fallback`` for the others."""
    pinned = {name.lower().rstrip("."): address for name, address in table.items()}

    async def resolve(host: str, port: int) -> list[str]:
        address = pinned.get(host.lower().rstrip("."))
        return [address] if address is not None else await fallback(host, port)

    return resolve


def parse_hosts(text: str) -> dict[str, str]:
    """``name=address,name=address`` as a table; :class:`ValueError` naming a bad pair."""
    table: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, address = pair.partition("=")
        try:
            ipaddress.ip_address(address.strip())
        except ValueError:
            raise ValueError(f"{HOSTS_ENV}: {pair!r} is not name=address") from None
        if not sep or not name.strip():
            raise ValueError(f"{HOSTS_ENV}: {pair!r} is not name=address")
        table[name.strip().lower()] = address.strip()
    return table
