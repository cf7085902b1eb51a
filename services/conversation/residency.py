"""Which conversations are loaded and by whom, and waking the ones that are not.

A conversation is *loaded* while a replica runs its actor. An idle one is
released (``ownership.py``) and then costs nothing: no key, no actor. Two
things make that safe, neither of which grows with past conversations:

Loaded set (the ownership keys)
    A key ``loaded.<p>.<c>`` in the records bucket (``jido_conversations``) for
    every conversation that has, or must get, an owner; its value names the
    replica's token (``shared/lease.py``'s holder value). A replica takes a
    conversation by a compare-and-set write of it (:meth:`LoadedSet.claim`),
    written once and never renewed: the replica's own liveness is one heartbeat
    key (``replicas.py``). It removes the key when it releases an idle or a
    stopped conversation (:meth:`LoadedSet.unmark`: a delete on the revision it
    wrote, which watchers see, then a purge up to it, so the set holds loaded
    conversations only). A replica that dies or stops leaves its keys naming it:
    a peer (when its heartbeat goes) or the next start takes over those with
    work pending and unmarks the idle ones (recovery by need, ``recovery.py``).

Wake-up consumer
    One durable consumer on ``JIDO_CONV_IN`` (:data:`WAKE_CONSUMER`) with a
    deliver group, shared by every replica: each input message goes to one
    replica, which makes sure its conversation has an owner (taking it when
    nobody alive holds it) before acking. Durable, so input published while no
    conversation service runs wakes its conversation when one starts.
"""

from __future__ import annotations

import asyncio
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
from jidocode.shared.lease import Seen, encode_holder, holder_of

__all__ = ["LOADED_PREFIX", "WAKE_CONSUMER", "LoadedSet", "loaded_key_of", "subscribe_wakeups"]

log = logging.getLogger("jidocode.conversation.residency")

#: Key prefix of the loaded set in the records bucket (records are ``<p>.<c>``, two tokens).
LOADED_PREFIX = "loaded."
#: The durable consumer (and deliver group) that wakes conversations on input.
WAKE_CONSUMER = "jido-conv-wake"
#: A wake-up not acknowledged within this time goes to another replica.
WAKE_ACK_WAIT_S = 10.0
#: Wake-ups delivered and not yet acked, over every replica.
WAKE_MAX_PENDING = 512
#: Keys of the loaded set read at once when it is read whole (at start).
_READS_AT_ONCE = 32
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
#: JetStream's "wrong last sequence" errors: somebody else wrote the key first.
_WRONG_LAST = frozenset({10071, 10164})


def loaded_key_of(bucket_key: str) -> str | None:
    """The conversation key (``<p>.<c>``) of a loaded-set key of the records bucket; ``None``
    for any other key (a record of a project named ``loaded`` has one token after the prefix)."""
    if not bucket_key.startswith(LOADED_PREFIX):
        return None
    key = bucket_key[len(LOADED_PREFIX) :]
    return key if key.count(".") == 1 else None


class LoadedSet:
    """The ``loaded.<p>.<c>`` keys of the records bucket (see the module docstring)."""

    def __init__(self, bus: Bus, records: KeyValue, *, token: str) -> None:
        self.bus = bus
        self.records = records
        self.token = token
        self._stream = f"KV_{subjects.BUCKET_CONVERSATIONS}"
        self._prefix = f"$KV.{subjects.BUCKET_CONVERSATIONS}."

    async def read(self, key: str) -> Seen:
        """The key as it is now: its revision (0: none) and the token it names (``None``: free)."""
        now = asyncio.get_running_loop().time()
        try:
            entry = await self.records.get(LOADED_PREFIX + key)
        except nats.js.errors.KeyNotFoundError as gone:  # never written, deleted or purged
            revision = gone.entry.revision if gone.entry is not None else None
            return Seen(revision or 0, None, now)
        return Seen(entry.revision or 0, holder_of(entry.value), now)

    async def claim(self, key: str, expected: int) -> int | None:
        """Write ``key`` naming this replica if its last revision is still ``expected`` (0:
        none): the revision written, or ``None`` when somebody else wrote it first."""
        return await self._write(key, encode_holder(self.token), expected)

    async def mark(self, key: str) -> None:
        """Write ``key`` naming this replica, whoever it named."""
        await self._write(key, encode_holder(self.token), None)

    async def unmark(self, key: str, revision: int | None = None) -> None:
        """Remove ``key``: only the write at ``revision`` (a newer one, a peer's, stays), or
        whatever it holds (``None``). Watchers see a delete; the purge after it leaves no marker."""
        deleted = await self._write(key, None, revision)
        if deleted is not None:
            await self.bus.js.purge_stream(
                self._stream, seq=deleted + 1, subject=self._prefix + LOADED_PREFIX + key
            )

    async def has(self, key: str) -> bool:
        return (await self.read(key)).holder is not None

    async def keys(self) -> set[str]:
        """Every conversation key in the set (read in time proportional to its size)."""
        found = (loaded_key_of(key) for key in await kv_keys(self.records, LOADED_PREFIX))
        return {key for key in found if key is not None}

    async def entries(self) -> dict[str, Seen]:
        """Every key of the set as it is now, with the token it names (at start: what a
        replica that stopped or died left)."""
        gate = asyncio.Semaphore(_READS_AT_ONCE)

        async def read(key: str) -> tuple[str, Seen]:
            async with gate:
                return key, await self.read(key)

        pairs = await asyncio.gather(*(read(key) for key in sorted(await self.keys())))
        return {key: seen for key, seen in pairs if seen.holder is not None}

    async def _write(self, key: str, value: bytes | None, expected: int | None) -> int | None:
        """Publish ``value`` (``None``: a delete) on ``expected`` (``None``: any revision): the
        revision written, or ``None`` when the key was at another one."""
        headers = {} if expected is None else {_EXPECTED_LAST: str(expected)}
        if value is None:
            headers["KV-Operation"] = "DEL"
        try:
            ack = await self.bus.js.publish(self._prefix + LOADED_PREFIX + key, value or b"", headers=headers)
        except nats.js.errors.APIError as err:
            if err.err_code in _WRONG_LAST:
                return None
            raise
        return int(ack.seq)


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
