"""The conversation runtime of one replica: records, ownership, actors and the endpoint logic.

Records
    ``subjects.BUCKET_CONVERSATIONS``, key ``<p>.<c>``: a :class:`ConversationRecord`
    (status ``active`` or ``stopped``, settings). A replica reads a record when it
    needs it and follows the bucket's changes from its start (never reading all
    records: starting takes the same time however many conversations exist).

Loading and releasing
    A conversation is loaded (lease, actor, input consumer) by the replica that
    gets its first input, projection request or wake-up (``residency.py``), and
    released again once idle for ``idle_timeout_s``: an idle conversation costs
    no lease renewal, no consumer and no memory. Release lets go of the input
    first and of the lease last, then checks ``JIDO_CONV_IN`` for input newer
    than the last one applied; a waker that saw the lease still held relies on
    that check, so no input is left behind.

Ownership
    ``subjects.BUCKET_OWNERS``, key ``<p>.<c>``, a bucket whose entries expire
    after ``lease_ttl_s``. A replica owns a conversation while it holds the
    lease: it is created with ``create`` (succeeds only when nobody holds it)
    and renewed every third of the TTL with a compare-and-set ``update`` on the
    revision it holds. A dead owner stops renewing; its lease expires and the
    next scan of another replica takes the conversation over, rebuilding it
    from the journal (the scan looks at leases it saw and at the loaded set,
    never at every conversation). The journal append is fenced too (see ``journal.py``),
    so even a paused owner that wakes up after losing its lease cannot write.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
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
from jidocode.shared.envelope import Envelope, decode, encode, error_envelope, new_id, now_iso
from jidocode.shared.errors import (
    Conflict,
    InvalidInput,
    JidoError,
    NotFound,
    RequestTimeout,
    ServiceUnavailable,
)
from jidocode.shared.events import EventModel
from jidocode.shared.events.assets import AssetsReloaded, SkillRegistryUpdated
from jidocode.shared.events.conversation import (
    PROJECTIONS,
    Cancel,
    ConversationDeleted,
    ConversationError,
    ConversationInfo,
    ConversationList,
    ConversationStarted,
    ConversationStopped,
    ConversationSummary,
    DeleteConversation,
    EventAccepted,
    GetProjection,
    ListConversations,
    ReplayInfo,
    Resume,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
    UserMessage,
)
from jidocode.shared.events.engine import ProjectStopped
from jidocode.shared.kv_keys import kv_keys
from jidocode.shared.ledger import LedgerReader, with_subagents_usage

from .actor import ConversationActor
from .codec import input_payload
from .compaction import compaction_limits
from .core import Limits, llm_context, normalize, project, replay
from .deletion import purge_conversation, reusable_at
from .journal import Journal, LostOwnership, ensure_streams, publish_with_retry
from .ports import ContextWindows, LlmPort, LlmToolSpec, ToolPort
from .record import ConversationRecord, record_key, title_of, write_title
from .residency import LoadedSet, subscribe_wakeups
from .settings import RuntimeSettings
from .tools_bridge import list_tool_specs

__all__ = ["ConversationRecord", "Runtime", "record_key", "with_context_window"]

log = logging.getLogger("jidocode.conversation")

_RECORDS_STREAM = f"KV_{subjects.BUCKET_CONVERSATIONS}"
_RECORDS_PREFIX = f"$KV.{subjects.BUCKET_CONVERSATIONS}."
#: Wake-ups handled at once.
_WAKE_CONCURRENCY = 64
#: Records kept in memory at most (a record not kept is read again when needed).
_KNOWN_MAX = 10_000
#: ``source`` of the inputs the service puts on a conversation's input itself (a stop's cancel,
#: a restart's resume).
RUNTIME_SOURCE = "conversation/runtime"

#: Signals after which a project's cached tool list is stale.
_SPECS_STALE: frozenset[str] = frozenset(
    model.TYPE for model in (AssetsReloaded, ProjectStopped, SkillRegistryUpdated)
)


async def with_context_window(usage: Any, llm: LlmPort) -> Any:
    """The ``usage`` projection with its model's context window, when the LLM port knows it.

    The core cannot know a model's window (litellm's model map does); the
    client reads it here instead of asking litellm itself.
    """
    if not isinstance(usage, dict) or not usage.get("model") or not isinstance(llm, ContextWindows):
        return usage
    window = await asyncio.to_thread(llm.context_window, str(usage["model"]))
    return {**usage, "context_window": window}


class _Owned:
    def __init__(self, actor: ConversationActor, revision: int) -> None:
        self.actor = actor
        self.revision = revision
        self.task: asyncio.Task[None] | None = None
        #: Held while the lease is written (renewed, deleted): a release never deletes with a
        #: revision a renewal in flight is about to replace (the lease would then stay behind).
        self.lease_lock = asyncio.Lock()


class Runtime:
    def __init__(self, bus: Bus, *, llm: LlmPort, tools: ToolPort, settings: RuntimeSettings) -> None:
        self.bus = bus
        self.llm = llm
        self.tools = tools
        self.settings = settings
        self.journal = Journal(bus)
        self.token = f"{bus.source}/{secrets.token_hex(4)}"
        #: Records by key, with the revision they were read at: those this replica read
        #: or saw written since it started (never all of them), the oldest dropped first.
        self.known: OrderedDict[str, tuple[int, ConversationRecord | None]] = OrderedDict()
        self.owned: dict[str, _Owned] = {}
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
        self._changed = asyncio.Event()
        self._records: KeyValue | None = None
        self._owners: KeyValue | None = None
        self._loaded: LoadedSet | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._actor_tasks: set[asyncio.Task[None]] = set()
        self._subs: list[Subscription] = []
        self._wake_sub: Subscription | None = None
        self._wake_tasks: set[asyncio.Task[None]] = set()
        self._wake_gate = asyncio.Semaphore(_WAKE_CONCURRENCY)
        #: project id -> (monotonic time fetched, the policy-filtered tool list)
        self._specs: dict[str, tuple[float, list[LlmToolSpec]]] = {}
        self._leases_ready = asyncio.Event()
        self._orphans_read = False
        self._scan_now = asyncio.Event()
        self._closing = False

    # -- start / stop --------------------------------------------------------------

    async def start(self) -> None:
        """Ready to serve in a time that does not depend on past conversations: nothing is
        loaded here; the scan takes over what was left loaded, in the background."""
        self.journal.atomic = await ensure_streams(self.bus, events_max_age_s=self.settings.events_max_age_s)
        self._records = await self.bus.kv(subjects.BUCKET_CONVERSATIONS, history=1)
        self._owners = await self.bus.kv(subjects.BUCKET_OWNERS, history=1, ttl=self.settings.lease_ttl_s)
        self._loaded = LoadedSet(self.bus, self._records, token=self.token)
        # Record changes from now on (what is older is read on demand).
        self._subs.append(
            await self.bus.js.subscribe(
                f"{_RECORDS_PREFIX}*.*",
                stream=_RECORDS_STREAM,
                cb=self._on_record,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        )
        self._tasks.append(asyncio.create_task(self._watch_leases(), name="conv-watch-leases"))
        self._tasks.append(asyncio.create_task(self._scan_loop(), name="conv-scan"))
        self._wake_sub = await subscribe_wakeups(self.bus, self._on_wake)
        self._subs += [
            await self.bus.subscribe(subjects.signal(t), self._drop_specs) for t in sorted(_SPECS_STALE)
        ]

    async def close(self) -> None:
        """Stop. Idle conversations are released as after the idle timeout; busy ones stay in
        the loaded set, so a peer (when it sees their leases go) or the next start takes them
        over and carries on."""
        self._closing = True
        subs = [self._wake_sub, *self._subs] if self._wake_sub is not None else self._subs
        for sub in subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection may be closing
                log.debug("unsubscribe: %s", exc)
        # (a wake-up not acked is delivered again, to another replica)
        for task in [*self._tasks, *self._wake_tasks]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._wake_tasks, return_exceptions=True)
        for key, owned in list(self.owned.items()):
            idle = owned.actor.quiescent() and owned.actor.mailbox.empty()
            await self._release(key, keep_loaded=not idle, idle=idle)
        if self._actor_tasks:
            await asyncio.wait(set(self._actor_tasks), timeout=10)

    @property
    def records(self) -> KeyValue:
        assert self._records is not None
        return self._records

    @property
    def owners(self) -> KeyValue:
        assert self._owners is not None
        return self._owners

    @property
    def loaded(self) -> LoadedSet:
        assert self._loaded is not None
        return self._loaded

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

    # -- records -----------------------------------------------------------------

    def _remember(self, key: str, revision: int, record: ConversationRecord | None) -> None:
        """Keep ``record`` (``None``: deleted) unless a newer revision is known."""
        known = self.known.get(key)
        if known is not None and known[0] >= revision:
            return
        self.known[key] = (revision, record)
        self.known.move_to_end(key)
        while len(self.known) > _KNOWN_MAX:
            self.known.popitem(last=False)

    async def _on_record(self, msg: Msg) -> None:
        key = msg.subject[len(_RECORDS_PREFIX) :]
        operation = (msg.headers or {}).get("KV-Operation")
        record: ConversationRecord | None = None
        if operation not in ("DEL", "PURGE") and msg.data:
            try:
                record = ConversationRecord.model_validate_json(msg.data)
            except ValidationError:
                log.warning("bad conversation record %s", key)
                return
        self._remember(key, msg.metadata.sequence.stream, record)
        if key in self.owned and (record is None or record.status != "active"):
            await self._release(key, keep_loaded=False)

    async def record(self, project_id: str, conversation_id: str) -> ConversationRecord:
        key = record_key(project_id, conversation_id)
        known = self.known.get(key)
        if known is None:
            try:
                entry = await self.records.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                known = (0, None)
            else:
                assert entry.value is not None
                found = ConversationRecord.model_validate_json(entry.value)
                self._remember(key, entry.revision or 0, found)
                known = (entry.revision or 0, found)
        if known[1] is None or known[1].status == "deleted":
            gone = " (deleted)" if known[1] is not None else ""
            raise NotFound(
                f"unknown conversation {conversation_id!r} in project {project_id!r}{gone}",
                details={"project_id": project_id, "conversation_id": conversation_id},
            )
        return known[1]

    async def start_conversation(self, project_id: str, cmd: StartConversation) -> ConversationInfo:
        conversation_id = cmd.conversation_id or new_id()
        key = record_key(project_id, conversation_id)  # InvalidInput for a malformed id
        now = now_iso()
        try:
            existing: ConversationRecord | None = await self.record(project_id, conversation_id)
        except NotFound:
            existing = None
            tomb = self.known.get(key)
            if tomb is not None and tomb[1] is not None and tomb[1].status == "deleted":
                again = reusable_at(tomb[1].updated_at)
                if datetime.now(UTC) < again:
                    raise Conflict(
                        f"conversation {conversation_id!r} was deleted at {tomb[1].updated_at}; its id can "
                        f"be started again from {again.isoformat(timespec='seconds')} (or start a new one)",
                        details={"conversation_id": conversation_id, "reusable_at": again.isoformat()},
                    ) from None
        settings = {**(existing.settings if existing else {}), **cmd.settings}
        record = ConversationRecord(
            project_id=project_id,
            conversation_id=conversation_id,
            status="active",
            settings=settings,
            created_at=existing.created_at if existing else now,
            updated_at=now,
            title=existing.title if existing else "",
        )
        if existing is not None and existing.resume_on_start:
            # The stop cancelled what was running: started again, the conversation carries on
            # (its cancel is in the input stream before this resume).
            await self._send_own(project_id, conversation_id, Resume(), f"{new_id()}.resume")
        revision = await self.records.put(key, record.model_dump_json().encode())
        self._remember(key, revision, record)
        await self.bus.emit(
            ConversationStarted(
                project_id=project_id, conversation_id=conversation_id, instance=self.bus.source
            ),
            project_id=project_id,
            conversation_id=conversation_id,
        )
        if existing is not None and existing.status != "active":
            # Reopened: input sent while it was stopped is applied now, not at the next input.
            await self._try_acquire(key, record)
        # A new conversation is loaded lazily, by whichever replica gets its first input.
        return ConversationInfo(**record.model_dump(), reopened=existing is not None)

    async def delete_conversation(self, project_id: str, cmd: DeleteConversation) -> ConversationDeleted:
        """Stop it (``NotFound`` when unknown), purge what is stored of it, leave a tombstone."""
        await self.stop_conversation(
            project_id, StopConversation(conversation_id=cmd.conversation_id, reason="deleted")
        )
        # The tombstone first: from now on no replica reopens it (start answers conflict) while
        # its streams are purged.
        key = record_key(project_id, cmd.conversation_id)
        record = await self.record(project_id, cmd.conversation_id)
        tomb = record.model_copy(update={"status": "deleted", "settings": {}, "updated_at": now_iso()})
        revision = await self.records.put(key, tomb.model_dump_json().encode())
        self._remember(key, revision, tomb)
        return await purge_conversation(self.bus, project_id, cmd.conversation_id)

    async def current_record(self, project_id: str, conversation_id: str) -> ConversationRecord | None:
        """The record as stored now, read from the bucket (not the watch, which may lag behind a
        ``start`` that just changed its settings); ``None`` when it cannot be read."""
        key = record_key(project_id, conversation_id)
        try:
            entry = await self.records.get(key)
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
        self._remember(key, entry.revision or 0, record)
        return record

    async def list_conversations(self, project_id: str, cmd: ListConversations) -> ConversationList:
        """The project's conversations (not the deleted), newest first: record, owner, last activity."""
        prefix = f"{subjects.validate_token(project_id, 'project id')}."
        keys: list[str] = []
        if cmd.conversation_id is not None:
            keys.append(record_key(project_id, cmd.conversation_id))
        else:
            # the server filters by the project's keys, from the stream's index (a watch's
            # replay can end early under load: jidocode.shared.kv_keys)
            keys += await kv_keys(self.records, prefix, one_token=True)
        gate = asyncio.Semaphore(32)

        async def read(key: str) -> ConversationRecord | None:
            async with gate:
                try:
                    return await self.record(project_id, key[len(prefix) :])
                except NotFound:
                    return None

        records = await asyncio.gather(*(read(key) for key in keys if key.startswith(prefix)))
        found = sorted(
            (r for r in records if isinstance(r, ConversationRecord)),
            key=lambda r: r.created_at,
            reverse=True,
        )
        shown = found[: cmd.limit]

        async def summary(record: ConversationRecord) -> ConversationSummary:
            key = record_key(project_id, record.conversation_id)
            async with gate:
                owner: str | None = None
                try:
                    entry = await self.owners.get(key)
                    owner = str(json.loads(entry.value or b"{}").get("owner") or "").rsplit("/", 1)[0] or None
                except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError, ValueError):
                    owner = None
                try:
                    _, last = await self.journal.last_activity(project_id, record.conversation_id)
                except (nats.errors.Error, TimeoutError):
                    last = None  # a row without it beats no list
            return ConversationSummary(
                conversation_id=record.conversation_id,
                status=record.status,
                owner=owner,
                created_at=record.created_at,
                updated_at=record.updated_at,
                last_activity=last,
                title=record.title,
            )

        items = await asyncio.gather(*(summary(r) for r in shown))
        return ConversationList(project_id=project_id, conversations=items, truncated=len(found) > len(shown))

    async def stop_conversation(self, project_id: str, cmd: StopConversation) -> ConversationInfo:
        """Stop it: what it runs is cancelled first (its LLM call, its tool calls, whose processes
        end), through its journal as a ``conversation.cancel``, then its owner lets it go."""
        record = await self.record(project_id, cmd.conversation_id)
        key = record_key(project_id, cmd.conversation_id)
        cancelled = False
        if record.status == "active" and self._busy(key):
            applied = await self._cancel_for_stop(project_id, cmd.conversation_id, cmd.reason)
            owned = self.owned.get(key)
            if not applied and owned is not None:
                # its queue was full or its owner slow: the tool runner is told here, as the
                # cancel would have done (the LLM call ends with the actor)
                owned.actor.cancel_tool_calls()
            cancelled = True
        stopped = await self._write_stopped(key, cancelled)
        if key in self.owned:
            await self._release(key, keep_loaded=False)
        await self.bus.emit(
            ConversationStopped(
                project_id=project_id, conversation_id=cmd.conversation_id, reason=cmd.reason
            ),
            project_id=project_id,
            conversation_id=cmd.conversation_id,
        )
        return ConversationInfo(**stopped.model_dump())

    async def _write_stopped(self, key: str, cancelled: bool) -> ConversationRecord:
        """Mark the record stopped, compare-and-set on the revision read now: a ``start`` that
        changed it while the stop waited keeps its settings (the stop still stops it)."""
        for _ in range(8):
            try:
                entry = await self.records.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                raise NotFound(f"unknown conversation {key!r}", details={"key": key}) from None
            current = ConversationRecord.model_validate_json(entry.value or b"{}")
            stopped = current.model_copy(
                update={
                    "status": "stopped",
                    "updated_at": now_iso(),
                    "resume_on_start": cancelled or current.resume_on_start,
                }
            )
            try:
                revision = await self.records.update(
                    key, stopped.model_dump_json().encode(), last=entry.revision
                )
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # written meanwhile: read it again
            self._remember(key, revision, stopped)
            return stopped
        raise Conflict(
            f"conversation {key!r} kept changing while it was stopped; try again", details={"key": key}
        )

    def _busy(self, key: str) -> bool:
        """Whether the conversation may have work running: loaded here and not quiescent, or
        held by another replica (which may be running anything)."""
        owned = self.owned.get(key)
        if owned is not None:
            return not owned.actor.quiescent()
        return key in self.lease_seen and not self._maybe_free(key)

    async def _send_own(
        self, project_id: str, conversation_id: str, event: EventModel, event_id: str
    ) -> None:
        """Put an input of the service's own (source ``conversation/runtime``) on the conversation's
        input stream, where the owner applies it like any other input."""
        signal = normalize(
            {
                "id": event_id,
                "type": event.type,
                "source": RUNTIME_SOURCE,
                "data": event.model_dump(mode="json", exclude={"type"}),
                "correlation_id": event_id,
                "time": now_iso(),
            },
            external=True,
        )
        payload, headers = input_payload(signal, project_id, conversation_id)
        await publish_with_retry(
            self.bus, subjects.conversation_in(project_id, conversation_id), payload, headers
        )

    async def _cancel_for_stop(self, project_id: str, conversation_id: str, reason: str | None) -> bool:
        """A ``conversation.cancel`` through the input stream, applied by the owner (wherever it
        runs) before the stop lets the owner go: the owner cancels the LLM call and asks the tool
        runner to cancel the tool calls, as for a user's cancel. Waits for it to be journaled at
        most ``stop_cancel_wait_s``; an owner that does not apply it in time applies it when it is
        loaded again (it is in the input stream)."""
        cancel_id = f"{new_id()}.stop"
        applied = asyncio.Event()

        async def on_cancel(msg: Msg) -> None:
            try:
                if decode(msg.data, msg.headers).id == cancel_id:
                    applied.set()
            except JidoError:
                pass

        sub = await self.bus.nc.subscribe(
            subjects.conversation_out(project_id, conversation_id, Cancel.TYPE), cb=on_cancel
        )
        try:
            await self.bus.nc.flush()
            why = f"conversation stopped ({reason or 'stop'})"
            await self._send_own(project_id, conversation_id, Cancel(reason=why), cancel_id)
            try:
                await asyncio.wait_for(applied.wait(), self.settings.stop_cancel_wait_s)
            except TimeoutError:
                log.warning(
                    "stop of %s/%s: its owner did not apply the cancel within %g s",
                    project_id,
                    conversation_id,
                    self.settings.stop_cancel_wait_s,
                )
                return False
            return True
        finally:
            await sub.unsubscribe()

    # -- ownership ---------------------------------------------------------------

    def _lease_value(self) -> bytes:
        return json.dumps({"owner": self.token, "at": now_iso()}).encode()

    def _limits(self, record: ConversationRecord) -> Limits:
        max_turns = record.settings.get("max_turns")
        limits = self.settings.limits
        if isinstance(max_turns, int) and max_turns >= 1:
            limits = limits.model_copy(update={"max_turns": max_turns})
        return compaction_limits(limits, record.settings)

    async def _try_acquire(self, key: str, record: ConversationRecord) -> bool:
        """Take the conversation if nobody holds its lease; whether this replica owns it now."""
        try:
            return await self._take(key, record)
        except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.ConnectionClosedError) as exc:
            log.warning("lease %s: %s", key, exc)
            return False

    async def _take(self, key: str, record: ConversationRecord) -> bool:
        """Like :meth:`_try_acquire`, but a failure to ask (not a lease held elsewhere) raises."""
        if key in self.owned:
            return True
        if self._closing or record.status != "active":
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

    async def _take_lease(self, key: str, record: ConversationRecord) -> bool:
        try:
            revision = await self.owners.create(key, self._lease_value())
        except nats.js.errors.KeyWrongLastSequenceError:
            # Someone holds it: if its holder stops renewing, the scan takes it over.
            self.lease_seen.setdefault(key, asyncio.get_running_loop().time())
            return False
        owned = _Owned(ConversationActor(self, record, self._limits(record)), revision)
        self.owned[key] = owned
        self.loads += 1
        try:
            await self.loaded.mark(key)
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            # Only a restart after a crash needs it; the lease still guards ownership.
            log.warning("marking %s loaded: %s", key, exc)
        if self.owned.get(key) is owned and not self._closing:
            owned.task = asyncio.create_task(self._run_actor(key, owned), name=f"conv-actor-{key}")
            self._actor_tasks.add(owned.task)
            owned.task.add_done_callback(self._actor_tasks.discard)
        log.info("%s owns conversation %s", self.token, key)
        self._notify()
        return key in self.owned

    async def _run_actor(self, key: str, owned: _Owned) -> None:
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
                await self._release(key, keep_loaded=True)
                self._orphans.add(key)
                self._scan_now.set()
        else:
            if self.owned.get(key) is owned:
                await self._release(key, keep_loaded=False, idle=True)

    async def _release(self, key: str, *, keep_loaded: bool, idle: bool = False) -> None:
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
            await self._let_go(key, owned, keep_loaded=keep_loaded, idle=idle)
        finally:
            self._releasing -= 1
            self._notify()

    async def _let_go(self, key: str, owned: _Owned, *, keep_loaded: bool, idle: bool) -> None:
        if owned.task is not None and owned.task is not asyncio.current_task():
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()
        errors = (
            nats.js.errors.KeyWrongLastSequenceError,
            nats.errors.TimeoutError,
            nats.js.errors.APIError,
            nats.errors.ConnectionClosedError,
        )
        if not keep_loaded:
            # Before the lease goes: a peer that sees the lease deleted then finds no key.
            try:
                await self.loaded.unmark(key)
            except errors as exc:
                log.warning("unmarking %s: %s", key, exc)
        async with owned.lease_lock:
            try:
                await self.owners.delete(key, last=owned.revision)
            except errors:
                pass
        self.lease_seen.pop(key, None)
        self._notify()
        if idle:
            await self._reload_if_input(key, owned.actor)

    async def _reload_if_input(self, key: str, actor: ConversationActor) -> None:
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
        if self._closing:
            await self._hand_over(key)
            return
        try:
            record = await self.record(p, c)
        except NotFound:
            return
        if not await self._try_acquire(key, record):
            self._orphans.add(key)
            self._scan_now.set()

    async def _hand_over(self, key: str) -> None:
        """This replica is stopping: leave the conversation to a peer (it sees the lease deleted
        with the key still in the loaded set) or to the next start."""
        try:
            await self.loaded.mark(key)
            revision = await self.owners.create(key, self._lease_value())
            await self.owners.delete(key, last=revision)
        except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.ConnectionClosedError) as exc:
            log.debug("handing over %s: %s", key, exc)

    async def _renew(self, key: str, owned: _Owned) -> None:
        async with owned.lease_lock:
            if self.owned.get(key) is not owned:
                return  # released meanwhile
            await self._renew_locked(key, owned)

    async def _renew_locked(self, key: str, owned: _Owned) -> None:
        try:
            owned.revision = await self.owners.update(key, self._lease_value(), last=owned.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            log.warning("lease of %s lost: stopping its actor", key)
            if self.owned.get(key) is owned:
                del self.owned[key]
            if owned.task is not None:
                owned.task.cancel()
                await asyncio.gather(owned.task, return_exceptions=True)
            await owned.actor.close()
            self._notify()
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            log.warning("renewing lease of %s: %s", key, exc)

    async def _watch_leases(self) -> None:
        watcher = await self.owners.watchall()
        loop = asyncio.get_running_loop()
        try:
            async for entry in watcher:
                if entry is None:
                    self._leases_ready.set()
                    continue
                if entry.operation in ("DEL", "PURGE"):
                    self.lease_seen.pop(entry.key, None)
                    if self._leases_ready.is_set() and entry.key not in self.owned:
                        self._released.add(entry.key)
                        self._scan_now.set()
                else:
                    self.lease_seen[entry.key] = loop.time()
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    def _maybe_free(self, key: str) -> bool:
        seen = self.lease_seen.get(key)
        return seen is None or asyncio.get_running_loop().time() - seen > self.settings.lease_ttl_s

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
        stale = {
            key
            for key, seen in self.lease_seen.items()
            if key not in self.owned and now - seen > self.settings.lease_ttl_s
        }
        maybe, self._released = sorted((self._released | stale) - self.owned.keys() - candidates), set()
        if maybe:
            marks = await asyncio.gather(*(self.loaded.has(key) for key in maybe), return_exceptions=True)
            for key, marked in zip(maybe, marks, strict=True):
                if isinstance(marked, BaseException):
                    self._released.add(key)  # ask again next time
                elif marked:
                    candidates.add(key)
                elif key in stale:
                    self.lease_seen.pop(key, None)  # released cleanly: nothing to take over
        for key in sorted(candidates):
            if key in self.owned or not self._maybe_free(key):
                continue
            project_id, conversation_id = key.split(".", 1)
            try:
                record = await self.record(project_id, conversation_id)
            except NotFound:
                record = None
            if record is None or record.status != "active":
                # Stopped or gone: it needs no owner.
                self.lease_seen.pop(key, None)
                try:
                    await self.loaded.unmark(key)
                except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
                    log.debug("unmarking %s: %s", key, exc)
                continue
            await self._try_acquire(key, record)

    async def _scan_loop(self) -> None:
        interval = self.settings.lease_ttl_s / 3
        try:
            await asyncio.wait_for(self._leases_ready.wait(), 30)
        except TimeoutError:
            log.warning("no initial leases after 30 s; scanning anyway")
        while True:
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
            self.scans += 1
            self._notify()
            self._scan_now.clear()
            try:
                await asyncio.wait_for(self._scan_now.wait(), interval)
            except TimeoutError:
                pass

    # -- edge: waking conversations on input ------------------------------------------

    async def _on_wake(self, msg: Msg) -> None:
        # Handled concurrently: one by one, a burst of wake-ups (each a lease round trip or
        # two) would wait in the client past the consumer's ack wait and come again.
        task = asyncio.create_task(self._wake_one(msg))
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)

    async def _wake_one(self, msg: Msg) -> None:
        async with self._wake_gate:
            await self._handle_wake(msg)

    async def _handle_wake(self, msg: Msg) -> None:
        try:
            done = await self._wake(msg.subject)
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

    async def _wake(self, subject: str) -> bool:
        """Input arrived on ``subject``: make sure its conversation has an owner (or needs none:
        unknown, answered with an error event, or stopped). False: try again later."""
        try:
            project_id = subjects.project_id_of(subject)
            conversation_id = subjects.conversation_id_of(subject)
            key = record_key(project_id, conversation_id)
        except (ValueError, InvalidInput):
            return True
        if key in self.owned:
            return True
        try:
            record = await self.record(project_id, conversation_id)
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
        if self._closing:
            return False
        # Owned here now, or held by another replica: one that is running reads it; one that
        # is letting it go checks for input after its lease is gone (``_reload_if_input``);
        # one that died leaves the lease to expire and the scan takes the conversation over.
        await self._take(key, record)
        return True

    # -- endpoint logic -------------------------------------------------------------

    async def send_event(self, project_id: str, cmd: SendEvent, request: Envelope) -> EventAccepted:
        record = await self.record(project_id, cmd.conversation_id)
        if record.status != "active":
            raise Conflict(
                f"conversation {cmd.conversation_id!r} is stopped: start it again first",
                details={"conversation_id": cmd.conversation_id},
            )
        event_id = cmd.id or new_id()
        raw = {
            "id": event_id,
            "type": cmd.event_type,
            "source": request.source,
            "data": cmd.data,
            "correlation_id": cmd.correlation_id or request.correlation_id or event_id,
            "causation_id": request.id,
            "time": now_iso(),
        }
        # Validated here, so that bad input is this call's error rather than a later error event.
        signal = normalize(raw, external=True, max_data_bytes=self.settings.max_message_bytes)
        # The message id is the reducer's dedup key, scoped to the conversation: a client reusing
        # an event id in another conversation (or with another correlation id) is not dropped.
        trace: dict[str, str] | None = None
        if self.bus.tracer is not None:  # the turn's span will be a child of this request's
            from jidocode.shared.telemetry.spans import inject

            trace = {}
            inject(trace)
        payload, headers = input_payload(signal, project_id, cmd.conversation_id, trace)
        # Nobody holds it (released while idle, or never loaded): this replica takes it.
        key = record_key(project_id, cmd.conversation_id)
        if key not in self.owned and self._maybe_free(key):
            await self._try_acquire(key, record)
        # When this replica owns the conversation, its actor takes the message as this signal
        # if it arrives exactly as sent, instead of validating it again (an actor on another
        # replica cannot know it was validated, and does validate it).
        owned = self.owned.get(key)
        if owned is not None:
            owned.actor.validated.expect(signal)
        try:
            seq = await publish_with_retry(
                self.bus, subjects.conversation_in(project_id, cmd.conversation_id), payload, headers
            )
        except BaseException:
            if owned is not None:
                owned.actor.validated.discard(signal.id)
            raise
        if not record.title and signal.type == UserMessage.TYPE:
            # the first user message names the conversation in lists, written once here
            titled = await write_title(self.records, key, title_of(str(signal.data.get("text") or "")))
            if titled is not None:
                self._remember(key, *titled)
        return EventAccepted(id=signal.id, correlation_id=signal.correlation_id, sequence=seq)

    async def get_projection(self, project_id: str, cmd: GetProjection) -> Any:
        value = await self._projection(project_id, cmd)
        if cmd.name == "usage":
            # its finished sub-agents' totals, from the ledger (decisions 0253, 0315)
            if isinstance(value, dict):
                children = await LedgerReader(self.bus).subagents(project_id, cmd.conversation_id)
                value = with_subagents_usage(value, children)
            return await with_context_window(value, self.llm)
        return value

    async def _projection(self, project_id: str, cmd: GetProjection) -> Any:
        if cmd.name not in PROJECTIONS:
            raise InvalidInput(
                f"unknown projection {cmd.name!r}; known: {', '.join(PROJECTIONS)}",
                details={"name": cmd.name, "known": list(PROJECTIONS)},
            )
        record = await self.record(project_id, cmd.conversation_id)
        key = record_key(project_id, cmd.conversation_id)
        live = not cmd.name.startswith("canonical_")
        if live and record.status == "active" and key not in self.owned and self._maybe_free(key):
            # Released or never loaded: load it here, later requests are answered from memory.
            await self._try_acquire(key, record)
        owned = self.owned.get(key)
        if live and owned is not None and await self._ready(owned):
            return owned.actor.projection(cmd.name)
        entries, _ = await self.journal.read(project_id, cmd.conversation_id)
        if cmd.name == "canonical_timeline":
            return [e.to_dict() for e in entries]
        if cmd.name == "canonical_llm_context":
            return llm_context(entries)
        return project(replay(project_id, cmd.conversation_id, entries, self._limits(record)), cmd.name)

    async def _ready(self, owned: _Owned, timeout: float = 30.0) -> bool:
        """Whether the actor has rebuilt its state (waiting for it, unless it stops first)."""
        if owned.actor.ready.is_set():
            return True
        ready = asyncio.ensure_future(owned.actor.ready.wait())
        waits: set[asyncio.Future[Any]] = {ready}
        if owned.task is not None:
            waits.add(owned.task)
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        return owned.actor.ready.is_set()

    async def replay_info(self, project_id: str, cmd: Subscribe) -> ReplayInfo:
        await self.record(project_id, cmd.conversation_id)
        after: int | None = None
        start = 1
        if cmd.after_id:
            after = await self.journal.find_event_sequence(project_id, cmd.conversation_id, cmd.after_id)
            if after is None:
                raise NotFound(
                    f"event {cmd.after_id!r} is not in the conversation's stored output",
                    details={"after_id": cmd.after_id},
                )
            start = after + 1
        return ReplayInfo(
            project_id=project_id,
            conversation_id=cmd.conversation_id,
            subject=subjects.conversation_out_filter(project_id, cmd.conversation_id),
            stream=subjects.STREAM_EVENTS,
            start_sequence=start,
            after_sequence=after,
        )

    async def tool_specs(self, project_id: str) -> list[LlmToolSpec]:
        """The project's policy-filtered tool list, reused for ``tool_specs_ttl_s``.

        Asking the project service before every model call cost a request per
        turn; the list changes only when assets reload (dropped at once, on the
        signal) or settings.json changes (seen within the TTL).
        """
        cached = self._specs.get(project_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.settings.tool_specs_ttl_s:
            return cached[1]
        give_up = now + self.settings.list_tools_patience_s
        delay = 0.2
        while True:
            try:
                specs = await list_tool_specs(
                    self.bus, project_id, timeout=self.settings.list_tools_timeout_s
                )
            except (ServiceUnavailable, RequestTimeout) as exc:
                # the project service or NATS restarting: the list it gave last is still the
                # best guess (it changes only on reloads); without one, ask again for a while
                if cached is not None:
                    log.warning(
                        "tool list of %s unavailable (%s): using the last one", project_id, exc.message
                    )
                    return cached[1]
                if time.monotonic() + delay >= give_up:
                    raise
                await asyncio.sleep(delay)  # backoff between attempts, bounded by give_up
                delay = min(delay * 2, 2.0)
                continue
            self._specs[project_id] = (time.monotonic(), specs)
            return specs

    async def _drop_specs(self, env: Envelope) -> None:
        if env.type in _SPECS_STALE and env.project_id:
            self._specs.pop(env.project_id, None)
        if env.type == ProjectStopped.TYPE and env.project_id:
            # every replica stops the conversations it runs (a stop waits for their cancels)
            task = asyncio.create_task(self._stop_project(env.project_id))
            self._wake_tasks.add(task)
            task.add_done_callback(self._wake_tasks.discard)

    async def _stop_project(self, project_id: str) -> None:
        """The project was stopped: the conversations this replica runs of it are stopped (their
        turns and tool calls cancelled, their leases released); started again, each is resumed."""
        prefix = f"{project_id}."
        keys = [key for key in self.owned if key.startswith(prefix)]
        results = await asyncio.gather(
            *(
                self.stop_conversation(
                    project_id, StopConversation(conversation_id=key[len(prefix) :], reason="project stopped")
                )
                for key in keys
            ),
            return_exceptions=True,
        )
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NotFound):
                log.warning("stopping %s with its project: %s", key, result)
