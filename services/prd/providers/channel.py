"""The buffer between a provider's producer (a CLI's stdout, a conversation's output) and the loop.

One producer, one reader. :meth:`EventChannel.put` waits while :data:`BUFFER` events are unread
(``bounded=False`` for the last events of a run, and for a producer that must not wait, such as
a bus subscription); :meth:`EventChannel.discard` is for a caller that asks for the result without
reading the events (nothing is kept then, and the producer never waits).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Final

from .base import IterationResult, ProviderEvent

__all__ = ["BUFFER", "ChannelRun", "EventChannel"]

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


class ChannelRun:
    """The consumer half every :class:`~.base.IterationRun` shares: the events come from
    ``_channel``, the result from the producer task ``_task`` (which sets ``_result``), and a
    cancel cancels that task once and waits for its clean-up."""

    def __init__(self) -> None:
        self._channel = EventChannel()
        self._task: asyncio.Task[None] | None = None
        self._result: IterationResult | None = None
        self._cancelled = False

    def events(self) -> AsyncIterator[ProviderEvent]:
        return self._channel.events()

    async def result(self) -> IterationResult:
        if not self._channel.reading:
            await self._channel.discard()
        assert self._task is not None
        await asyncio.shield(self._task)
        assert self._result is not None
        return self._result

    async def cancel(self) -> None:
        assert self._task is not None
        if self._task.done():
            return
        if not self._cancelled:
            # once: a second cancel would interrupt the producer's own clean-up
            self._cancelled = True
            # A producer made just now takes its first step first: a task cancelled before that
            # never runs at all, so its clean-up (killing the CLI, stopping the conversation,
            # ending the events) would never run. (Since Python 3.12 a caller's
            # ``wait_for(run.cancel())`` makes no task of its own that would have yielded.)
            await asyncio.sleep(0)
            if self._task.done():
                return
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._task)
