"""Who runs a conversation: its lease, its actor while held, and taking over from a dead owner.

``subjects.BUCKET_OWNERS``, key ``<p>.<c>``, a bucket whose entries expire after
``lease_ttl_s``, written through the one lease primitive (``shared/lease.py``). A
replica owns a conversation while it holds the lease: it takes it by a
compare-and-set write that succeeds only when nobody holds it, and renews it every
third of the TTL by a compare-and-set on the revision it holds. A dead owner
stops renewing; its lease expires and the next scan of another replica takes the
conversation over, rebuilding it from the journal (the scan looks at leases it saw
and at the loaded set, never at every conversation). The journal append is fenced
too (see ``journal.py``), so even a paused owner that wakes up after losing its
lease cannot write.

The decisions are pure functions (:func:`lease_is_free`, :func:`stale_leases`,
:func:`sort_marks`, :func:`lease_owner`, and the lease's own in ``shared/lease.py``);
:class:`Ownership` does the bus round trips around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import NotFound
from jidocode.shared.lease import BUS_ERRORS, Held, LeaseBucket, Lost, Seen, holder_of

from .actor import ConversationActor
from .journal import LostOwnership
from .record import ConversationRecord
from .record_store import RecordStore
from .residency import LoadedSet
from .settings import RuntimeSettings

__all__ = [
    "Marks",
    "Owned",
    "Ownership",
    "lease_is_free",
    "lease_owner",
    "sort_marks",
    "stale_leases",
]

log = logging.getLogger("jidocode.conversation")

#: Asking the KV store failed (not: someone else holds the lease).
ASK_FAILED = (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.ConnectionClosedError)
_LET_GO_FAILED = (nats.js.errors.KeyWrongLastSequenceError, *ASK_FAILED)
#: Taking a key never written (or expired): a write on revision 0, without reading it first.
_NEVER_WRITTEN = Seen()
#: Reads a take makes of a key that keeps changing under it before it leaves it to the scan.
_TAKE_READS = 3

#: Makes the actor of a conversation this replica has just taken.
MakeActor = Callable[[ConversationRecord], ConversationActor]
#: Told of an idle release once the lease is gone (``wakeups.py`` checks for input left behind).
OnIdleRelease = Callable[[str, ConversationActor], Awaitable[None]]


# -- decisions ---------------------------------------------------------------------------


def lease_owner(value: bytes | None) -> str | None:
    """The instance (bus source) holding a lease from its stored value (its holder is the
    replica's token, ``<source>/<random>``); ``None`` when it names nobody."""
    holder = holder_of(value)
    return (holder.rsplit("/", 1)[0] or None) if holder else None


def lease_is_free(seen: float | None, now: float, ttl: float) -> bool:
    """Whether a lease last seen written at ``seen`` (monotonic; ``None``: never) may be free."""
    return seen is None or now - seen > ttl


def stale_leases(lease_seen: Mapping[str, float], owned: Collection[str], now: float, ttl: float) -> set[str]:
    """Leases of others not seen renewed within ``ttl``: their holders may be dead."""
    return {key for key, seen in lease_seen.items() if key not in owned and lease_is_free(seen, now, ttl)}


@dataclass(frozen=True)
class Marks:
    """What the loaded set said of conversations whose lease went: see :func:`sort_marks`."""

    #: In the loaded set: they need an owner.
    take: set[str] = field(default_factory=set)
    #: Asking failed: ask again at the next scan.
    ask_again: set[str] = field(default_factory=set)
    #: Stale leases of conversations released cleanly: nothing to take over, forget them.
    forget: set[str] = field(default_factory=set)


def sort_marks(keys: Sequence[str], marks: Sequence[bool | BaseException], stale: Collection[str]) -> Marks:
    """Sort ``keys`` by the loaded set's answer for each (``marks``, in the same order)."""
    out = Marks()
    for key, marked in zip(keys, marks, strict=True):
        if isinstance(marked, BaseException):
            out.ask_again.add(key)
        elif marked:
            out.take.add(key)
        elif key in stale:
            out.forget.add(key)
    return out


# -- effects -----------------------------------------------------------------------------


class Owned:
    """A conversation this replica owns: its actor, the lease it holds, the actor's task."""

    def __init__(self, actor: ConversationActor, held: Held) -> None:
        self.actor = actor
        self.held = held
        self.task: asyncio.Task[None] | None = None
        #: Held while the lease is written (renewed, deleted): a release never deletes with a
        #: revision a renewal in flight is about to replace (the lease would then stay behind).
        self.lease_lock = asyncio.Lock()


class Ownership:
    """The conversations this replica owns, and the scan that renews and takes over leases."""

    def __init__(
        self,
        bus: Bus,
        settings: RuntimeSettings,
        records: RecordStore,
        *,
        token: str,
        make_actor: MakeActor,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.records = records
        self.token = token
        self.make_actor = make_actor
        #: Set by the runtime: what to do once an idle conversation's lease is gone.
        self.on_idle_release: OnIdleRelease | None = None
        self.owned: dict[str, Owned] = {}
        #: When a lease was last written by anyone (monotonic clock): a lease renewed
        #: within the TTL is held, so the scan does not even try to take it.
        self.lease_seen: dict[str, float] = {}
        #: Conversations to take over at the next scan: left loaded by a replica that stopped
        #: or died (read at start), or by an actor of ours that crashed.
        self._orphans: set[str] = set()
        #: Leases deleted since the last scan: a conversation still in the loaded set needs an owner.
        self._released: set[str] = set()
        #: Acquisitions in progress, so two callers on this replica wait for the same one.
        self._taking: dict[str, asyncio.Future[bool | None]] = {}
        #: Releases under way.
        self._releasing = 0
        #: Actors loaded (each one a journal read) and ownership scans done, since start.
        self.loads = 0
        self.scans = 0
        self.closing = False
        self._changed = asyncio.Event()
        self._leases: LeaseBucket | None = None
        self._loaded: LoadedSet | None = None
        self._actor_tasks: set[asyncio.Task[None]] = set()
        self._leases_ready = asyncio.Event()
        self._orphans_read = False
        self._scan_now = asyncio.Event()

    async def open(self) -> None:
        ttl = self.settings.lease_ttl_s
        self._leases = await LeaseBucket.open(self.bus, subjects.BUCKET_OWNERS, ttl_s=ttl, history=1, ttl=ttl)
        self._loaded = LoadedSet(self.bus, self.records.kv, token=self.token)

    def background(self) -> list[asyncio.Task[None]]:
        """The lease watch and the scan loop, started now."""
        return [
            asyncio.create_task(self._watch_leases(), name="conv-watch-leases"),
            asyncio.create_task(self._scan_loop(), name="conv-scan"),
        ]

    async def close(self) -> None:
        """Idle conversations are released as after the idle timeout; busy ones stay in the
        loaded set, so a peer (when it sees their leases go) or the next start takes them over."""
        self.closing = True
        for key, owned in list(self.owned.items()):
            idle = owned.actor.quiescent() and owned.actor.mailbox.empty()
            await self.release(key, keep_loaded=not idle, idle=idle)
        if self._actor_tasks:
            await asyncio.wait(set(self._actor_tasks), timeout=10)

    @property
    def leases(self) -> LeaseBucket:
        assert self._leases is not None, "Ownership.open() first"
        return self._leases

    @property
    def owners(self) -> KeyValue:
        """The leases' bucket (watched, and read by lists)."""
        return self.leases.kv

    @property
    def loaded(self) -> LoadedSet:
        assert self._loaded is not None, "Ownership.open() first"
        return self._loaded

    # -- waiting on changes ------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Return once ``predicate()`` holds, checked whenever a conversation is loaded or
        released or a scan ends (``TimeoutError`` after ``timeout`` s)."""

        async def _wait() -> None:
            while not predicate():
                await self._changed.wait()

        await asyncio.wait_for(_wait(), timeout)

    def settled(self) -> bool:
        """Nothing loaded, and no load or release under way."""
        return not self.owned and not self._releasing and not self._taking

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def retake_soon(self, key: str) -> None:
        """Take ``key`` over at the next scan, which starts now."""
        self._orphans.add(key)
        self._scan_now.set()

    def maybe_free(self, key: str) -> bool:
        """Whether nobody may hold ``key``'s lease (none seen renewed within the TTL)."""
        now = asyncio.get_running_loop().time()
        return lease_is_free(self.lease_seen.get(key), now, self.settings.lease_ttl_s)

    def busy(self, key: str) -> bool:
        """Whether the conversation may have work running: loaded here and not quiescent, or
        held by another replica (which may be running anything)."""
        owned = self.owned.get(key)
        if owned is not None:
            return not owned.actor.quiescent()
        return key in self.lease_seen and not self.maybe_free(key)

    # -- taking ------------------------------------------------------------------------

    async def try_acquire(self, key: str, record: ConversationRecord) -> bool:
        """Take the conversation if nobody holds its lease; whether this replica owns it now."""
        try:
            return await self.take(key, record)
        except ASK_FAILED as exc:
            log.warning("lease %s: %s", key, exc)
            return False

    async def take(self, key: str, record: ConversationRecord) -> bool:
        """Like :meth:`try_acquire`, but a failure to ask (not a lease held elsewhere) raises."""
        if key in self.owned:
            return True
        if self.closing or record.status != "active":
            return False
        pending = self._taking.get(key)
        if pending is not None:
            result = await asyncio.shield(pending)
            if result is None:  # the attempt under way failed to ask: so does this one
                raise nats.errors.TimeoutError
            return result
        taking: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self._taking[key] = taking
        try:
            taken = await self._take_lease(key, record)
        except BaseException:
            taking.set_result(None)
            raise
        finally:
            self._taking.pop(key, None)
        taking.set_result(taken)
        return taken

    async def _write_lease(self, key: str) -> Held | None:
        """Take the lease if nobody holds it: the lease held, or ``None``."""
        # Most keys were never written (or expired): one write on revision 0; else read it first.
        taken = await self.leases.take(key, self.token, _NEVER_WRITTEN)
        # Lost: the key changed between the read and the write. Read again: only a holder seen
        # now is a reason to leave it (a free key that moved on, e.g. a second delete marker, is
        # taken; giving up there left a released conversation with input and no owner).
        for _ in range(_TAKE_READS):
            if not isinstance(taken, Lost):
                break
            taken = await self.leases.take(key, self.token)
        return taken if isinstance(taken, Held) else None

    async def _take_lease(self, key: str, record: ConversationRecord) -> bool:
        held = await self._write_lease(key)
        if held is None:
            # Someone holds it: if its holder stops renewing, the scan takes it over.
            self.lease_seen.setdefault(key, asyncio.get_running_loop().time())
            return False
        owned = Owned(self.make_actor(record), held)
        self.owned[key] = owned
        self.loads += 1
        try:
            await self.loaded.mark(key)
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            # Only a restart after a crash needs it; the lease still guards ownership.
            log.warning("marking %s loaded: %s", key, exc)
        if self.owned.get(key) is owned and not self.closing:
            owned.task = asyncio.create_task(self._run_actor(key, owned), name=f"conv-actor-{key}")
            self._actor_tasks.add(owned.task)
            owned.task.add_done_callback(self._actor_tasks.discard)
        log.info("%s owns conversation %s", self.token, key)
        self._notify()
        return key in self.owned

    async def _run_actor(self, key: str, owned: Owned) -> None:
        try:
            await owned.actor.run()
        except asyncio.CancelledError:
            raise
        except LostOwnership as exc:
            log.warning("%s", exc.message)
            if self.owned.get(key) is owned:
                del self.owned[key]
                self._notify()
        except Exception:
            log.exception("conversation %s crashed; releasing it for a rebuild", key)
            if self.owned.get(key) is owned:
                await self.release(key, keep_loaded=True)
                self.retake_soon(key)
        else:
            if self.owned.get(key) is owned:
                await self.release(key, keep_loaded=False, idle=True)

    # -- letting go --------------------------------------------------------------------

    async def release(self, key: str, *, keep_loaded: bool, idle: bool = False) -> None:
        """Let the conversation go: actor, input consumer, lease.

        ``keep_loaded``: it still needs an owner (this replica stops, or its actor
        crashed), so it stays in the loaded set for a peer or the next start.
        ``idle``: released for being idle; input that arrived after the last the
        actor applied (nothing is lost: it is in ``JIDO_CONV_IN``) loads it again.
        """
        owned = self.owned.pop(key, None)
        if owned is None:
            return
        self._releasing += 1
        try:
            await self._let_go(key, owned, keep_loaded=keep_loaded)
            if idle and self.on_idle_release is not None:
                await self.on_idle_release(key, owned.actor)
        finally:
            self._releasing -= 1
            self._notify()

    async def _let_go(self, key: str, owned: Owned, *, keep_loaded: bool) -> None:
        if owned.task is not None and owned.task is not asyncio.current_task():
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()
        if not keep_loaded:
            # Before the lease goes: a peer that sees the lease deleted then finds no key.
            try:
                await self.loaded.unmark(key)
            except _LET_GO_FAILED as exc:
                log.warning("unmarking %s: %s", key, exc)
        async with owned.lease_lock:
            with contextlib.suppress(*BUS_ERRORS):
                await self.leases.release(owned.held)  # a lease lost meanwhile is left alone
        self.lease_seen.pop(key, None)
        self._notify()

    async def hand_over(self, key: str) -> None:
        """This replica is stopping: leave the conversation to a peer (it sees the lease deleted
        with the key still in the loaded set) or to the next start."""
        try:
            await self.loaded.mark(key)
            held = await self._write_lease(key)
            if held is not None:
                await self.leases.release(held)
        except BUS_ERRORS as exc:
            log.debug("handing over %s: %s", key, exc)

    # -- renewing ----------------------------------------------------------------------

    async def _renew(self, key: str, owned: Owned) -> None:
        async with owned.lease_lock:
            if self.owned.get(key) is not owned:
                return  # released meanwhile
            await self._renew_locked(key, owned)

    async def _renew_locked(self, key: str, owned: Owned) -> None:
        try:
            renewed = await self.leases.renew(owned.held)
        except BUS_ERRORS as exc:
            log.warning("renewing lease of %s: %s", key, exc)
            return
        if isinstance(renewed, Held):
            owned.held = renewed
            return
        log.warning("lease of %s lost: stopping its actor", key)
        if self.owned.get(key) is owned:
            del self.owned[key]
        if owned.task is not None:
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()
        self._notify()

    async def _watch_leases(self) -> None:
        watcher = await self.owners.watchall()
        loop = asyncio.get_running_loop()
        try:
            async for entry in watcher:
                if entry is None:
                    self._leases_ready.set()
                elif entry.operation in ("DEL", "PURGE"):
                    self._lease_deleted(entry.key)
                else:
                    self.lease_seen[entry.key] = loop.time()
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    def _lease_deleted(self, key: str) -> None:
        self.lease_seen.pop(key, None)
        if self._leases_ready.is_set() and key not in self.owned:
            self._released.add(key)
            self._scan_now.set()

    # -- the scan: failover ------------------------------------------------------------

    async def scan_once(self) -> None:
        """Renew this replica's leases, and take over conversations that need an owner.

        Those are in the loaded set with nobody holding their lease: left by a replica
        that stopped or died (read at start, or seen when their lease was deleted or went
        unrenewed for a TTL) or by an actor of ours that crashed. A lease that went
        unrenewed is taken over only when its conversation is still in the loaded set (a
        clean release removes it first), so a watcher running late never reloads an idle
        conversation. Loaded conversations only: never past ones.
        """
        # Renew every lease at once: one slow round trip must not make the others late.
        await asyncio.gather(*(self._renew(key, owned) for key, owned in list(self.owned.items())))
        candidates, self._orphans = self._orphans, set()
        now = asyncio.get_running_loop().time()
        stale = stale_leases(self.lease_seen, self.owned, now, self.settings.lease_ttl_s)
        maybe, self._released = sorted((self._released | stale) - self.owned.keys() - candidates), set()
        if maybe:
            marks = sort_marks(
                maybe,
                await asyncio.gather(*(self.loaded.has(key) for key in maybe), return_exceptions=True),
                stale,
            )
            self._released |= marks.ask_again
            candidates |= marks.take
            for key in marks.forget:
                self.lease_seen.pop(key, None)  # released cleanly: nothing to take over
        for key in sorted(candidates):
            if key not in self.owned and self.maybe_free(key):
                await self._take_over(key)

    async def _take_over(self, key: str) -> None:
        """Take over ``key`` if its conversation still runs; unmark it when stopped or gone."""
        project_id, conversation_id = key.split(".", 1)
        try:
            record: ConversationRecord | None = await self.records.get(project_id, conversation_id)
        except NotFound:
            record = None
        if record is not None and record.status == "active":
            await self.try_acquire(key, record)
            return
        # Stopped or gone: it needs no owner.
        self.lease_seen.pop(key, None)
        try:
            await self.loaded.unmark(key)
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            log.debug("unmarking %s: %s", key, exc)

    async def _scan_loop(self) -> None:
        interval = self.settings.lease_ttl_s / 3
        try:
            await asyncio.wait_for(self._leases_ready.wait(), 30)
        except TimeoutError:
            log.warning("no initial leases after 30 s; scanning anyway")
        while True:
            await self._scan_guarded()
            self.scans += 1
            self._notify()
            self._scan_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._scan_now.wait(), interval)

    async def _scan_guarded(self) -> None:
        try:
            if not self._orphans_read:
                # What a replica that stopped or died left loaded (never past conversations).
                self._orphans |= await self.loaded.keys()
                self._orphans_read = True
            await self.scan_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ownership scan failed")
