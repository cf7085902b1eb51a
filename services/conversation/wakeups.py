"""Loading a conversation when input arrives, and letting it go when idle without losing any.

A conversation is loaded (lease, actor, a route from the replica's one input
consumer: ``input_dispatch.py``) by the replica that gets its first input,
projection request or wake-up (``residency.py``: one durable wake-up consumer on
``JIDO_CONV_IN`` shared by every replica), and released again once idle for
``idle_timeout_s`` (counted from its last journal entry when it is loaded again):
an idle conversation costs no lease renewal, no consumer and no memory. Release
lets go of the input first and of the lease last, then checks ``JIDO_CONV_IN`` for
input newer than the last one applied (:meth:`Wakeups.after_idle_release`); a
waker that saw the lease still held relies on that check, so no input is left behind.

This is the runtime's side of the input path: the replica's input consumer and an
actor's catch-up from the stream are in ``input_dispatch.py``.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import encode, error_envelope
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.conversation import ConversationError

from .actor import ConversationActor
from .journal import Journal
from .ownership import Ownership
from .record import record_key
from .record_store import RecordStore
from .residency import subscribe_wakeups

__all__ = ["WAKE_CONCURRENCY", "Wakeups", "conversation_of"]

log = logging.getLogger("jidocode.conversation")

#: Wake-ups handled at once.
WAKE_CONCURRENCY = 64


def conversation_of(subject: str) -> tuple[str, str, str] | None:
    """The project id, conversation id and record key of an input subject; ``None`` when it
    names no conversation (nothing to wake)."""
    try:
        project_id = subjects.project_id_of(subject)
        conversation_id = subjects.conversation_id_of(subject)
        return project_id, conversation_id, record_key(project_id, conversation_id)
    except (ValueError, InvalidInput):
        return None


class Wakeups:
    """Wakes conversations on input (the shared wake-up consumer) and after idle releases."""

    def __init__(self, bus: Bus, journal: Journal, records: RecordStore, ownership: Ownership) -> None:
        self.bus = bus
        self.journal = journal
        self.records = records
        self.ownership = ownership
        #: Wake-ups being handled, and other short jobs started from a callback.
        self.tasks: set[asyncio.Task[None]] = set()
        self._gate = asyncio.Semaphore(WAKE_CONCURRENCY)
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await subscribe_wakeups(self.bus, self._on_wake)

    async def stop(self) -> None:
        """Stop taking wake-ups (one not acked is delivered again, to another replica)."""
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception as exc:  # the connection may be closing
                log.debug("unsubscribe: %s", exc)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def spawn(self, job: asyncio.Task[None]) -> None:
        """Keep ``job`` until it ends (cancelled by :meth:`stop`)."""
        self.tasks.add(job)
        job.add_done_callback(self.tasks.discard)

    async def _on_wake(self, msg: Msg) -> None:
        named = conversation_of(msg.subject)
        if named is not None and named[2] in self.ownership.owned:
            # loaded here (the usual case: a conversation in a turn): nothing to wake, and no
            # task to make for it
            try:
                await msg.ack()
            except Exception as exc:
                log.debug("ack of a wake-up: %s", exc)
            return
        # Handled concurrently: one by one, a burst of wake-ups (each a lease round trip or
        # two) would wait in the client past the consumer's ack wait and come again.
        self.spawn(asyncio.create_task(self._wake_one(msg)))

    async def _wake_one(self, msg: Msg) -> None:
        async with self._gate:
            await self._handle_wake(msg)

    async def _handle_wake(self, msg: Msg) -> None:
        try:
            done = await self.wake(msg.subject)
        except Exception as exc:  # asked nothing conclusive (a timeout, the connection): again later
            log.warning("waking the conversation of %s: %s", msg.subject, exc)
            done = False
        try:
            if done:
                await msg.ack()
            else:
                await msg.nak(delay=1.0)
        except Exception as exc:
            log.debug("ack of a wake-up: %s", exc)

    async def wake(self, subject: str) -> bool:
        """Input arrived on ``subject``: make sure its conversation has an owner (or needs none:
        unknown, answered with an error event, or stopped). False: try again later."""
        named = conversation_of(subject)
        if named is None:
            return True
        project_id, conversation_id, key = named
        if key in self.ownership.owned:
            return True
        try:
            record = await self.records.get(project_id, conversation_id)
        except NotFound as exc:
            payload = encode(
                error_envelope(self.bus.source, exc, project_id=project_id, conversation_id=conversation_id)
            )[0]
            await self.bus.nc.publish(
                subjects.conversation_out(project_id, conversation_id, ConversationError.TYPE), payload
            )
            return True
        if record.status != "active":
            return True  # applied when it is started again
        if self.ownership.closing:
            return False
        # Owned here now, or held by another replica: one that is running reads it; one that
        # is letting it go checks for input after its lease is gone (``after_idle_release``);
        # one that died leaves the lease to expire and the scan takes the conversation over.
        await self.ownership.take(key, record)
        return True

    async def after_idle_release(self, key: str, actor: ConversationActor) -> None:
        """After an idle release: input stored after the actor's last (it stopped reading before
        the lease went) may have been left by a waker that saw the lease still held."""
        p, c = actor.project_id, actor.conversation_id
        try:
            last: int | None = await self.journal.last_input_sequence(p, c)
        except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.ConnectionClosedError) as exc:
            log.warning("input of %s after its release: %s; loading it again to be sure", key, exc)
            last = None
        if last is not None and last <= actor.input_seq:
            return
        log.info("input arrived while %s was released: loading it again", key)
        if self.ownership.closing:
            await self.ownership.hand_over(key)
            return
        try:
            record = await self.records.get(p, c)
        except NotFound:
            return
        if not await self.ownership.try_acquire(key, record):
            self.ownership.retake_soon(key)
