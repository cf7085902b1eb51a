"""Who runs a conversation: its key in the loaded set, its actor while owned, taking over by need.

A replica keeps ONE lease, its heartbeat (``replicas.py``), renewed every third of
``lease_ttl_s``. A conversation's ownership is its key in the loaded set (``residency.py``,
``loaded.<p>.<c>`` naming the replica's token), written once by a compare-and-set when the
replica takes it and removed when it lets it go: never renewed, so a replica's idle KV writes
do not grow with the conversations it has loaded (decision 0327).

A conversation is free when its key is absent or names a replica whose heartbeat is gone
(deleted by a replica that stopped) or stale (not rewritten for ``lease_ttl_s``: a replica that
died); taking it is a compare-and-set on the revision seen, so of two takers one wins. Every
replica watches the keys (what it learns: who holds what, and that a key it holds was taken
from it after a pause) and the heartbeats. Its scan takes over, by need (``recovery.py``), the
keys of dead replicas: those with work pending are taken first, a few at a time, the idle ones
are unmarked and wait for their next input. The journal append is fenced too (``journal.py``),
so even a paused owner that wakes up after losing a conversation cannot write.

An actor that fails (its load or later) is let go and taken again after a backoff
(:func:`backoff_delay`: exponential, capped, jittered); after ``load_attempts`` failures in a row
the conversation is failed with a ``conversation.error`` on its output and unmarked: its next
input loads it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import ConversationError
from jidocode.shared.lease import BUS_ERRORS, LeaseBucket, Seen, holder_of

from .actor import ConversationActor
from .journal import LostOwnership
from .record import ConversationRecord
from .record_store import RecordStore
from .recovery import Retry, backoff_delay, failure_payload, has_pending_work
from .replicas import Replicas, instance_of
from .residency import LOADED_PREFIX, LoadedSet, loaded_key_of
from .rewatch import Rewatched
from .settings import RuntimeSettings

__all__ = ["Owned", "Ownership", "lease_owner", "orphans_of"]

log = logging.getLogger("jidocode.conversation")

#: Asking the KV store failed (not: someone else holds the conversation).
ASK_FAILED = (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.ConnectionClosedError)
#: Reads a take makes of a key that keeps changing under it before it leaves it to the scan.
_TAKE_READS = 3
#: How long a takeover waits for its actor to be rebuilt before the next one starts.
_LOAD_WAIT_S = 30.0

#: Makes the actor of a conversation this replica has just taken.
MakeActor = Callable[[ConversationRecord], ConversationActor]
#: Told of an idle release once the key is gone (``wakeups.py`` checks for input left behind).
OnIdleRelease = Callable[[str, ConversationActor], Awaitable[None]]


# -- decisions ---------------------------------------------------------------------------


def lease_owner(value: bytes | None) -> str | None:
    """The instance (bus source) a stored holder value names (its holder is the replica's token,
    ``<source>/<random>``); ``None`` when it names nobody."""
    return instance_of(holder_of(value))


def orphans_of(holders: dict[str, Seen], owned: Sequence[str], alive: Callable[[str], bool]) -> list[str]:
    """The keys naming a replica that is not alive (this one's own are never orphans), sorted."""
    return sorted(
        key
        for key, seen in holders.items()
        if key not in owned and seen.holder is not None and not alive(seen.holder)
    )


# -- effects -----------------------------------------------------------------------------


class Owned:
    """A conversation this replica owns: its actor, the revision of its key, the actor's task."""

    def __init__(self, actor: ConversationActor, revision: int) -> None:
        self.actor = actor
        self.revision = revision
        self.task: asyncio.Task[None] | None = None


class Ownership:
    """The conversations this replica owns, the watches, and the scan that takes over by need."""

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
        #: Set by the runtime: what to do once an idle conversation's key is gone.
        self.on_idle_release: OnIdleRelease | None = None
        self.owned: dict[str, Owned] = {}
        #: Each loaded conversation's key as last seen (watched): who holds it, on which revision.
        self.holders: dict[str, Seen] = {}
        #: The bucket watches (:meth:`background`), each made again after a reconnect.
        self.watches: tuple[Rewatched, ...] = ()
        #: Conversations of this replica to take again at the next scan once due (an actor
        #: that failed, after its backoff).
        self.retries: dict[str, Retry] = {}
        self._orphans: set[str] = set()
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
        self._replicas: Replicas | None = None
        self._loaded: LoadedSet | None = None
        self._actor_tasks: set[asyncio.Task[None]] = set()
        self._jobs: set[asyncio.Task[None]] = set()
        self._ready = asyncio.Event()
        self._scan_now = asyncio.Event()
        self._takeovers = asyncio.Semaphore(settings.takeover_concurrency)

    async def open(self) -> None:
        """Bind the buckets and start the heartbeat (before anything is taken)."""
        ttl = self.settings.lease_ttl_s
        self._leases = await LeaseBucket.open(self.bus, subjects.BUCKET_OWNERS, ttl_s=ttl, history=1, ttl=ttl)
        self._loaded = LoadedSet(self.bus, self.records.kv, token=self.token)
        self._replicas = Replicas(self._leases, self.token)
        await self._replicas.start()

    def background(self) -> list[asyncio.Task[None]]:
        """The watches (made again after a reconnect: :mod:`.rewatch`) and the scan loop, started now."""
        self.watches = (
            Rewatched(self.bus, "conv-watch-heartbeats", self._watch_heartbeats),
            Rewatched(self.bus, "conv-watch-loaded", self._watch_loaded),
        )
        return [
            *(asyncio.create_task(w.run(), name=w.name) for w in self.watches),
            asyncio.create_task(self._scan_loop(), name="conv-scan"),
        ]

    async def close(self) -> None:
        """Idle conversations are released as after the idle timeout; busy ones keep their key,
        so a peer (when this heartbeat goes, last) or the next start takes them over."""
        self.closing = True
        for key, owned in list(self.owned.items()):
            idle = owned.actor.quiescent() and owned.actor.mailbox.empty()
            await self.release(key, keep_loaded=not idle, idle=idle)
        if self._actor_tasks:
            await asyncio.wait(set(self._actor_tasks), timeout=10)
        for job in self._jobs:
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        with contextlib.suppress(*BUS_ERRORS):
            await self.replicas.stop()

    @property
    def leases(self) -> LeaseBucket:
        assert self._leases is not None, "Ownership.open() first"
        return self._leases

    @property
    def replicas(self) -> Replicas:
        assert self._replicas is not None, "Ownership.open() first"
        return self._replicas

    @property
    def owners(self) -> KeyValue:
        """The heartbeats' bucket (one key per replica)."""
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

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def retake_soon(self, key: str) -> None:
        """Take ``key`` over at the next scan, which starts now."""
        self._orphans.add(key)
        self._scan_now.set()

    def _held_elsewhere(self, key: str) -> bool:
        seen = self.holders.get(key)
        return (
            seen is not None
            and seen.holder is not None
            and seen.holder != self.token
            and self.replicas.alive(seen.holder, self._now())
        )

    def maybe_free(self, key: str) -> bool:
        """Whether nobody else may hold ``key`` (no live replica seen holding it)."""
        return not self._held_elsewhere(key)

    def busy(self, key: str) -> bool:
        """Whether the conversation may have work running: loaded here and not quiescent, or
        held by another live replica (which may be running anything)."""
        owned = self.owned.get(key)
        if owned is not None:
            return not owned.actor.quiescent()
        return self._held_elsewhere(key)

    async def owner_of(self, key: str) -> str | None:
        """The instance that owns ``key`` now (``None``: nobody alive)."""
        seen = await self.loaded.read(key)
        if seen.holder is None:
            return None
        await self.replicas.resolve({seen.holder})
        return instance_of(seen.holder) if self.replicas.alive(seen.holder, self._now()) else None

    # -- taking ------------------------------------------------------------------------

    async def try_acquire(self, key: str, record: ConversationRecord) -> bool:
        """Take the conversation if nobody alive holds it; whether this replica owns it now."""
        try:
            return await self.take(key, record)
        except ASK_FAILED as exc:
            log.warning("taking %s: %s", key, exc)
            return False

    async def take(self, key: str, record: ConversationRecord, seen: Seen | None = None) -> bool:
        """Like :meth:`try_acquire`, but a failure to ask (not a holder elsewhere) raises.
        ``seen``: the key as last seen naming a dead replica (the scan's takeover)."""
        if key in self.owned:
            return True
        if self.closing or record.status != "active" or self._backing_off(key):
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
            taken = await self._take_key(key, record, seen)
        except BaseException:
            taking.set_result(None)
            raise
        finally:
            self._taking.pop(key, None)
        taking.set_result(taken)
        return taken

    def _backing_off(self, key: str) -> bool:
        retry = self.retries.get(key)
        return retry is not None and retry.due > self._now()

    async def _claim(self, key: str, seen: Seen | None = None) -> int | None:
        """Write ``key`` naming this replica unless a live replica holds it: the revision
        written, or ``None``. ``seen``: the key as last seen (else most keys were never written,
        or were removed: one write on revision 0 first, then a read)."""
        revision = await self.loaded.claim(key, 0 if seen is None else seen.revision)
        for _ in range(_TAKE_READS):
            if revision is not None:
                return revision
            # Lost: the key changed. Read again: only a live holder is a reason to leave it.
            seen = await self.loaded.read(key)
            if seen.holder is not None and seen.holder != self.token:
                await self.replicas.resolve({seen.holder})
                if self.replicas.alive(seen.holder, self._now()):
                    self.holders[key] = seen  # if it dies, the scan takes the conversation over
                    return None
            revision = await self.loaded.claim(key, seen.revision)
        return revision

    async def _take_key(self, key: str, record: ConversationRecord, seen: Seen | None = None) -> bool:
        revision = await self._claim(key, seen)
        if revision is None:
            return False
        self.holders[key] = Seen(revision, self.token, self._now())
        owned = Owned(self.make_actor(record), revision)
        self.owned[key] = owned
        self.loads += 1
        if not self.closing:
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
        except Exception as exc:
            log.exception("conversation %s failed; letting it go for a rebuild", key)
            if self.owned.get(key) is owned:
                await self._after_failure(key, exc)
        else:
            self.retries.pop(key, None)
            if self.owned.get(key) is owned:
                await self.release(key, keep_loaded=False, idle=True)

    async def _report_failure(self, key: str, exc: Exception, failures: int) -> None:
        project_id, conversation_id = key.split(".", 1)
        try:
            await self.bus.nc.publish(
                subjects.conversation_out(project_id, conversation_id, ConversationError.TYPE),
                failure_payload(self.bus.source, key, exc, failures),
            )
        except nats.errors.Error as problem:
            log.warning("reporting the failure of %s: %s", key, problem)

    async def _after_failure(self, key: str, exc: Exception) -> None:
        """Let a failed actor go; take it again after a backoff, or fail it after too many."""
        failures = (self.retries[key].failures if key in self.retries else 0) + 1
        if failures >= self.settings.load_attempts:
            self.retries.pop(key, None)
            await self.release(key, keep_loaded=False)
            await self._report_failure(key, exc, failures)
            return
        delay = backoff_delay(
            failures, self.settings.load_retry_base_s, self.settings.load_retry_max_s, random.random()
        )
        self.retries[key] = Retry(failures, self._now() + delay)
        await self.release(key, keep_loaded=True)
        asyncio.get_running_loop().call_later(delay, self.retake_soon, key)

    # -- letting go --------------------------------------------------------------------

    async def release(self, key: str, *, keep_loaded: bool, idle: bool = False) -> None:
        """Let the conversation go: actor, then its key.

        ``keep_loaded``: it still needs an owner (this replica stops, or its actor
        failed), so its key stays for a peer or the next start (or this replica's retry).
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
            try:
                await self.loaded.unmark(key, owned.revision)  # a peer's newer claim stays
            except ASK_FAILED as exc:
                log.warning("unmarking %s: %s", key, exc)
            else:
                self._forget(key, owned.revision)  # the watch may miss a delete purged at once
        self._notify()

    async def hand_over(self, key: str) -> None:
        """This replica is stopping: leave the conversation to a peer (which takes it when this
        heartbeat goes) or to the next start, by claiming its key."""
        try:
            await self._claim(key)
        except BUS_ERRORS as exc:
            log.debug("handing over %s: %s", key, exc)

    async def _lose(self, key: str, owned: Owned) -> None:
        """Another replica took ``key`` (this one paused past its heartbeat): stop its actor."""
        log.warning("conversation %s was taken over: stopping its actor", key)
        if self.owned.get(key) is owned:
            del self.owned[key]
        if owned.task is not None:
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()
        self._notify()

    # -- watching ----------------------------------------------------------------------

    async def _watch_heartbeats(self) -> None:
        watcher = await self.owners.watchall()
        try:
            async for entry in watcher:
                if entry is not None:
                    self.replicas.note(entry, self._now())
                    if entry.operation in ("DEL", "PURGE"):
                        self._scan_now.set()  # a replica stopped: take over what it left at once
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def _watch_loaded(self) -> None:
        watcher = await self.records.kv.watch(LOADED_PREFIX + ">")
        try:
            async for entry in watcher:
                if entry is None:
                    self._ready.set()
                    continue
                key = loaded_key_of(entry.key)
                if key is not None and entry.revision is not None:
                    self._key_changed(key, entry)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    def _key_changed(self, key: str, entry: KeyValue.Entry) -> None:
        revision = entry.revision or 0
        known = self.holders.get(key)
        if known is not None and known.revision >= revision:
            return  # older than what this replica wrote or read
        holder = holder_of(entry.value) if entry.operation is None else None
        if holder is None:
            self.holders.pop(key, None)
        else:
            self.holders[key] = Seen(revision, holder, self._now())
        owned = self.owned.get(key)
        if owned is not None and revision > owned.revision and holder != self.token:
            self._spawn(self._lose(key, owned))

    def _spawn(self, job: Awaitable[None]) -> None:
        task = asyncio.ensure_future(job)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    # -- the scan: failover, by need ---------------------------------------------------

    async def scan_once(self) -> None:
        """Take over the conversations that need an owner.

        Those whose key names a dead replica (one that stopped or died: read at start, or
        watched), by need: the ones with work pending are taken, the idle ones unmarked. And
        this replica's own conversations whose actor failed, once their backoff is due.
        """
        tokens = {seen.holder for seen in self.holders.values() if seen.holder is not None}
        await self.replicas.resolve(tokens)
        now = self._now()
        dead = orphans_of(self.holders, list(self.owned), lambda token: self.replicas.alive(token, now))
        if dead:
            await self._recover(dead)
        due = sorted(key for key in self._orphans if not self._backing_off(key))
        self._orphans -= set(due)
        for key in due:
            if key not in self.owned:
                await self._take_over(key, None)

    async def _recover(self, keys: list[str]) -> None:
        """Sort ``keys`` by need; take over the ones with work pending, then unmark the others."""
        seen = {key: self.holders[key] for key in keys if key in self.holders}

        async def needs(key: str) -> bool:
            async with self._takeovers:
                project_id, conversation_id = key.split(".", 1)
                return await has_pending_work(self.bus, project_id, conversation_id)

        pending = await asyncio.gather(*(needs(key) for key in seen))
        busy = [key for key, need in zip(seen, pending, strict=True) if need]
        idle = [key for key, need in zip(seen, pending, strict=True) if not need]
        log.info(
            "taking over %d conversations with work pending; %d idle ones wait for input",
            len(busy),
            len(idle),
        )
        await asyncio.gather(*(self._take_over(key, seen[key]) for key in busy))
        await asyncio.gather(*(self._unmark_idle(key, seen[key]) for key in idle))

    async def _take_over(self, key: str, seen: Seen | None) -> None:
        """Take over ``key`` if its conversation still runs (a few at a time, each until its
        actor is rebuilt); unmark it when stopped or gone."""
        async with self._takeovers:
            record = await self._record_of(key)
            if record is None or record.status != "active":
                await self._unmark_idle(key, seen)  # stopped or gone: it needs no owner
                return
            try:
                taken = await self.take(key, record, seen)
            except ASK_FAILED as exc:
                log.warning("taking over %s: %s", key, exc)
                return
            owned = self.owned.get(key)
            if taken and owned is not None and owned.task is not None:
                ready = asyncio.ensure_future(owned.actor.ready.wait())
                await asyncio.wait({ready, owned.task}, timeout=_LOAD_WAIT_S, return_when="FIRST_COMPLETED")
                ready.cancel()

    async def _record_of(self, key: str) -> ConversationRecord | None:
        project_id, conversation_id = key.split(".", 1)
        try:
            return await self.records.get(project_id, conversation_id)
        except NotFound:
            return None

    async def _unmark_idle(self, key: str, seen: Seen | None) -> None:
        try:
            await self.loaded.unmark(key, None if seen is None else seen.revision)
        except ASK_FAILED as exc:
            log.debug("unmarking %s: %s", key, exc)
            return
        self._forget(key, None if seen is None else seen.revision)

    def _forget(self, key: str, revision: int | None) -> None:
        """``key`` was removed at ``revision`` (``None``: whatever it held): forget who held it."""
        known = self.holders.get(key)
        if known is not None and (revision is None or known.revision <= revision):
            self.holders.pop(key, None)

    async def _scan_loop(self) -> None:
        interval = self.settings.lease_ttl_s / 3
        try:
            await asyncio.wait_for(self._ready.wait(), 30)
        except TimeoutError:
            log.warning("no loaded set after 30 s; scanning anyway")
        await self._read_loaded_set()
        while True:
            await self._scan_guarded()
            self.scans += 1
            self._notify()
            self._scan_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._scan_now.wait(), interval)

    async def _read_loaded_set(self) -> None:
        """What a replica that stopped or died left loaded, read whole once (a watch's first
        replay may end early): never past conversations."""
        while True:
            try:
                for key, seen in (await self.loaded.entries()).items():
                    if key not in self.holders or self.holders[key].revision < seen.revision:
                        self.holders[key] = seen
                return
            except BUS_ERRORS as exc:
                log.warning("reading the loaded set: %s; trying again", exc)
                await asyncio.sleep(self.settings.lease_ttl_s / 3)  # the scan period, not a synchronization

    async def _scan_guarded(self) -> None:
        try:
            await self.scan_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ownership scan failed")
