"""One lease over a JetStream KV key: take, renew, lose, expire, hand over.

A lease is a KV key whose value names its holder (``{"holder": …}``). Every write is a
compare-and-set on the key's last revision (``Nats-Expected-Last-Subject-Sequence``), so of two
writers that read the same revision one wins and the other learns it lost:

- **take**: write the key if it is free — never written, deleted, expired (the server's marker),
  already naming the taker (a hand-over to it, or a holder that forgot it held it) — or *stale*:
  nobody rewrote it for ``ttl_s`` on the taker's own clock (:class:`Sightings`).
- **renew**: rewrite the key on the revision held; another revision there means the lease was
  **lost** (:class:`Lost`): somebody took it over after it went stale or expired.
- **expire**: the server drops the key ``ttl_s`` after its last write, as the bucket says (a
  bucket ``ttl``, or a per-message TTL on NATS 2.11+ with ``message_ttl=True``, which also leaves
  a marker watchers see); without either a stale holder is taken over by a peer that watched the
  key go unrenewed for ``ttl_s`` (no wall clock is compared across machines).
- **release**: a delete on the revision held (a lease lost meanwhile is left alone).
- **hand over**: rewrite the key naming another holder, which takes it at once.

The decisions (who holds a key, whether it is stale, what to write on which revision, what a
write's answer means) are pure functions over :class:`Seen` and :class:`Held` values and a clock
the caller passes (:func:`holder_of`, :func:`decide_take`, :func:`after_write`,
:class:`Sightings`); :class:`LeaseBucket` does the KV I/O, :class:`KeptLease` the periodic renewal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

if TYPE_CHECKING:
    from .bus import Bus

__all__ = [
    "BUS_ERRORS",
    "Busy",
    "Held",
    "KeptLease",
    "LeaseBucket",
    "Lost",
    "Seen",
    "Sightings",
    "Take",
    "after_write",
    "decide_take",
    "encode_holder",
    "holder_of",
    "is_stale",
]

log = logging.getLogger("jidocode.lease")

#: What a KV read or write raises when NATS is out of reach or refuses (a caller's "try later").
BUS_ERRORS: Final = (nats.errors.Error, nats.js.errors.Error)

_EXPECTED_LAST: Final = "Nats-Expected-Last-Subject-Sequence"
_KV_OPERATION: Final = "KV-Operation"
#: JetStream's "wrong last sequence" errors: somebody else wrote the key first.
_WRONG_LAST: Final = frozenset({10071, 10164})
#: Older values named their holder under these fields (read during a rolling upgrade).
_LEGACY_FIELDS: Final = ("owner", "instance")
#: How long a stop waits before it cancels the renewal again (see :meth:`KeptLease.stop`).
_RECANCEL_S: Final = 0.5


# -- the pure core ---------------------------------------------------------------------------------


def encode_holder(holder: str) -> bytes:
    """The value of a key held by ``holder``."""
    if not holder:
        raise ValueError("a lease holder needs a non-empty name")
    return json.dumps({"holder": holder}).encode()


def holder_of(value: bytes | None) -> str | None:
    """Who holds a key whose value is ``value`` (``None``: empty, a delete or an expiry marker).

    A JSON object names it under ``holder`` (or an older value's ``owner``/``instance``); any
    other non-empty value is the holder's name as text."""
    if not value:
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        for name in ("holder", *_LEGACY_FIELDS):
            found = decoded.get(name)
            if isinstance(found, str) and found:
                return found
    return value.decode(errors="replace")


@dataclass(frozen=True, slots=True)
class Seen:
    """One key as a reader last saw it: its revision (0: never written), its holder (``None``:
    free) and when that revision was first seen, on the reader's clock."""

    revision: int = 0
    holder: str | None = None
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class Held:
    """A lease this holder holds: the revision it wrote and when it sent that write (its clock)."""

    key: str
    holder: str
    revision: int
    written_at: float

    def valid(self, now: float, ttl_s: float) -> bool:
        """Whether nobody may have taken it over yet: ``ttl_s`` has not passed since the write."""
        return now - self.written_at < ttl_s


@dataclass(frozen=True, slots=True)
class Take:
    """Write the key naming the taker, on revision ``expected``."""

    expected: int


@dataclass(frozen=True, slots=True)
class Busy:
    """Another holder has the key and renewed it less than ``ttl_s`` ago."""

    holder: str
    revision: int


@dataclass(frozen=True, slots=True)
class Lost:
    """A write on the revision held found another one there: the lease is somebody else's."""

    key: str
    revision: int


def is_stale(seen: Seen, now: float, ttl_s: float) -> bool:
    """A held key nobody rewrote for longer than ``ttl_s`` (as its reader saw it)."""
    return seen.holder is not None and now - seen.since > ttl_s


def decide_take(seen: Seen, taker: str, now: float, ttl_s: float) -> Take | Busy:
    """Whether ``taker`` may write the key it saw as ``seen``, and on which revision."""
    if seen.holder is None or seen.holder == taker or is_stale(seen, now, ttl_s):
        return Take(seen.revision)
    return Busy(seen.holder, seen.revision)


def after_write(key: str, holder: str, expected: int, revision: int | None, sent_at: float) -> Held | Lost:
    """What a compare-and-set write on ``expected`` sent at ``sent_at`` made of the lease: held
    at its new ``revision``, or lost (``None``: the key was at another revision)."""
    if revision is None:
        return Lost(key, expected)
    return Held(key, holder, revision, sent_at)


@dataclass(slots=True)
class Sightings:
    """When each key's current revision was first seen, on the watcher's clock: a key that kept one
    revision for longer than ``ttl_s`` has a holder that stopped renewing (a stale one)."""

    ttl_s: float
    seen: dict[str, Seen] = field(default_factory=dict)

    def note(self, key: str, revision: int, holder: str | None, now: float) -> Seen:
        """Record a read or a watched change of ``key`` (an older revision than known is ignored)."""
        before = self.seen.get(key)
        if before is not None and before.revision >= revision:
            return before
        seen = Seen(revision, holder, now)
        self.seen[key] = seen
        return seen

    def note_entry(self, entry: KeyValue.Entry, now: float) -> Seen | None:
        """Record a watched change (a delete or purge frees its key); ``None``: not a key's
        change (no revision)."""
        if entry.revision is None:
            return None
        holder = holder_of(entry.value) if entry.operation is None else None
        return self.note(entry.key, entry.revision, holder, now)

    def stale(self, now: float) -> list[Seen]:
        """The held keys nobody rewrote for ``ttl_s``."""
        return [s for s in self.seen.values() if is_stale(s, now, self.ttl_s)]

    def stale_keys(self, now: float) -> list[str]:
        """The keys of :meth:`stale`, sorted."""
        return sorted(k for k, s in self.seen.items() if is_stale(s, now, self.ttl_s))


# -- the KV I/O -----------------------------------------------------------------------------------


class LeaseBucket:
    """The leases of one KV bucket, written by compare-and-set (see the module's docstring).

    ``ttl_s`` is how long a lease lasts without a renewal: the per-message TTL of each write when
    ``message_ttl`` (the bucket must allow them: NATS 2.11+), and the age past which a watcher
    takes a key over (:func:`decide_take`). ``clock`` is the local clock every age is read on."""

    def __init__(
        self,
        js: JetStreamContext,
        kv: KeyValue,
        bucket: str,
        *,
        ttl_s: float,
        message_ttl: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"a lease's ttl_s must be positive, not {ttl_s}")
        self.js = js
        self.kv = kv
        self.bucket = bucket
        self.ttl_s = ttl_s
        self.message_ttl = message_ttl
        self.clock = clock
        self._prefix = f"$KV.{bucket}."

    @classmethod
    async def open(
        cls, bus: Bus, bucket: str, *, ttl_s: float, message_ttl: bool = False, **config: float | int
    ) -> LeaseBucket:
        """Bind (or create, with ``config``: ``history``, ``ttl``, ``limit_marker_ttl`` …) ``bucket``."""
        kv = await bus.kv(bucket, **config)
        return cls(bus.js, kv, bucket, ttl_s=ttl_s, message_ttl=message_ttl)

    async def read(self, key: str) -> Seen:
        """The key as it is now (first seen now)."""
        now = self.clock()
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError as gone:  # never written, deleted or purged
            revision = gone.entry.revision if gone.entry is not None else None
            return Seen(revision or 0, None, now)
        return Seen(entry.revision or 0, holder_of(entry.value), now)

    async def take(self, key: str, holder: str, seen: Seen | None = None) -> Held | Busy | Lost:
        """Take ``key`` for ``holder`` as :func:`decide_take` allows, from ``seen`` (a watcher's
        sighting, for a stale holder's key) or a read now. ``Lost``: another writer came first."""
        if seen is None:
            seen = await self.read(key)
        decision = decide_take(seen, holder, self.clock(), self.ttl_s)
        if isinstance(decision, Busy):
            return decision
        return await self._write_holder(key, holder, decision.expected)

    async def renew(self, held: Held) -> Held | Lost:
        """Rewrite the key on the revision held: the lease renewed, or :class:`Lost`."""
        return await self._write_holder(held.key, held.holder, held.revision)

    async def hand_over(self, held: Held, to: str) -> Held | Lost:
        """Name ``to`` as the key's holder (it takes it with :meth:`take`): the lease as ``to``
        finds it, or :class:`Lost` when it was not ``held``'s any more."""
        return await self._write_holder(held.key, to, held.revision)

    async def release(self, held: Held) -> bool:
        """Delete the key if ``held`` still has it; whether it did (``False``: lost meanwhile)."""
        return await self.write(held.key, held.revision, None) is not None

    async def _write_holder(self, key: str, holder: str, expected: int) -> Held | Lost:
        sent_at = self.clock()
        revision = await self.write(key, expected, encode_holder(holder))
        return after_write(key, holder, expected, revision, sent_at)

    async def write(self, key: str, expected: int, value: bytes | None) -> int | None:
        """Write ``value`` to ``key`` (``None``: a delete) if its last revision is still
        ``expected`` (0: none): the new revision, or ``None`` when somebody else wrote it first.
        NATS errors other than that one (out of reach, refused) are raised (:data:`BUS_ERRORS`)."""
        headers = {_EXPECTED_LAST: str(expected)}
        if value is None:
            headers[_KV_OPERATION] = "DEL"
        ttl = self.ttl_s if self.message_ttl else None
        try:
            ack = await self.js.publish(self._prefix + key, value or b"", headers=headers, msg_ttl=ttl)
        except nats.js.errors.APIError as err:
            if err.err_code in _WRONG_LAST:
                return None
            raise
        return ack.seq


class KeptLease:
    """A held lease renewed every ``period_s`` (a third of the TTL by default) until
    :meth:`release`; :attr:`lost` once a renewal found the key taken over.

    ``on_lost`` runs (once) when the lease is lost; a renewal NATS did not answer is tried again
    next period (the lease may still hold)."""

    def __init__(
        self,
        bucket: LeaseBucket,
        held: Held,
        *,
        period_s: float | None = None,
        on_lost: Callable[[Lost], None] | None = None,
    ) -> None:
        self.bucket = bucket
        self.held = held
        self.period_s = bucket.ttl_s / 3 if period_s is None else period_s
        self.lost: Lost | None = None
        self._on_lost = on_lost
        self._keeper = asyncio.create_task(self._keep(), name=f"lease {held.key}")

    @property
    def key(self) -> str:
        return self.held.key

    @property
    def revision(self) -> int:
        return self.held.revision

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)  # the renewal period, not a synchronization
            try:
                renewed = await self.bucket.renew(self.held)
            except BUS_ERRORS as exc:
                log.warning("could not renew lease %s: %s", self.held.key, exc)
                continue
            if isinstance(renewed, Lost):
                self.lost = renewed
                if self._on_lost is not None:
                    self._on_lost(renewed)
                return
            self.held = renewed

    async def stop(self) -> None:
        """Stop renewing (the key stays as it is until it expires or is written). The cancel is
        sent again while the renewal goes on: asyncio.wait_for (CPython 3.11, inside nats-py's
        requests) swallows a cancel that comes with the reply it waited for."""
        while not self._keeper.done():
            self._keeper.cancel()
            await asyncio.wait((self._keeper,), timeout=_RECANCEL_S)

    async def release(self) -> bool:
        """Stop renewing and delete the key unless it was lost; whether it was deleted here.
        Never raises for NATS: a key left behind expires after its TTL."""
        await self.stop()
        if self.lost is not None:
            return False
        try:
            return await self.bucket.release(self.held)
        except BUS_ERRORS as exc:
            log.warning(
                "could not free lease %s (it expires in %g s): %s", self.held.key, self.bucket.ttl_s, exc
            )
            return False
