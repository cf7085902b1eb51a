"""A proxy started on first use, and the passes of one process that may reach only named domains.

A service other than the tool runner (the PRD service, which launches the provider CLIs) rarely
needs a proxy: :class:`LazyProxy` starts one the first time a pass is asked for and closes it
with the service. :func:`domains_opener` is what such a process gets: an async context giving
the sandbox's :class:`~jidocode.shared.sandbox.Egress` of a pass that allows ``domains`` (a
provider CLI's API and login hosts) and nothing else, with the user's denied entries still
winning, for as long as the process runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager

from jidocode.shared.policy import Policy
from jidocode.shared.policy.domains import DomainPattern, parse_domain_pattern
from jidocode.shared.sandbox import Egress

from ._proxy import EgressProxy, EventSink, _no_sink
from ._resolver import Resolver, system_resolver
from ._scope import CallScope

__all__ = ["DomainsOpener", "LazyProxy", "RuntimeSource", "domains_opener"]

#: ``(name, domains) -> async context of an Egress``: a pass that lets one process reach ``domains``.
DomainsOpener = Callable[[str, tuple[str, ...]], AbstractAsyncContextManager[Egress]]


#: ``() -> the runtime's own (address, port) endpoints``, found when the proxy starts.
RuntimeSource = Callable[[], Awaitable[Iterable[tuple[str, int]]]]


class LazyProxy:
    """An :class:`EgressProxy` started by the first :meth:`get` (concurrent callers share it).

    Its always-refused endpoints are ``runtime`` plus what ``runtime_source`` finds (the NATS
    servers and the gateway, resolved once, when first needed)."""

    def __init__(
        self,
        *,
        resolver: Resolver = system_resolver,
        runtime: Iterable[tuple[str, int]] = (),
        runtime_source: RuntimeSource | None = None,
        on_event: EventSink = _no_sink,
    ) -> None:
        self._resolver = resolver
        self._runtime = tuple(runtime)
        self._runtime_source = runtime_source
        self._on_event = on_event
        self._proxy: EgressProxy | None = None
        self._lock = asyncio.Lock()

    @property
    def resolver(self) -> Resolver:
        """How the proxy resolves names (a caller deciding ahead of a connection uses the same)."""
        return self._resolver

    async def runtime(self) -> tuple[tuple[str, int], ...]:
        """The endpoints the proxy refuses whatever the rules say (a caller deciding ahead of a
        connection refuses the same)."""
        async with self._lock:
            return await self._runtime_now()

    async def _runtime_now(self) -> tuple[tuple[str, int], ...]:
        if self._runtime_source is not None:
            self._runtime += tuple(await self._runtime_source())
            self._runtime_source = None
        return self._runtime

    async def get(self) -> EgressProxy:
        async with self._lock:
            if self._proxy is None:
                self._proxy = await EgressProxy.start(
                    resolver=self._resolver, runtime=await self._runtime_now(), on_event=self._on_event
                )
            return self._proxy

    async def close(self) -> None:
        async with self._lock:
            if self._proxy is not None:
                await self._proxy.close()
                self._proxy = None


def domains_opener(
    proxy: LazyProxy, *, project_id: str, policy: Policy, networks: tuple[DomainPattern, ...] = ()
) -> DomainsOpener:
    """Passes of ``proxy`` for ``project_id``'s processes: each allows its ``domains`` on top of
    ``policy`` (whose denied entries and deny rules still win); ``name`` names it in the events.
    ``networks`` (IP/CIDR entries) let those domains resolve to a private address of theirs."""

    @contextlib.asynccontextmanager
    async def open_pass(name: str, domains: tuple[str, ...]) -> AsyncIterator[Egress]:
        running = await proxy.get()
        scope = CallScope(
            project_id=project_id,
            request_id=name,
            policy=policy,
            extra_allowed=tuple(parse_domain_pattern(d) for d in domains),
            networks=networks,
        )
        async with running.grant(scope) as issued:
            yield Egress(socket=issued.unix_path, port=issued.tcp_port, proxy_url=issued.proxy_url())

    return open_pass
