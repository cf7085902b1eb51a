"""Which conversation replicas are alive: one heartbeat key per replica, renewed; the others watched.

A replica's liveness is one lease (``shared/lease.py``) in ``subjects.BUCKET_OWNERS``, key
``replica.<digest of its token>``, valued with its token and renewed every third of
``lease_ttl_s`` (:class:`~jidocode.shared.lease.KeptLease`). The bucket's entries expire
``lease_ttl_s`` after their last write. So a replica's idle KV writes are this one key, whatever
the number of conversations it has loaded: a conversation's own key (``residency.py``) is written
once when it is taken and never renewed.

A token is alive while its heartbeat is renewed: seen rewritten within ``lease_ttl_s`` on this
replica's clock (:class:`~jidocode.shared.lease.Sightings`, fed by a watch), and not deleted (a
replica that stops deletes it last). A token never seen is read once (a peer that just started
may have written it after the watch began): absent, it is dead; present, it is alive until it
goes unrenewed for ``lease_ttl_s``. No wall clock is compared across machines. A token of this
replica's own instance but another run (:func:`predecessor`) is dead at once: the same service
started again after a crash takes its busy conversations over without waiting for a TTL.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from nats.js.kv import KeyValue

from jidocode.shared.lease import BUS_ERRORS, Held, KeptLease, LeaseBucket, Lost, Seen, Sightings, is_stale

__all__ = ["HEARTBEAT_PREFIX", "Replicas", "heartbeat_key", "instance_of", "predecessor"]

log = logging.getLogger("jidocode.conversation.replicas")

#: Key prefix of the heartbeats in the owners bucket.
HEARTBEAT_PREFIX = "replica."


def heartbeat_key(token: str) -> str:
    """The heartbeat key of the replica ``token`` names (tokens hold characters no key may)."""
    return HEARTBEAT_PREFIX + hashlib.sha256(token.encode()).hexdigest()[:24]


def instance_of(token: str | None) -> str | None:
    """The instance (bus source) a replica's token names (``<source>/<random>``); ``None``: nobody."""
    return (token.rsplit("/", 1)[0] or None) if token else None


def predecessor(token: str, mine: str) -> bool:
    """Whether ``token`` is an earlier run of the instance this replica (``mine``) is: an instance
    name runs once at a time (``jidocode up`` starts a service again only after it exited and
    names it the same; a container restarted in its pod keeps its host name and pid 1), so that
    run is dead, and its conversations are taken over at once instead of after its heartbeat's
    TTL (issue 31, point 4)."""
    return token != mine and instance_of(token) == instance_of(mine) and instance_of(mine) is not None


def alive_as_seen(seen: Seen | None, now: float, ttl_s: float) -> bool | None:
    """Whether a heartbeat seen as ``seen`` is alive at ``now``; ``None``: never seen, unknown."""
    if seen is None:
        return None
    return seen.holder is not None and not is_stale(seen, now, ttl_s)


class Replicas:
    """This replica's heartbeat, and the heartbeats of the others as watched (module docstring)."""

    def __init__(self, leases: LeaseBucket, token: str) -> None:
        self.leases = leases
        self.token = token
        self.sightings = Sightings(leases.ttl_s)
        self._kept: KeptLease | None = None
        self._retake: asyncio.Task[None] | None = None
        #: Set when the heartbeat was found taken or expired: peers may have taken over.
        self.lost = asyncio.Event()

    @property
    def kv(self) -> KeyValue:
        return self.leases.kv

    async def start(self) -> None:
        """Write the heartbeat (before any conversation is claimed) and keep renewing it."""
        held = await self._take()
        self._kept = KeptLease(self.leases, held, on_lost=self._on_lost)

    async def _take(self) -> Held:
        key = heartbeat_key(self.token)
        taken = await self.leases.take(key, self.token)
        while not isinstance(taken, Held):  # expired meanwhile: read it again
            taken = await self.leases.take(key, self.token)
        return taken

    def _on_lost(self, lost: Lost) -> None:
        log.warning("heartbeat %s lost (a pause past the lease TTL?): taking it again", lost.key)
        self.lost.set()
        self._retake = asyncio.create_task(self._start_again(), name="conv-heartbeat-again")

    async def _start_again(self) -> None:
        while True:
            try:
                await self.start()
                return
            except BUS_ERRORS as exc:
                log.warning("heartbeat: %s; trying again", exc)
                await asyncio.sleep(self.leases.ttl_s / 3)  # the renewal period, not a synchronization

    async def stop_renewing(self) -> None:
        """Stop renewing and leave the heartbeat to expire (what a crash leaves behind)."""
        if self._kept is not None:
            await self._kept.stop()

    async def stop(self) -> None:
        """Stop renewing and delete the heartbeat: peers take over what is left loaded at once."""
        if self._retake is not None:
            self._retake.cancel()
            await asyncio.gather(self._retake, return_exceptions=True)
        if self._kept is not None:
            await self._kept.release()

    def note(self, entry: KeyValue.Entry, now: float) -> None:
        """A watched change of the owners bucket (other keys than heartbeats are ignored)."""
        if entry.key.startswith(HEARTBEAT_PREFIX):
            self.sightings.note_entry(entry, now)

    def alive(self, token: str, now: float) -> bool:
        """Whether ``token``'s replica is alive as known (a token never seen counts as alive
        until :meth:`resolve` reads its heartbeat). Another token of this replica's own instance
        is its predecessor, dead (:func:`predecessor`)."""
        if token == self.token:
            return True
        if predecessor(token, self.token):
            return False
        known = alive_as_seen(self.sightings.seen.get(heartbeat_key(token)), now, self.leases.ttl_s)
        return known is not False

    def unknown(self, tokens: set[str]) -> list[str]:
        """The tokens of ``tokens`` whose heartbeat was never seen."""
        seen = self.sightings.seen
        return sorted(t for t in tokens if t != self.token and heartbeat_key(t) not in seen)

    async def resolve(self, tokens: set[str]) -> None:
        """Read the heartbeat of each token never seen (a few: one per replica)."""
        for token in self.unknown(tokens):
            key = heartbeat_key(token)
            seen = await self.leases.read(key)
            if key not in self.sightings.seen:  # the watch may have seen it meanwhile
                self.sightings.seen[key] = seen  # absent: dead; present: alive for a TTL at least
