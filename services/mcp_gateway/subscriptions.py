"""``resources/subscribe`` for the project's skills: a reload of its assets tells each subscriber.

The asset loader watches the project's files and reloads its assets when a skill (or any
asset) changes, then signals ``project.assets_loaded`` (trigger ``watch``, ``request`` …).
On each such reload of this project, every connection subscribed to a skill's URI gets
``notifications/resources/updated`` for it, and reads the new body with ``resources/read``
(a reload that left a skill unchanged notifies too: a client re-reads, nothing more). The
signal is followed only while a connection is subscribed. Subscriptions belong to 2025
connections: the 2026-07-28 protocol has ``subscriptions/listen`` instead, not offered here.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from nats.aio.subscription import Subscription

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.assets import AssetsLoaded

from .mapping import skill_name

__all__ = ["RESOURCE_NOT_FOUND", "SkillSubscriptions"]

log = logging.getLogger("jidocode.mcp_gateway")

#: The MCP specification's error code for a resource that does not exist.
RESOURCE_NOT_FOUND = -32002

Ctx = ServerRequestContext[Any]


class SkillSubscriptions:
    """The skills each connection subscribed to, and the signal that updates them."""

    def __init__(self, bus: Bus, project_id: str, assets: AssetsClient) -> None:
        self.bus = bus
        self.project_id = project_id
        self.assets = assets
        #: connection → the URIs it follows; forgotten with the connection.
        self._subs: weakref.WeakKeyDictionary[Connection, set[str]] = weakref.WeakKeyDictionary()
        self._signal: Subscription | None = None

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        """The ``resources/subscribe`` handler: a skill of the project, else an error naming the URI."""
        uri = str(params.uri)
        name = skill_name(uri)
        if name is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"cannot subscribe to {uri!r}: this server's resources are jidocode://skills/<name>",
            )
        try:
            await self.assets.get("skill", name)
        except NotFound:
            raise MCPError(RESOURCE_NOT_FOUND, f"no skill {name!r} in this project") from None
        except JidoError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"skill {name!r}: {exc.message}") from None
        self._subs.setdefault(_connection(ctx), set()).add(uri)
        if self._signal is None:
            self._signal = await self.bus.subscribe(subjects.signal(AssetsLoaded.TYPE), self._reloaded)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        """The ``resources/unsubscribe`` handler (a URI not subscribed to is no error)."""
        self._subs.get(_connection(ctx), set()).discard(str(params.uri))
        return types.EmptyResult()

    async def _reloaded(self, env: Envelope) -> None:
        data = env.data if isinstance(env.data, dict) else {}
        if data.get("project_id") != self.project_id:
            return
        for connection, uris in list(self._subs.items()):
            for uri in sorted(uris):
                await connection.send_resource_updated(uri)  # best effort: never raises

    async def close(self) -> None:
        signal, self._signal = self._signal, None
        if signal is not None:
            await signal.unsubscribe()


def _connection(ctx: Ctx) -> Connection:
    return ctx.session._connection
