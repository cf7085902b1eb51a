"""Follow one PRD's loop events from the ``JIDO_PRD`` stream, in order, from a given ``seq``.

``jidocode prd run`` and ``jidocode prd tui`` read a PRD's progress through this: an
ephemeral JetStream consumer on ``jido.prd.<p>.<prd>.>`` that this one reader pulls in
order (the server keeps the stream's order; no acks), decoded into the catalogue's
loop events. Pulled, not pushed: a push consumer with a small pending limit drops
messages and an ordered push consumer only notices the gap at the next heartbeat
(seconds of stall, decision 0290); a pull asks for at most ``buffer`` events at a time,
so memory is bounded and nothing is dropped.

Every loop event carries the PRD's own gapless ``seq`` (also its line in
``events.jsonl``); the follower yields only events after ``after_seq`` and never one
twice, so a caller that knows the last ``seq`` it showed (``LoopInfo.seq`` from ``get``
or ``run``) resumes exactly there. The stream's numbering is not the PRD's: the
consumer starts where :func:`jidocode.shared.prd_stream.start_sequence` finds that
``seq`` (a binary search, a few events early) and skips what comes before it. If the
server loses the consumer (a restart), the follower makes a new one and goes on after
the last ``seq`` it gave.

Bounded: at most ``buffer`` events wait in this process; the rest wait in the stream
until the reader takes more, so a slow terminal slows the delivery, never the loop (the
service publishes to the stream, not to this reader).
"""

from __future__ import annotations

import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import decode
from jidocode.shared.errors import JidoError, ServiceUnavailable
from jidocode.shared.events.prd import PrdEvent
from jidocode.shared.prd_stream import start_sequence

__all__ = ["CONSUMER_IDLE_S", "FOLLOW_BUFFER", "POLL_S", "PrdFollower"]

#: Events that may wait in this process for a slow reader (the stream holds the rest).
FOLLOW_BUFFER: Final = 64
#: Seconds a wait for the next event lasts before :meth:`PrdFollower.next` returns ``None``
#: (so a caller can check its connection, redraw, or see that it was asked to stop).
POLL_S: Final = 1.0
#: Seconds the server keeps the consumer of a reader that vanished without closing it.
CONSUMER_IDLE_S: Final = 60.0


class PrdFollower:
    """An async iterator of one PRD's loop events after ``after_seq`` (use as ``async with``)."""

    def __init__(
        self,
        bus: Bus,
        project_id: str,
        prd: str,
        *,
        after_seq: int = 0,
        buffer: int = FOLLOW_BUFFER,
        poll_s: float = POLL_S,
    ) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be at least 1, got {buffer}")
        if after_seq < 0:
            raise ValueError(f"after_seq must be 0 or more, got {after_seq}")
        self.bus = bus
        self.subject = subjects.prd_event_filter(project_id, prd)
        self.prd = prd
        self.project_id = project_id
        #: The ``seq`` of the last event yielded (or the one to start after).
        self.last_seq = after_seq
        self.buffer = buffer
        self.poll_s = poll_s
        self._sub: JetStreamContext.PullSubscription | None = None
        self._consumer = ""
        self._taken: deque[Msg] = deque()

    async def start(self) -> PrdFollower:
        """Open the consumer; :class:`ServiceUnavailable` when there is no ``JIDO_PRD`` stream."""
        self._consumer = f"prd_follow_{secrets.token_hex(8)}"
        try:
            start = await start_sequence(self.bus.js, self.project_id, self.prd, self.last_seq)
        except nats.js.errors.NotFoundError:
            raise ServiceUnavailable(
                f"there is no {subjects.STREAM_PRD} stream: the prd service has never run on this system",
                details={"stream": subjects.STREAM_PRD},
            ) from None
        config = ConsumerConfig(
            name=self._consumer,
            deliver_policy=DeliverPolicy.ALL if start <= 1 else DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=None if start <= 1 else start,
            ack_policy=AckPolicy.NONE,
            filter_subject=self.subject,
            inactive_threshold=CONSUMER_IDLE_S,
            mem_storage=True,
            num_replicas=1,
        )
        try:
            await self.bus.js.add_consumer(subjects.STREAM_PRD, config=config)
        except nats.js.errors.NotFoundError:
            raise ServiceUnavailable(
                f"there is no {subjects.STREAM_PRD} stream: the prd service has never run on this system",
                details={"stream": subjects.STREAM_PRD},
            ) from None
        self._sub = await self.bus.js.pull_subscribe_bind(
            self._consumer, subjects.STREAM_PRD, pending_msgs_limit=self.buffer + 16
        )
        return self

    async def close(self) -> None:
        self._taken.clear()
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):  # the connection may be gone: nothing left to free
                await sub.unsubscribe()
            with contextlib.suppress(Exception):  # the server drops it after CONSUMER_IDLE_S anyway
                await self.bus.js.delete_consumer(subjects.STREAM_PRD, self._consumer)

    async def __aenter__(self) -> PrdFollower:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _pull(self) -> bool:
        """Take up to ``buffer`` stored events; False when none came within ``poll_s``."""
        assert self._sub is not None, "start() first"
        try:
            # nats-py may answer a fetch with no message at all (a status reply rather than a
            # timeout): that is "none came", not one to take
            taken = await self._sub.fetch(batch=self.buffer, timeout=self.poll_s)
        except (TimeoutError, nats.errors.TimeoutError):
            return False
        except nats.js.errors.NotFoundError:  # the server lost the consumer: a new one, same place
            await self.close()
            await self.start()
            return False
        except nats.errors.ConnectionClosedError:
            raise ServiceUnavailable(
                "lost the connection to NATS while following the PRD: is JidoCode still running?"
            ) from None
        self._taken.extend(taken)
        return bool(taken)

    async def next(self) -> PrdEvent | None:
        """The next new event, or ``None`` when none came within ``poll_s`` seconds."""
        while True:
            if not self._taken and not await self._pull():
                return None
            msg = self._taken.popleft()
            try:
                event = decode(msg.data, msg.headers).event()
            except JidoError:
                continue  # not a catalogue event (a newer service's type): nothing to show
            if not isinstance(event, PrdEvent) or event.seq <= self.last_seq:
                continue
            self.last_seq = event.seq
            return event

    def __aiter__(self) -> AsyncIterator[PrdEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[PrdEvent]:
        while True:
            event = await self.next()
            if event is not None:
                yield event
