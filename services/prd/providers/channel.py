"""The buffer between a provider's producer (a CLI's stdout, a conversation's output) and the loop.

One producer, one reader. :meth:`EventChannel.put` waits while :data:`BUFFER` events are unread
(``bounded=False`` for the last events of a run, and for a producer that must not wait, such as
a bus subscription); :meth:`EventChannel.discard` is for a caller that asks for the result without
reading the events (nothing is kept then, and the producer never waits).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Final

from .base import ProviderEvent

__all__ = ["BUFFER", "EventChannel"]

#: Events buffered for a slow reader before a bounded producer waits.
BUFFER: Final = 256


class EventChannel:
    def __init__(self, bound: int = BUFFER) -> None:
        self._bound = bound
        self._buffer: deque[ProviderEvent] = deque()
        self._closed = False
        self._discard = False
        self._changed = asyncio.Condition()
        #: Whether :meth:`events` was ever iterated.
        self.reading = False

    async def put(self, events: Iterable[ProviderEvent], *, bounded: bool = True) -> None:
        batch = list(events)
        if not batch:
            return
        async with self._changed:
            if bounded:
                await self._changed.wait_for(lambda: len(self._buffer) < self._bound or self._discard)
            if not self._discard:
                self._buffer.extend(batch)
            self._changed.notify_all()

    async def close(self) -> None:
        """No more events (the reader ends once it has read those buffered)."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    async def discard(self) -> None:
        """Drop what is buffered and everything put from now on."""
        async with self._changed:
            self._discard = True
            self._buffer.clear()
            self._changed.notify_all()

    async def events(self) -> AsyncIterator[ProviderEvent]:
        self.reading = True
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self._buffer) or self._closed)
                if not self._buffer:
                    return
                ev = self._buffer.popleft()
                self._changed.notify_all()
            yield ev
