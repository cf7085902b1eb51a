"""Whether one connection may be made: the host by the rules, its addresses after resolution.

:func:`admit` is the whole decision of the proxy for one ``CONNECT`` or request (the web_fetch
tool goes through the proxy too, so it is the same decision): the host name by the project's
rules (deny beats ask beats allow; :mod:`jidocode.shared.policy.network`), an ``ask`` put to
the call's user, then the name resolved **once** and every address checked
(:func:`~jidocode.shared.policy.domains.address_refusal`); the proxy then connects to one of
those checked addresses, never to the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from jidocode.shared.policy import Effect
from jidocode.shared.policy.domains import address_refusal, normalize_host
from jidocode.shared.policy.network import allowed_entries, denied_entries, host_decision

from ._resolver import Resolver
from ._scope import CallScope

__all__ = ["Admission", "admit"]

#: How long a name may take to resolve.
RESOLVE_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class Admission:
    """The outcome for one destination: allowed (with the checked addresses to try) or why not."""

    allowed: bool
    reason: str
    host: str
    addresses: tuple[str, ...] = ()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _no(host: str, reason: str) -> Admission:
    return Admission(allowed=False, reason=reason, host=host)


async def _by_rules(scope: CallScope, host: str, port: int) -> Admission | None:
    """``None`` when the rules let ``host`` through (allowed, or asked and approved)."""
    decision = host_decision(scope.effective_policy, host)
    if decision.effect is Effect.DENY:
        return _no(host, decision.reason)
    if decision.effect is Effect.ASK and host not in scope.approved_hosts:
        if scope.ask is None:
            return _no(host, f"needs approval, but the call has no conversation to ask: {decision.reason}")
        if not await scope.ask(host, port, decision):
            return _no(host, f"the user did not approve it: {decision.reason}")
    return None


async def _resolve(host: str, port: int, resolver: Resolver) -> list[str] | str:
    try:
        addresses = await asyncio.wait_for(resolver(host, port), RESOLVE_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return f"{host} does not resolve: {exc or 'timed out'}"
    return addresses or f"{host} resolves to no address"


async def admit(
    scope: CallScope,
    host: str,
    port: int,
    *,
    resolver: Resolver,
    runtime: Iterable[tuple[str, int]] = (),
) -> Admission:
    """Decide the connection of ``scope``'s call to ``host``:``port`` (see the module doc)."""
    name = normalize_host(host)
    if name is None:
        return _no(host, f"{host!r} is not a valid host name or address")
    if not 0 < port < 65536:
        return _no(name, f"port {port} is not a TCP port")
    if scope.destinations and (name, port) not in scope.destinations:
        only = ", ".join(f"{h}:{p}" for h, p in sorted(scope.destinations))
        return _no(name, f"this call may reach only {only}")
    refused = await _by_rules(scope, name, port)
    if refused is not None:
        return refused
    literal = _is_address(name)
    addresses = [name] if literal else await _resolve(name, port, resolver)
    if isinstance(addresses, str):
        return _no(name, addresses)
    policy = scope.effective_policy
    allowed, denied = [*allowed_entries(policy), *scope.networks], denied_entries(policy)
    runtime = tuple(runtime)
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return _no(name, f"{name} resolves to {address!r}, not an address")
        why = address_refusal(ip, port, allowed=allowed, denied=denied, runtime=runtime)
        if why is not None:
            return _no(name, f"{name} resolves to {address}: {why}")
    return Admission(allowed=True, reason="allowed", host=name, addresses=tuple(addresses))
