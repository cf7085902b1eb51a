"""The PRD service's egress proxy: the one way out for a provider CLI whose ``use_login`` is on.

One per PRD replica, started the first time such a CLI runs (:func:`login_proxy`); each run
gets a pass that allows the provider's declared domains and nothing else
(:func:`login_opener`, the ``egress`` of its :class:`~.providers.base.ProviderContext`), the
user's ``sandbox.denied_domains`` still winning. Its decisions are ``tool.network`` signals
named ``prd/<provider>`` (docs/network.md, docs/prd-providers.md).

The same proxy carries ``prd finish --push`` to an HTTP remote (:class:`PushNetwork`, decision
0343): a pass that may reach the remote's host and port and nothing else, decided first
(before anything changes) by the same rules the proxy applies; its events are named
``prd/push/<prd>``.

Like the tool runner's, this proxy always refuses the runtime's own endpoints (the NATS
servers and the gateway, :func:`~jidocode.shared.egress.runtime_endpoints`), whatever a
provider declares or the user allows.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.egress import (
    HOSTS_ENV,
    CallScope,
    DomainsOpener,
    LazyProxy,
    admit,
    domains_opener,
    parse_hosts,
    runtime_endpoints,
    system_resolver,
    table_resolver,
)
from jidocode.shared.errors import JidoError, PermissionDenied
from jidocode.shared.events.tools import ToolNetwork
from jidocode.shared.policy import Policy
from jidocode.shared.policy.domains import parse_domain_pattern
from jidocode.shared.sandbox import Egress
from jidocode.shared.settings import load_settings, require_usable

from .gitpush import NetworkRemote

__all__ = ["PushNetwork", "login_opener", "login_proxy"]

log = logging.getLogger("jidocode.prd")


def login_proxy(bus: Bus, config: Config) -> LazyProxy:
    """The replica's proxy (not started yet), publishing its decisions on ``bus``; the runtime's
    own endpoints (the NATS servers of ``config`` and the gateway) refused, as by the tool
    runner's proxy."""

    async def publish(event: ToolNetwork, scope: CallScope) -> None:
        await bus.emit(event, project_id=scope.project_id)

    table = parse_hosts(os.environ.get(HOSTS_ENV, ""))
    resolver = table_resolver(table) if table else system_resolver

    async def runtime() -> list[tuple[str, int]]:
        return await runtime_endpoints(config, resolver)

    return LazyProxy(resolver=resolver, runtime_source=runtime, on_event=publish)


def login_opener(proxy: LazyProxy | None, project_id: str, config: Config) -> DomainsOpener | None:
    """Passes for ``project_id``'s provider CLIs; ``None`` (no network) without a proxy, or while
    the user's settings have an error (their denied entries could not be honoured). The IP and
    CIDR entries of the user's ``sandbox.allowed_domains`` let a provider's domains resolve to a
    private address of theirs (a company's gateway to the model API); they allow no host."""
    if proxy is None:
        return None
    home = config.jido_home
    try:
        sandbox = require_usable(
            load_settings(None, jido_home=home), refused="a provider's login network"
        ).sandbox
        policy = Policy.build(str(home), jido_home=str(home), denied_domains=sandbox.denied_domains)
        entries = (parse_domain_pattern(raw) for raw in sandbox.allowed_domains)
        networks = tuple(p for p in entries if p.kind == "network")
    except (JidoError, ValueError, OSError) as exc:
        log.warning("no network for provider logins of %s: %s", project_id, exc)
        return None
    return domains_opener(proxy, project_id=project_id, policy=policy, networks=networks)


@dataclass(frozen=True)
class PushNetwork:
    """What a push to an HTTP remote needs of the service: its proxy, the user's settings (under
    ``jido_home``) and its environment (where a token's variable is read)."""

    proxy: LazyProxy
    jido_home: Path
    env: Mapping[str, str]

    async def scope(self, project_id: str, prd: str, remote: NetworkRemote) -> CallScope:
        """The pass's scope for a push of ``prd`` to ``remote``, refused now (``PermissionDenied``
        naming the host and why) when the proxy would refuse it: a denied or unresolvable host,
        an always-refused address, a private one no allowed entry names."""
        home = str(self.jido_home)
        try:
            sandbox = require_usable(load_settings(None, jido_home=self.jido_home), refused="a push").sandbox
            policy = Policy.build(
                home,
                jido_home=home,
                allowed_domains=sandbox.allowed_domains,
                denied_domains=sandbox.denied_domains,
            )
        except (JidoError, ValueError, OSError) as exc:
            reason = exc.message if isinstance(exc, JidoError) else str(exc)
            raise PermissionDenied(
                f"no network for a push to {remote.host}: {reason}", details={"host": remote.host}
            ) from None
        scope = CallScope(
            project_id=project_id,
            request_id=f"prd/push/{prd}",
            policy=policy,
            extra_allowed=(parse_domain_pattern(remote.host),),
            destinations=frozenset({(remote.host, remote.port)}),
        )
        verdict = await admit(
            scope, remote.host, remote.port, resolver=self.proxy.resolver, runtime=await self.proxy.runtime()
        )
        if not verdict.allowed:
            raise PermissionDenied(
                f"the push to {remote.host}:{remote.port} is refused by the egress rules: {verdict.reason}",
                details={"host": remote.host, "port": remote.port, "reason": verdict.reason},
            )
        return scope

    @contextlib.asynccontextmanager
    async def egress(self, scope: CallScope) -> AsyncIterator[Egress]:
        """The sandbox's :class:`Egress` of a pass of ``scope``, for the push's duration."""
        running = await self.proxy.get()
        async with running.grant(scope) as issued:
            yield Egress(socket=issued.unix_path, port=issued.tcp_port, proxy_url=issued.proxy_url())
