"""A KV watch that starts again at once when the bus connection comes back.

A watch is an ordered consumer kept in the server's memory: a restarted nats-server has lost
it, and the client notices only after two missed heartbeats (10-20 s during which changes are
not seen: a replica's heartbeat, a conversation taken over). :class:`Rewatched` runs a watch and,
on every reconnect, cancels it and runs it anew, from the bucket's current values on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from jidocode.shared.bus import Bus

__all__ = ["RETRY_S", "Rewatched"]

log = logging.getLogger("jidocode.conversation")

#: The pause before a watch that failed (the connection was closing, JetStream was starting)
#: is run again.
RETRY_S: Final = 1.0


class Rewatched:
    """Runs ``watch`` (follows a bucket until cancelled; every value it replays must be safe to
    apply twice) for as long as :meth:`run` runs, and anew after each reconnect of ``bus``."""

    def __init__(self, bus: Bus, name: str, watch: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._watch = watch
        self._current: asyncio.Task[None] | None = None
        #: Times the watch was started again after a reconnect.
        self.restarts = 0
        bus.on_reconnect(self._restart)

    async def run(self) -> None:
        while True:
            current = self._current = asyncio.ensure_future(self._watch())
            try:
                await asyncio.wait({current})
            except asyncio.CancelledError:
                current.cancel()
                await asyncio.gather(current, return_exceptions=True)
                raise
            if current.cancelled():
                continue  # a reconnect: watch anew
            error = current.exception()
            if error is None:
                return
            log.warning("%s stopped (%s); watching again", self.name, error)
            await asyncio.sleep(RETRY_S)

    async def _restart(self) -> None:
        current = self._current
        if current is not None and not current.done():
            self.restarts += 1
            current.cancel()
