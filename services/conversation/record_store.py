"""The conversation records one replica knows: read when needed, followed from the bucket's changes.

``subjects.BUCKET_CONVERSATIONS``, key ``<p>.<c>``: a :class:`ConversationRecord`
(status ``active``, ``stopped`` or ``deleted``, settings). A replica reads a record
when it needs it and follows the bucket's changes from its start (never reading all
records: starting takes the same time however many conversations exist). What it
read or saw written is kept (:data:`KNOWN_MAX` at most, the oldest dropped first).

The decisions are pure functions (:func:`is_newer`, :func:`started_record`,
:func:`stopped_record`, :func:`reuse_blocked_until`, :func:`limits_of`); the
:class:`RecordStore` reads and writes the bucket around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy
from nats.js.kv import KeyValue
from pydantic import ValidationError

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import now_iso
from jidocode.shared.errors import Conflict, NotFound

from .compaction import compaction_limits
from .core import Limits
from .deletion import reusable_at
from .record import ConversationRecord, record_key, title_of, write_title

__all__ = [
    "KNOWN_MAX",
    "Known",
    "RecordStore",
    "is_newer",
    "limits_of",
    "reuse_blocked_until",
    "started_record",
    "stopped_record",
]

log = logging.getLogger("jidocode.conversation")

_RECORDS_STREAM = f"KV_{subjects.BUCKET_CONVERSATIONS}"
_RECORDS_PREFIX = f"$KV.{subjects.BUCKET_CONVERSATIONS}."
#: Records kept in memory at most (a record not kept is read again when needed).
KNOWN_MAX = 10_000
#: Compare-and-set attempts before a write gives up on a record that keeps changing.
_CAS_ATTEMPTS = 8

#: A record as known: the revision it was read at, and the record (``None``: deleted or absent).
Known = tuple[int, ConversationRecord | None]
#: Told of every record change seen: its key and the record (``None``: deleted).
OnChange = Callable[[str, ConversationRecord | None], Awaitable[None]]


# -- decisions ---------------------------------------------------------------------------


def is_newer(known: Known | None, revision: int) -> bool:
    """Whether a record read at ``revision`` replaces what is ``known`` of it."""
    return known is None or known[0] < revision


def reuse_blocked_until(known: Known | None, now: datetime) -> datetime | None:
    """When the id of a deleted conversation may be started again, while that is still ahead
    of ``now``; ``None`` when nothing stops a start (no tombstone, or its time has passed)."""
    if known is None or known[1] is None or known[1].status != "deleted":
        return None
    again = reusable_at(known[1].updated_at)
    return again if now < again else None


def started_record(
    project_id: str,
    conversation_id: str,
    existing: ConversationRecord | None,
    settings: dict[str, Any],
    now: str,
) -> ConversationRecord:
    """The record a ``start`` writes: active, ``settings`` over those it had, its creation
    time and title kept when it existed."""
    return ConversationRecord(
        project_id=project_id,
        conversation_id=conversation_id,
        status="active",
        settings={**(existing.settings if existing else {}), **settings},
        created_at=existing.created_at if existing else now,
        updated_at=now,
        title=existing.title if existing else "",
    )


def stopped_record(current: ConversationRecord, *, cancelled: bool, now: str) -> ConversationRecord:
    """``current`` stopped; resumed when started again if the stop cancelled work (or an
    earlier one did)."""
    return current.model_copy(
        update={
            "status": "stopped",
            "updated_at": now,
            "resume_on_start": cancelled or current.resume_on_start,
        }
    )


def limits_of(record: ConversationRecord, base: Limits) -> Limits:
    """The limits a conversation runs with: ``base`` with the record's ``max_turns`` and
    compaction settings."""
    max_turns = record.settings.get("max_turns")
    limits = base
    if isinstance(max_turns, int) and max_turns >= 1:
        limits = limits.model_copy(update={"max_turns": max_turns})
    return compaction_limits(limits, record.settings)


def _unknown(project_id: str, conversation_id: str, known: Known) -> NotFound:
    gone = " (deleted)" if known[1] is not None else ""
    return NotFound(
        f"unknown conversation {conversation_id!r} in project {project_id!r}{gone}",
        details={"project_id": project_id, "conversation_id": conversation_id},
    )


# -- the store ---------------------------------------------------------------------------


class RecordStore:
    """The records bucket as one replica sees it (see the module docstring)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        #: Records by key, with the revision they were read at: those this replica read
        #: or saw written since it started (never all of them), the oldest dropped first.
        self.known: OrderedDict[str, Known] = OrderedDict()
        self._kv: KeyValue | None = None
        #: The follow of the bucket's changes (:meth:`follow`), and what it tells.
        self._follow: Subscription | None = None
        self._on_change: OnChange | None = None
        #: Times the follow was made again after a reconnect; reads begun before the last one
        #: are not kept (:meth:`_keep`).
        self.refollows = 0

    async def open(self) -> None:
        self._kv = await self.bus.kv(subjects.BUCKET_CONVERSATIONS, history=1)

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "RecordStore.open() first"
        return self._kv

    def remember(self, key: str, revision: int, record: ConversationRecord | None) -> None:
        """Keep ``record`` (``None``: deleted) unless a newer revision is known."""
        if not is_newer(self.known.get(key), revision):
            return
        self.known[key] = (revision, record)
        self.known.move_to_end(key)
        while len(self.known) > KNOWN_MAX:
            self.known.popitem(last=False)

    async def follow(self, on_change: OnChange) -> None:
        """Follow the record changes from now on (what is older is read on demand).

        After a reconnect the follow is made again at once (a restarted server lost its
        consumer, and the client's own reset waits for two missed heartbeats: 10-20 s of
        changes unseen) and what was known is read again when next needed: a change made while
        the connection was away was not seen."""
        self._on_change = on_change
        self._follow = await self._subscribe(on_change)
        self.bus.on_reconnect(self._refollow)

    async def unfollow(self) -> None:
        sub, self._follow = self._follow, None
        if sub is not None:
            with contextlib.suppress(Exception):  # the connection may be closing
                await sub.unsubscribe()

    async def _refollow(self) -> None:
        """The connection came back: follow anew, then forget what was known (see :meth:`follow`)."""
        delay = 0.2
        for _ in range(30):
            if self._follow is None or self._on_change is None:
                return  # not following (any more)
            try:
                fresh = await self._subscribe(self._on_change)
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
                log.info("record follow after a reconnect: %s; trying again", exc)
                await asyncio.sleep(delay)  # JetStream may still be starting
                delay = min(delay * 2, 2.0)
                continue
            old, self._follow = self._follow, fresh
            self.refollows += 1
            self.known.clear()
            with contextlib.suppress(Exception):  # gone with the old server, most likely
                await old.unsubscribe()
            return
        log.warning("record follow: not made again after a reconnect; its heartbeats will reset it")

    def _keep(self, key: str, revision: int, record: ConversationRecord | None, read_at: int) -> None:
        """Remember a record read while the follow was the ``read_at``-th one (a read begun
        before a reconnect may predate changes the follow never saw: not kept)."""
        if read_at == self.refollows:
            self.remember(key, revision, record)

    async def _subscribe(self, on_change: OnChange) -> Subscription:
        async def changed(msg: Msg) -> None:
            key = msg.subject[len(_RECORDS_PREFIX) :]
            operation = (msg.headers or {}).get("KV-Operation")
            record: ConversationRecord | None = None
            if operation not in ("DEL", "PURGE") and msg.data:
                try:
                    record = ConversationRecord.model_validate_json(msg.data)
                except ValidationError:
                    log.warning("bad conversation record %s", key)
                    return
            self.remember(key, msg.metadata.sequence.stream, record)
            await on_change(key, record)

        sub: Subscription = await self.bus.js.subscribe(
            f"{_RECORDS_PREFIX}*.*",
            stream=_RECORDS_STREAM,
            cb=changed,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        return sub

    async def get(self, project_id: str, conversation_id: str) -> ConversationRecord:
        """The conversation's record (as known, else read); ``NotFound`` when unknown or deleted."""
        key = record_key(project_id, conversation_id)
        known = self.known.get(key)
        if known is None:
            read_at = self.refollows
            try:
                entry = await self.kv.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                known = (0, None)
            else:
                assert entry.value is not None
                known = (entry.revision or 0, ConversationRecord.model_validate_json(entry.value))
                self._keep(key, *known, read_at=read_at)
        if known[1] is None or known[1].status == "deleted":
            raise _unknown(project_id, conversation_id, known)
        return known[1]

    async def current(self, project_id: str, conversation_id: str) -> ConversationRecord | None:
        """The record as stored now: as known (what this replica wrote, read, or saw change on
        the bucket it follows), else read from the bucket; ``None`` when it is deleted or cannot
        be read.

        A change written on another replica is known once the watch delivers it: the server
        sends it to the watch as it stores it, before the writer hears back, so a message sent
        after the writer's answer (``start`` then a user message) finds it known here."""
        key = record_key(project_id, conversation_id)
        known = self.known.get(key)
        if known is not None:
            return known[1]
        return await self._read_current(key)

    async def _read_current(self, key: str) -> ConversationRecord | None:
        """The record read from the bucket, and remembered; ``None`` when it cannot be read."""
        read_at = self.refollows
        try:
            entry = await self.kv.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as exc:
            log.debug("record %s: %s", key, exc)
            return None
        if not entry.value:
            return None
        try:
            record = ConversationRecord.model_validate_json(entry.value)
        except ValidationError:
            return None
        self._keep(key, entry.revision or 0, record, read_at=read_at)
        return record

    def check_reusable(self, key: str, conversation_id: str, now: datetime) -> None:
        """``Conflict`` when ``key`` was deleted too recently for its id to be started again."""
        tomb = self.known.get(key)
        again = reuse_blocked_until(tomb, now)
        if again is None or tomb is None or tomb[1] is None:
            return
        raise Conflict(
            f"conversation {conversation_id!r} was deleted at {tomb[1].updated_at}; its id can "
            f"be started again from {again.isoformat(timespec='seconds')} (or start a new one)",
            details={"conversation_id": conversation_id, "reusable_at": again.isoformat()},
        )

    async def put(self, key: str, record: ConversationRecord) -> None:
        """Write ``record`` as it is (no compare-and-set) and remember it."""
        revision = await self.kv.put(key, record.model_dump_json().encode())
        self.remember(key, revision, record)

    async def write_stopped(self, key: str, *, cancelled: bool) -> ConversationRecord:
        """Mark the record stopped, compare-and-set on the revision read now: a ``start`` that
        changed it while the stop waited keeps its settings (the stop still stops it)."""
        for _ in range(_CAS_ATTEMPTS):
            try:
                entry = await self.kv.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                raise NotFound(f"unknown conversation {key!r}", details={"key": key}) from None
            current = ConversationRecord.model_validate_json(entry.value or b"{}")
            stopped = stopped_record(current, cancelled=cancelled, now=now_iso())
            try:
                revision = await self.kv.update(key, stopped.model_dump_json().encode(), last=entry.revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # written meanwhile: read it again
            self.remember(key, revision, stopped)
            return stopped
        raise Conflict(
            f"conversation {key!r} kept changing while it was stopped; try again", details={"key": key}
        )

    async def write_title(self, key: str, text: str) -> None:
        """Name the conversation after ``text`` (its first user message) unless it has a title."""
        titled = await write_title(self.kv, key, title_of(text))
        if titled is not None:
            self.remember(key, *titled)
