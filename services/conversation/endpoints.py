"""What the conversation endpoints do: start, stop, delete, list, send an event, projections, replay.

``service.py`` decodes each request and hands it here with its project id; the
rooms this uses are the records (``record_store.py``), ownership
(``ownership.py``) and the journal. Input the service puts on a conversation
itself (a stop's cancel, a restart's resume) goes through the conversation's input
stream like any other, with the source :data:`RUNTIME_SOURCE`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode, new_id, now_iso
from jidocode.shared.errors import Conflict, InvalidInput, JidoError, NotFound
from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    PROJECTIONS,
    Cancel,
    ConversationDeleted,
    ConversationInfo,
    ConversationList,
    ConversationsPruned,
    ConversationStarted,
    ConversationStopped,
    ConversationSummary,
    DeleteConversation,
    EventAccepted,
    GetProjection,
    ListConversations,
    PruneConversations,
    ReplayInfo,
    Resume,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
    UserMessage,
)
from jidocode.shared.kv_keys import kv_keys
from jidocode.shared.ledger import LedgerReader, with_subagents_usage

from .codec import input_payload
from .core import llm_context, normalize, project, replay
from .deletion import drop_key, forget_usage, purge_conversation
from .journal import Journal, publish_with_retry
from .ownership import Owned, Ownership
from .ports import ContextWindows, LlmPort, window_of
from .prune import prunable, tombstone_expired
from .record import ConversationRecord, record_key
from .record_store import RecordStore, limits_of, started_record
from .settings import RuntimeSettings

__all__ = ["RUNTIME_SOURCE", "Endpoints", "client_input", "own_input", "with_context_window"]

log = logging.getLogger("jidocode.conversation")

#: ``source`` of the inputs the service puts on a conversation's input itself (a stop's cancel,
#: a restart's resume).
RUNTIME_SOURCE = "conversation/runtime"
#: Record and summary reads of one ``list`` under way at once.
_LIST_CONCURRENCY = 32


# -- decisions ---------------------------------------------------------------------------


def client_input(cmd: SendEvent, request: Envelope, event_id: str, now: str) -> dict[str, Any]:
    """The raw input a ``send_event`` request makes (normalized and validated next)."""
    return {
        "id": event_id,
        "type": cmd.event_type,
        "source": request.source,
        "data": cmd.data,
        "correlation_id": cmd.correlation_id or request.correlation_id or event_id,
        "causation_id": request.id,
        "time": now,
    }


def own_input(event: EventModel, event_id: str, now: str) -> dict[str, Any]:
    """The raw input of the service's own ``event`` (source :data:`RUNTIME_SOURCE`)."""
    return {
        "id": event_id,
        "type": event.type,
        "source": RUNTIME_SOURCE,
        "data": event.model_dump(mode="json", exclude={"type"}),
        "correlation_id": event_id,
        "time": now,
    }


async def with_context_window(usage: Any, llm: LlmPort) -> Any:
    """The ``usage`` projection with its model's context window, when the LLM port knows it.

    The core cannot know a model's window (litellm's model map does); the
    client reads it here instead of asking litellm itself.
    """
    if not isinstance(usage, dict) or not usage.get("model") or not isinstance(llm, ContextWindows):
        return usage
    return {**usage, "context_window": await window_of(llm, str(usage["model"]))}


def _trace_context(bus: Bus) -> dict[str, str] | None:
    """The current span's context, so that the turn's span is a child of this request's."""
    if bus.tracer is None:
        return None
    from jidocode.shared.telemetry.spans import inject

    trace: dict[str, str] = {}
    inject(trace)
    return trace


# -- effects -----------------------------------------------------------------------------


class Endpoints:
    """The endpoint logic of one replica, over its records, ownership and journal."""

    def __init__(
        self,
        bus: Bus,
        settings: RuntimeSettings,
        *,
        llm: LlmPort,
        journal: Journal,
        records: RecordStore,
        ownership: Ownership,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.llm = llm
        self.journal = journal
        self.records = records
        self.ownership = ownership

    # -- start, delete, list -----------------------------------------------------------

    async def start_conversation(self, project_id: str, cmd: StartConversation) -> ConversationInfo:
        conversation_id = cmd.conversation_id or new_id()
        key = record_key(project_id, conversation_id)  # InvalidInput for a malformed id
        now = now_iso()
        try:
            existing: ConversationRecord | None = await self.records.get(project_id, conversation_id)
        except NotFound:
            existing = None
            self.records.check_reusable(key, conversation_id, datetime.now(UTC))
        record = started_record(project_id, conversation_id, existing, cmd.settings, now)
        if existing is not None and existing.resume_on_start:
            # The stop cancelled what was running: started again, the conversation carries on
            # (its cancel is in the input stream before this resume).
            await self._send_own(project_id, conversation_id, Resume(), f"{new_id()}.resume")
        await self.records.put(key, record)
        await self.bus.emit(
            ConversationStarted(
                project_id=project_id, conversation_id=conversation_id, instance=self.bus.source
            ),
            project_id=project_id,
            conversation_id=conversation_id,
        )
        if existing is not None and existing.status != "active":
            # Reopened: input sent while it was stopped is applied now, not at the next input.
            await self.ownership.try_acquire(key, record)
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
        record = await self.records.get(project_id, cmd.conversation_id)
        await self.records.put(
            key, record.model_copy(update={"status": "deleted", "settings": {}, "updated_at": now_iso()})
        )
        return await purge_conversation(self.bus, project_id, cmd.conversation_id)

    async def prune_conversations(self, project_id: str, cmd: PruneConversations) -> ConversationsPruned:
        """Delete (as :meth:`delete_conversation`, and their token ledger) the project's ended
        conversations last active before ``older_than_days`` ago, and drop the tombstones whose
        id may be used again (decision 0325). ``dry_run``: only name them."""
        now = datetime.now(UTC)
        cutoff = now - timedelta(days=cmd.older_than_days)
        prefix = f"{subjects.validate_token(project_id, 'project id')}."
        pruned: list[str] = []
        tombstones = 0
        for key in await kv_keys(self.records.kv, prefix, one_token=True):
            record = await self.records.current(project_id, key[len(prefix) :])
            if record is None:
                continue
            if record.status == "deleted":
                if tombstone_expired(record, now) and not cmd.dry_run:
                    tombstones += bool(await drop_key(self.bus, subjects.BUCKET_CONVERSATIONS, key))
                continue
            if not prunable(await self._summary(project_id, record), cutoff):
                continue
            if cmd.dry_run or await self._prune_one(project_id, record.conversation_id):
                pruned.append(record.conversation_id)
        return ConversationsPruned(
            project_id=project_id,
            older_than_days=cmd.older_than_days,
            dry_run=cmd.dry_run,
            conversation_ids=pruned,
            tombstones=tombstones,
        )

    async def _prune_one(self, project_id: str, conversation_id: str) -> bool:
        """Delete one conversation and forget its token usage; whether it was (one refused, e.g.
        deleted meanwhile, is left to the next prune)."""
        try:
            await self.delete_conversation(project_id, DeleteConversation(conversation_id=conversation_id))
        except JidoError as exc:
            log.warning("prune of %s/%s: %s", project_id, conversation_id, exc)
            return False
        await forget_usage(self.bus, project_id, conversation_id)
        log.info("pruned %s/%s", project_id, conversation_id)
        return True

    async def list_conversations(self, project_id: str, cmd: ListConversations) -> ConversationList:
        """The project's conversations (not the deleted), newest first: record, owner, last activity."""
        prefix = f"{subjects.validate_token(project_id, 'project id')}."
        keys: list[str] = []
        if cmd.conversation_id is not None:
            keys.append(record_key(project_id, cmd.conversation_id))
        else:
            # the server filters by the project's keys, from the stream's index (a watch's
            # replay can end early under load: jidocode.shared.kv_keys)
            keys += await kv_keys(self.records.kv, prefix, one_token=True)
        gate = asyncio.Semaphore(_LIST_CONCURRENCY)

        async def read(key: str) -> ConversationRecord | None:
            async with gate:
                try:
                    return await self.records.get(project_id, key[len(prefix) :])
                except NotFound:
                    return None

        async def summary(record: ConversationRecord) -> ConversationSummary:
            async with gate:
                return await self._summary(project_id, record)

        records = await asyncio.gather(*(read(key) for key in keys if key.startswith(prefix)))
        found = sorted((r for r in records if r is not None), key=lambda r: r.created_at, reverse=True)
        shown = found[: cmd.limit]
        items = await asyncio.gather(*(summary(r) for r in shown))
        return ConversationList(project_id=project_id, conversations=items, truncated=len(found) > len(shown))

    async def _summary(self, project_id: str, record: ConversationRecord) -> ConversationSummary:
        """A row of the list: the record, the instance holding its lease, its last activity."""
        key = record_key(project_id, record.conversation_id)
        try:
            owner = await self.ownership.owner_of(key)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            owner = None  # a row without it beats no list
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

    # -- stop --------------------------------------------------------------------------

    async def stop_conversation(self, project_id: str, cmd: StopConversation) -> ConversationInfo:
        """Stop it: what it runs is cancelled first (its LLM call, its tool calls, whose processes
        end), through its journal as a ``conversation.cancel``, then its owner lets it go."""
        record = await self.records.get(project_id, cmd.conversation_id)
        key = record_key(project_id, cmd.conversation_id)
        cancelled = False
        if record.status == "active" and self.ownership.busy(key):
            applied = await self._cancel_for_stop(project_id, cmd.conversation_id, cmd.reason)
            owned = self.ownership.owned.get(key)
            if not applied and owned is not None:
                # its queue was full or its owner slow: the tool runner is told here, as the
                # cancel would have done (the LLM call ends with the actor)
                owned.actor.cancel_tool_calls()
            cancelled = True
        stopped = await self.records.write_stopped(key, cancelled=cancelled)
        if key in self.ownership.owned:
            await self.ownership.release(key, keep_loaded=False)
        await self.bus.emit(
            ConversationStopped(
                project_id=project_id, conversation_id=cmd.conversation_id, reason=cmd.reason
            ),
            project_id=project_id,
            conversation_id=cmd.conversation_id,
        )
        return ConversationInfo(**stopped.model_dump())

    async def stop_project(self, project_id: str) -> None:
        """The project was stopped: the conversations this replica runs of it are stopped (their
        turns and tool calls cancelled, their leases released); started again, each is resumed."""
        prefix = f"{project_id}."
        keys = [key for key in self.ownership.owned if key.startswith(prefix)]
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

    async def _send_own(
        self, project_id: str, conversation_id: str, event: EventModel, event_id: str
    ) -> None:
        """Put an input of the service's own (source ``conversation/runtime``) on the conversation's
        input stream, where the owner applies it like any other input."""
        signal = normalize(own_input(event, event_id, now_iso()), external=True)
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

    # -- input -------------------------------------------------------------------------

    async def send_event(self, project_id: str, cmd: SendEvent, request: Envelope) -> EventAccepted:
        record = await self.records.get(project_id, cmd.conversation_id)
        if record.status != "active":
            raise Conflict(
                f"conversation {cmd.conversation_id!r} is stopped: start it again first",
                details={"conversation_id": cmd.conversation_id},
            )
        raw = client_input(cmd, request, cmd.id or new_id(), now_iso())
        # Validated here, so that bad input is this call's error rather than a later error event.
        signal = normalize(raw, external=True, max_data_bytes=self.settings.max_message_bytes)
        # The message id is the reducer's dedup key, scoped to the conversation: a client reusing
        # an event id in another conversation (or with another correlation id) is not dropped.
        payload, headers = input_payload(signal, project_id, cmd.conversation_id, _trace_context(self.bus))
        # Nobody holds it (released while idle, or never loaded): this replica takes it.
        key = record_key(project_id, cmd.conversation_id)
        if key not in self.ownership.owned and self.ownership.maybe_free(key):
            await self.ownership.try_acquire(key, record)
        # When this replica owns the conversation, its actor takes the message as this signal
        # if it arrives exactly as sent, instead of validating it again (an actor on another
        # replica cannot know it was validated, and does validate it).
        owned = self.ownership.owned.get(key)
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
            await self.records.write_title(key, str(signal.data.get("text") or ""))
        return EventAccepted(id=signal.id, correlation_id=signal.correlation_id, sequence=seq)

    # -- projections and replay --------------------------------------------------------

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
        record = await self.records.get(project_id, cmd.conversation_id)
        key = record_key(project_id, cmd.conversation_id)
        live = not cmd.name.startswith("canonical_")
        if (
            live
            and record.status == "active"
            and key not in self.ownership.owned
            and self.ownership.maybe_free(key)
        ):
            # Released or never loaded: load it here, later requests are answered from memory.
            await self.ownership.try_acquire(key, record)
        owned = self.ownership.owned.get(key)
        if live and owned is not None and await _ready(owned):
            return owned.actor.projection(cmd.name)
        entries, _ = await self.journal.read(project_id, cmd.conversation_id)
        if cmd.name == "canonical_timeline":
            return [e.to_dict() for e in entries]
        if cmd.name == "canonical_llm_context":
            return llm_context(entries)
        state = replay(project_id, cmd.conversation_id, entries, limits_of(record, self.settings.limits))
        return project(state, cmd.name)

    async def replay_info(self, project_id: str, cmd: Subscribe) -> ReplayInfo:
        await self.records.get(project_id, cmd.conversation_id)
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


async def _ready(owned: Owned, timeout: float = 30.0) -> bool:
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
