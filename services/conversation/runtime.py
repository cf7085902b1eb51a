"""The conversation runtime of one replica: records, ownership, actors and the endpoint logic.

Records
    ``subjects.BUCKET_CONVERSATIONS``, key ``<p>.<c>``: a :class:`ConversationRecord`
    (status ``active`` or ``stopped``, settings). Every replica watches the bucket.

Ownership
    ``subjects.BUCKET_OWNERS``, key ``<p>.<c>``, a bucket whose entries expire
    after ``lease_ttl_s``. A replica owns a conversation while it holds the
    lease: it is created with ``create`` (succeeds only when nobody holds it)
    and renewed every third of the TTL with a compare-and-set ``update`` on the
    revision it holds. A dead owner stops renewing; its lease expires and the
    next scan of another replica takes the conversation over, rebuilding it
    from the journal. The journal append is fenced too (see ``journal.py``),
    so even a paused owner that wakes up after losing its lease cannot write.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue
from pydantic import ValidationError

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, encode, error_envelope, new_id, now_iso
from jidocode.shared.errors import Conflict, InvalidInput, JidoError, NotFound
from jidocode.shared.events.assets import AssetsReloaded, SkillRegistryUpdated
from jidocode.shared.events.conversation import (
    PROJECTIONS,
    ConversationError,
    ConversationInfo,
    ConversationStarted,
    ConversationStopped,
    EventAccepted,
    GetProjection,
    ReplayInfo,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import ProjectStopped

from .actor import ConversationActor
from .codec import to_payload
from .core import llm_context, normalize, project, replay
from .journal import Journal, LostOwnership, ensure_streams, publish_with_retry
from .ports import ContextWindows, LlmPort, ToolPort, ToolSpec
from .record import ConversationRecord, record_key
from .settings import RuntimeSettings
from .tools_bridge import list_tool_specs

__all__ = ["ConversationRecord", "Runtime", "record_key", "with_context_window"]

log = logging.getLogger("jidocode.conversation")

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


class Runtime:
    def __init__(self, bus: Bus, *, llm: LlmPort, tools: ToolPort, settings: RuntimeSettings) -> None:
        self.bus = bus
        self.llm = llm
        self.tools = tools
        self.settings = settings
        self.journal = Journal(bus)
        self.token = f"{bus.source}/{secrets.token_hex(4)}"
        self.known: dict[str, ConversationRecord] = {}
        self.owned: dict[str, _Owned] = {}
        #: When a lease was last written by anyone (monotonic clock): a lease renewed
        #: within the TTL is held, so the scan does not even try to take it.
        self.lease_seen: dict[str, float] = {}
        self._records: KeyValue | None = None
        self._owners: KeyValue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._unknown_sub: Subscription | None = None
        self._specs_subs: list[Subscription] = []
        #: project id -> (monotonic time fetched, the policy-filtered tool list)
        self._specs: dict[str, tuple[float, list[ToolSpec]]] = {}
        self._watch_ready = asyncio.Event()
        self._closing = False

    # -- start / stop --------------------------------------------------------------

    async def start(self) -> None:
        self.journal.atomic = await ensure_streams(self.bus, events_max_age_s=self.settings.events_max_age_s)
        self._records = await self.bus.kv(subjects.BUCKET_CONVERSATIONS, history=1)
        self._owners = await self.bus.kv(subjects.BUCKET_OWNERS, history=1, ttl=self.settings.lease_ttl_s)
        self._tasks.append(asyncio.create_task(self._watch_records(), name="conv-watch-records"))
        await asyncio.wait_for(self._watch_ready.wait(), 30)
        self._tasks.append(asyncio.create_task(self._watch_leases(), name="conv-watch-leases"))
        self._tasks.append(asyncio.create_task(self._scan_loop(), name="conv-scan"))
        self._unknown_sub = await self.bus.nc.subscribe(
            subjects.conversation_in_filter(), queue="jidocode-conversation-edge", cb=self._check_known
        )
        self._specs_subs = [
            await self.bus.subscribe(subjects.signal(t), self._drop_specs) for t in sorted(_SPECS_STALE)
        ]

    async def close(self) -> None:
        self._closing = True
        if self._unknown_sub is not None:
            await self._unknown_sub.unsubscribe()
        for sub in self._specs_subs:
            await sub.unsubscribe()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for key in list(self.owned):
            await self._release(key)

    @property
    def records(self) -> KeyValue:
        assert self._records is not None
        return self._records

    @property
    def owners(self) -> KeyValue:
        assert self._owners is not None
        return self._owners

    # -- records -----------------------------------------------------------------

    async def _watch_records(self) -> None:
        watcher = await self.records.watchall()
        try:
            async for entry in watcher:
                if entry is None:  # initial values delivered
                    self._watch_ready.set()
                    continue
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    self.known.pop(entry.key, None)
                else:
                    try:
                        self.known[entry.key] = ConversationRecord.model_validate_json(entry.value)
                    except ValidationError:
                        log.warning("bad conversation record %s", entry.key)
                        continue
                record = self.known.get(entry.key)
                if entry.key in self.owned and (record is None or record.status != "active"):
                    await self._release(entry.key)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def _watch_leases(self) -> None:
        watcher = await self.owners.watchall()
        loop = asyncio.get_running_loop()
        try:
            async for entry in watcher:
                if entry is None:
                    continue
                if entry.operation in ("DEL", "PURGE"):
                    self.lease_seen.pop(entry.key, None)
                else:
                    self.lease_seen[entry.key] = loop.time()
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    def _maybe_free(self, key: str) -> bool:
        seen = self.lease_seen.get(key)
        return seen is None or asyncio.get_running_loop().time() - seen > self.settings.lease_ttl_s

    async def record(self, project_id: str, conversation_id: str) -> ConversationRecord:
        key = record_key(project_id, conversation_id)
        found = self.known.get(key)
        if found is not None:
            return found
        try:
            entry = await self.records.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            raise NotFound(
                f"unknown conversation {conversation_id!r} in project {project_id!r}",
                details={"project_id": project_id, "conversation_id": conversation_id},
            ) from None
        assert entry.value is not None
        return ConversationRecord.model_validate_json(entry.value)

    async def start_conversation(self, project_id: str, cmd: StartConversation) -> ConversationInfo:
        conversation_id = cmd.conversation_id or new_id()
        try:
            key = record_key(project_id, conversation_id)
        except ValueError as exc:
            raise InvalidInput(str(exc), details={"conversation_id": conversation_id}) from None
        now = now_iso()
        try:
            existing: ConversationRecord | None = await self.record(project_id, conversation_id)
        except NotFound:
            existing = None
        settings = {**(existing.settings if existing else {}), **cmd.settings}
        record = ConversationRecord(
            project_id=project_id,
            conversation_id=conversation_id,
            status="active",
            settings=settings,
            created_at=existing.created_at if existing else now,
            updated_at=now,
        )
        await self.records.put(key, record.model_dump_json().encode())
        self.known[key] = record
        await self.bus.emit(
            ConversationStarted(
                project_id=project_id, conversation_id=conversation_id, instance=self.bus.source
            ),
            project_id=project_id,
            conversation_id=conversation_id,
        )
        await self._try_acquire(key, record)
        return ConversationInfo(**record.model_dump(), reopened=existing is not None)

    async def stop_conversation(self, project_id: str, cmd: StopConversation) -> ConversationInfo:
        record = await self.record(project_id, cmd.conversation_id)
        key = record_key(project_id, cmd.conversation_id)
        stopped = record.model_copy(update={"status": "stopped", "updated_at": now_iso()})
        await self.records.put(key, stopped.model_dump_json().encode())
        self.known[key] = stopped
        if key in self.owned:
            await self._release(key)
        await self.bus.emit(
            ConversationStopped(
                project_id=project_id, conversation_id=cmd.conversation_id, reason=cmd.reason
            ),
            project_id=project_id,
            conversation_id=cmd.conversation_id,
        )
        return ConversationInfo(**stopped.model_dump())

    # -- ownership ---------------------------------------------------------------

    def _lease_value(self) -> bytes:
        return json.dumps({"owner": self.token, "at": now_iso()}).encode()

    async def _try_acquire(self, key: str, record: ConversationRecord) -> bool:
        if key in self.owned or self._closing or record.status != "active":
            return key in self.owned
        try:
            revision = await self.owners.create(key, self._lease_value())
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            log.warning("lease %s: %s", key, exc)
            return False
        limits = self.settings.limits
        max_turns = record.settings.get("max_turns")
        if isinstance(max_turns, int) and max_turns >= 1:
            limits = limits.model_copy(update={"max_turns": max_turns})
        owned = _Owned(ConversationActor(self, record, limits), revision)
        self.owned[key] = owned
        owned.task = asyncio.create_task(self._run_actor(key, owned), name=f"conv-actor-{key}")
        log.info("%s owns conversation %s", self.token, key)
        return True

    async def _run_actor(self, key: str, owned: _Owned) -> None:
        try:
            await owned.actor.run()
        except asyncio.CancelledError:
            raise
        except LostOwnership as exc:
            log.warning("%s", exc.message)
            self.owned.pop(key, None)
        except Exception:
            log.exception("conversation %s crashed; releasing it for a rebuild", key)
            if self.owned.get(key) is owned:
                await self._release(key)

    async def _release(self, key: str) -> None:
        owned = self.owned.pop(key, None)
        if owned is None:
            return
        if owned.task is not None and owned.task is not asyncio.current_task():
            owned.task.cancel()
            await asyncio.gather(owned.task, return_exceptions=True)
        await owned.actor.close()
        try:
            await self.owners.delete(key, last=owned.revision)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.errors.TimeoutError, nats.js.errors.APIError):
            pass
        except nats.errors.ConnectionClosedError:
            pass

    async def _renew(self, key: str, owned: _Owned) -> None:
        try:
            owned.revision = await self.owners.update(key, self._lease_value(), last=owned.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            log.warning("lease of %s lost: stopping its actor", key)
            self.owned.pop(key, None)
            if owned.task is not None:
                owned.task.cancel()
                await asyncio.gather(owned.task, return_exceptions=True)
            await owned.actor.close()
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            log.warning("renewing lease of %s: %s", key, exc)

    async def scan_once(self) -> None:
        # Renew every lease at once: one slow round trip must not make the others late.
        await asyncio.gather(*(self._renew(key, owned) for key, owned in list(self.owned.items())))
        for key, record in list(self.known.items()):
            if record.status == "active" and key not in self.owned and self._maybe_free(key):
                await self._try_acquire(key, record)

    async def _scan_loop(self) -> None:
        interval = self.settings.lease_ttl_s / 3
        while True:
            try:
                await self.scan_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("ownership scan failed")
            await asyncio.sleep(interval)

    # -- edge: input to unknown conversations --------------------------------------

    async def _check_known(self, msg: Msg) -> None:
        try:
            project_id = subjects.project_id_of(msg.subject)
            conversation_id = subjects.conversation_id_of(msg.subject)
        except ValueError:
            return
        key = record_key(project_id, conversation_id)
        if key in self.known:
            return
        try:
            await self.record(project_id, conversation_id)
            return
        except NotFound as exc:
            err: JidoError = exc
        payload = encode(
            error_envelope(self.bus.source, err, project_id=project_id, conversation_id=conversation_id)
        )[0]
        await self.bus.nc.publish(
            subjects.conversation_out(project_id, conversation_id, ConversationError.TYPE), payload
        )

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
        # The message id is scoped to the conversation: a client reusing an event id in
        # another conversation must not have it dropped by the stream's duplicate window.
        payload, headers = to_payload(signal, project_id, cmd.conversation_id)
        # When this replica owns the conversation, its actor takes the message as this signal
        # if it arrives exactly as sent, instead of validating it again (an actor on another
        # replica cannot know it was validated, and does validate it).
        owned = self.owned.get(record_key(project_id, cmd.conversation_id))
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
        return EventAccepted(id=signal.id, correlation_id=signal.correlation_id, sequence=seq)

    async def get_projection(self, project_id: str, cmd: GetProjection) -> Any:
        value = await self._projection(project_id, cmd)
        if cmd.name == "usage":
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
        owned = self.owned.get(key)
        if not cmd.name.startswith("canonical_") and owned is not None and owned.actor.ready.is_set():
            return owned.actor.projection(cmd.name)
        entries, _ = await self.journal.read(project_id, cmd.conversation_id)
        if cmd.name == "canonical_timeline":
            return [e.to_dict() for e in entries]
        if cmd.name == "canonical_llm_context":
            return llm_context(entries)
        limits = self.settings.limits
        max_turns = record.settings.get("max_turns")
        if isinstance(max_turns, int) and max_turns >= 1:
            limits = limits.model_copy(update={"max_turns": max_turns})
        return project(replay(project_id, cmd.conversation_id, entries, limits), cmd.name)

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

    async def tool_specs(self, project_id: str) -> list[ToolSpec]:
        """The project's policy-filtered tool list, reused for ``tool_specs_ttl_s``.

        Asking the project service before every model call cost a request per
        turn; the list changes only when assets reload (dropped at once, on the
        signal) or settings.json changes (seen within the TTL).
        """
        cached = self._specs.get(project_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.settings.tool_specs_ttl_s:
            return cached[1]
        specs = await list_tool_specs(self.bus, project_id, timeout=self.settings.list_tools_timeout_s)
        self._specs[project_id] = (now, specs)
        return specs

    async def _drop_specs(self, env: Envelope) -> None:
        if env.type in _SPECS_STALE and env.project_id:
            self._specs.pop(env.project_id, None)
