"""Which conversations are loaded, and waking the ones that are not.

A conversation is *loaded* while a replica holds its lease and runs its actor.
An idle one is released (``ownership.py``) and then costs nothing: no lease, no
consumer, no actor. Two things make that safe, neither of which grows with
past conversations:

Loaded set
    A key ``loaded.<p>.<c>`` in the records bucket (``jido_conversations``) for
    every conversation that has, or must get, an owner. The owner writes it when
    it takes the conversation and removes it only when it releases an idle or a
    stopped one, by purging the key's subject (no delete marker is left, so the
    set holds loaded conversations only). A replica that dies or stops leaves
    its keys: whoever starts next (:meth:`LoadedSet.keys`, read once at start),
    or a peer that sees the lease go, takes such a conversation over without
    waiting for input, so a turn in flight carries on.

Wake-up consumer
    One durable consumer on ``JIDO_CONV_IN`` (:data:`WAKE_CONSUMER`) with a
    deliver group, shared by every replica: each input message goes to one
    replica, which makes sure its conversation has an owner (taking it when
    nobody holds the lease) before acking. Durable, so input published while no
    conversation service runs wakes its conversation when one starts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.kv_keys import kv_keys

__all__ = ["LOADED_PREFIX", "WAKE_CONSUMER", "LoadedSet", "subscribe_wakeups"]

log = logging.getLogger("jidocode.conversation.residency")

#: Key prefix of the loaded set in the records bucket (records are ``<p>.<c>``, two tokens).
LOADED_PREFIX = "loaded."
#: The durable consumer (and deliver group) that wakes conversations on input.
WAKE_CONSUMER = "jido-conv-wake"
#: A wake-up not acknowledged within this time goes to another replica.
WAKE_ACK_WAIT_S = 10.0
#: Wake-ups delivered and not yet acked, over every replica.
WAKE_MAX_PENDING = 512


class LoadedSet:
    """The ``loaded.<p>.<c>`` keys of the records bucket (see the module docstring)."""

    def __init__(self, bus: Bus, records: KeyValue, *, token: str) -> None:
        self.bus = bus
        self.records = records
        self.token = token
        self._stream = f"KV_{subjects.BUCKET_CONVERSATIONS}"
        self._prefix = f"$KV.{subjects.BUCKET_CONVERSATIONS}."

    async def mark(self, key: str) -> None:
        await self.records.put(LOADED_PREFIX + key, self.token.encode())

    async def unmark(self, key: str) -> None:
        """Remove ``key`` without leaving a delete marker (a purge of its subject)."""
        await self.bus.js.purge_stream(self._stream, subject=self._prefix + LOADED_PREFIX + key)

    async def has(self, key: str) -> bool:
        try:
            await self.records.get(LOADED_PREFIX + key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return False
        return True

    async def keys(self) -> set[str]:
        """Every conversation key in the set (read in time proportional to its size)."""
        return {key[len(LOADED_PREFIX) :] for key in await kv_keys(self.records, LOADED_PREFIX)}


async def subscribe_wakeups(bus: Bus, cb: Callable[[Msg], Awaitable[None]]) -> Subscription:
    """Join the wake-up consumer's deliver group (creating the consumer the first time).

    It starts at new messages: whatever was stored before the first conversation
    service ever ran belongs to conversations that did not exist yet.
    """
    problem: Exception | None = None
    for _ in range(5):
        config = ConsumerConfig(
            description="wakes released conversations on input (jidocode conversation service)",
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=WAKE_ACK_WAIT_S,
            deliver_policy=DeliverPolicy.NEW,
            max_ack_pending=WAKE_MAX_PENDING,
        )
        try:
            sub: Subscription = await bus.js.subscribe(
                subjects.conversation_in_filter(),
                queue=WAKE_CONSUMER,
                durable=WAKE_CONSUMER,
                stream=subjects.STREAM_CONV_IN,
                cb=cb,
                manual_ack=True,
                config=config,
            )
            return sub
        except (nats.js.errors.Error, nats.errors.TimeoutError) as exc:
            # Another replica created it at the same moment (with its own deliver subject):
            # the next attempt finds it and joins its group.
            log.info("joining the wake-up consumer: %s; retrying", exc)
            problem = exc
    assert problem is not None
    raise problem
