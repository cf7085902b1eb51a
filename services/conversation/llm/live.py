"""A call's streamed text handed to the conversation in batches, so its live view still streams.

A model streams its answer in pieces of a few characters, and the conversation
publishes each text it is given as a ``conversation.assistant.delta``: one NATS
message per piece. :class:`LiveText` hands the pieces on in batches, as the
:class:`~.deltas.DeltaCoalescer` gathers them, with its limits:

- the first piece at once (the viewer sees the answer begin);
- then what has gathered at most every ``interval_s`` (:data:`DEFAULT_LIVE_INTERVAL_S`:
  50 ms, far below what a reader notices), sent by a timer when no piece comes to
  carry it, so text never waits for the next piece longer than that;
- slices of ``max_chars`` whenever that much has gathered;
- the rest when the stream ends, however it ends (:meth:`LiveText.close`).

Batches are sent one at a time, in order; their concatenation is exactly the
streamed text. A send that fails (the bus is gone) is raised by the next
:meth:`LiveText.add` or by :meth:`LiveText.close`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from .deltas import DEFAULT_DELTA_MAX_CHARS, DeltaCoalescer

__all__ = ["DEFAULT_LIVE_INTERVAL_S", "LiveText"]

#: At most one batch per this many seconds after the first (and a timer sends what waits).
DEFAULT_LIVE_INTERVAL_S: Final = 0.05


class LiveText:
    """The streamed text of one call, sent to ``send`` in batches (see the module docstring)."""

    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        *,
        clock: Callable[[], float],
        interval_s: float = DEFAULT_LIVE_INTERVAL_S,
        max_chars: int = DEFAULT_DELTA_MAX_CHARS,
    ) -> None:
        self._send = send
        self._clock = clock
        self._gather = DeltaCoalescer(interval_s=interval_s, max_chars=max_chars)
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        #: Whether the timer still sleeps (a close may cancel it then, never while it sends).
        self._sleeping = False
        self._failed: BaseException | None = None

    async def add(self, piece: str) -> None:
        """Take one streamed piece: send what is due now, and have the rest sent when due."""
        self._raise_failure()
        async with self._lock:
            for text in self._gather.add(piece, self._clock()):
                await self._send(text)
            due_in = self._gather.due_in(self._clock())
        if due_in is not None and self._timer is None:
            self._sleeping = True
            self._timer = asyncio.create_task(self._send_later(due_in), name="live-text")

    async def _send_later(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)  # the batching period, not a synchronization
        finally:
            self._sleeping = False
        try:
            async with self._lock:
                self._timer = None
                text = self._gather.flush(self._clock())
                if text is not None:
                    await self._send(text)
        except Exception as exc:  # raised by the stream's next add or its close
            self._failed = exc

    async def close(self) -> None:
        """The stream ended: stop the timer (a send under way finishes) and send the rest."""
        timer, self._timer = self._timer, None
        if timer is not None:
            if self._sleeping:
                timer.cancel()
            await asyncio.wait((timer,))
        self._raise_failure()
        async with self._lock:
            rest = self._gather.flush()
            if rest is not None:
                await self._send(rest)

    def _raise_failure(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
