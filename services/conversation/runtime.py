"""The conversation runtime of one replica: its rooms put together, started and stopped.

Each room holds one responsibility (the room map is in ``docs/architecture.md``):

``record_store.py``
    The records a replica knows (read on demand, followed from the bucket's changes).
``ownership.py``
    Leases, the actors of the conversations owned, renewal and the failover scan.
``wakeups.py``
    Loading a conversation on input and checking for input after an idle release.
``input_dispatch.py``
    The replica's one consumer of conversation input, routed to the actors loaded here.
``endpoints.py``
    What the endpoints do: start, stop, delete, list, send an event, projections, replay.
``spec_cache.py``
    The projects' tool lists as offered to the model.

:class:`Runtime` wires them, satisfies the actors' :class:`~.host.ActorHost` port,
and keeps the surface ``service.py``, the tests and the benchmarks use.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import (
    ConversationDeleted,
    ConversationInfo,
    ConversationList,
    DeleteConversation,
    EventAccepted,
    GetProjection,
    ListConversations,
    ReplayInfo,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import ProjectStopped

from .actor import ConversationActor
from .endpoints import RUNTIME_SOURCE, Endpoints, with_context_window
from .input_dispatch import InputDispatch
from .journal import Journal, ensure_streams
from .ownership import Owned, Ownership
from .ports import LlmPort, LlmToolSpec, ToolPort
from .record import ConversationRecord, record_key
from .record_store import RecordStore, limits_of
from .residency import LoadedSet
from .settings import RuntimeSettings
from .spec_cache import SPECS_STALE, ToolSpecCache
from .wakeups import Wakeups

__all__ = ["RUNTIME_SOURCE", "ConversationRecord", "Runtime", "record_key", "with_context_window"]

log = logging.getLogger("jidocode.conversation")


class Runtime:
    """One replica's conversations: the rooms of this package, wired (see the module docstring)."""

    def __init__(self, bus: Bus, *, llm: LlmPort, tools: ToolPort, settings: RuntimeSettings) -> None:
        self.bus = bus
        self.llm = llm
        self.tools = tools
        self.settings = settings
        self.journal = Journal(bus)
        self.token = f"{bus.source}/{secrets.token_hex(4)}"
        self.store = RecordStore(bus)
        self.ownership = Ownership(bus, settings, self.store, token=self.token, make_actor=self._make_actor)
        self.wakeups = Wakeups(bus, self.journal, self.store, self.ownership)
        self.ownership.on_idle_release = self.wakeups.after_idle_release
        self.endpoints = Endpoints(
            bus, settings, llm=llm, journal=self.journal, records=self.store, ownership=self.ownership
        )
        self.specs = ToolSpecCache(bus, settings)
        #: The replica's one consumer of conversation input, feeding the actors loaded here.
        self.inputs = InputDispatch(bus)
        self._tasks: list[asyncio.Task[None]] = []
        self._subs: list[Subscription] = []

    def _make_actor(self, record: ConversationRecord) -> ConversationActor:
        return ConversationActor(self, record, limits_of(record, self.settings.limits), inputs=self.inputs)

    # -- start / stop --------------------------------------------------------------

    async def start(self) -> None:
        """Ready to serve in a time that does not depend on past conversations: nothing is
        loaded here; the scan takes over what was left loaded, in the background."""
        self.journal.atomic = await ensure_streams(self.bus, events_max_age_s=self.settings.events_max_age_s)
        await self.store.open()
        await self.ownership.open()
        # before anything is loaded: an actor reads what came before it registered from the stream
        await self.inputs.start()
        await self.store.follow(self._on_record)
        self._tasks += self.ownership.background()
        await self.wakeups.start()
        self._subs += [
            await self.bus.subscribe(subjects.signal(t), self._on_signal) for t in sorted(SPECS_STALE)
        ]

    async def close(self) -> None:
        """Stop. Idle conversations are released as after the idle timeout; busy ones stay in
        the loaded set, so a peer (when it sees their leases go) or the next start takes them
        over and carries on."""
        self.ownership.closing = True
        await self.wakeups.stop()
        await self.store.unfollow()
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection may be closing
                log.debug("unsubscribe: %s", exc)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ownership.close()
        await self.inputs.stop()

    async def _on_record(self, key: str, record: ConversationRecord | None) -> None:
        """A record changed: a conversation owned here that is no longer active is let go."""
        if key in self.ownership.owned and (record is None or record.status != "active"):
            await self.ownership.release(key, keep_loaded=False)

    async def _on_signal(self, env: Envelope) -> None:
        if env.type in SPECS_STALE and env.project_id:
            self.specs.drop(env.project_id)
        if env.type == ProjectStopped.TYPE and env.project_id:
            # every replica stops the conversations it runs (a stop waits for their cancels)
            self.wakeups.spawn(asyncio.create_task(self.endpoints.stop_project(env.project_id)))

    # -- what actors, tests and benchmarks see ---------------------------------------

    @property
    def owned(self) -> dict[str, Owned]:
        """The conversations this replica owns now."""
        return self.ownership.owned

    @property
    def loads(self) -> int:
        """Actors loaded (each one a journal read) since start."""
        return self.ownership.loads

    @property
    def scans(self) -> int:
        """Ownership scans done since start."""
        return self.ownership.scans

    @property
    def records(self) -> KeyValue:
        return self.store.kv

    @property
    def owners(self) -> KeyValue:
        return self.ownership.owners

    @property
    def loaded(self) -> LoadedSet:
        return self.ownership.loaded

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Return once ``predicate()`` holds, checked whenever a conversation is loaded or
        released or a scan ends (``TimeoutError`` after ``timeout`` s)."""
        await self.ownership.wait_until(predicate, timeout)

    def settled(self) -> bool:
        """Nothing loaded, and no load or release under way."""
        return self.ownership.settled()

    async def record(self, project_id: str, conversation_id: str) -> ConversationRecord:
        """The conversation's record; ``NotFound`` when unknown or deleted."""
        return await self.store.get(project_id, conversation_id)

    async def current_record(self, project_id: str, conversation_id: str) -> ConversationRecord | None:
        """The record as stored now (``ActorHost``); ``None`` when it cannot be read."""
        return await self.store.current(project_id, conversation_id)

    async def tool_specs(self, project_id: str) -> list[LlmToolSpec]:
        """The project's policy-filtered tool list (``ActorHost``), cached."""
        return await self.specs.get(project_id)

    # -- endpoints (``endpoints.py``) ------------------------------------------------

    async def start_conversation(self, project_id: str, cmd: StartConversation) -> ConversationInfo:
        return await self.endpoints.start_conversation(project_id, cmd)

    async def stop_conversation(self, project_id: str, cmd: StopConversation) -> ConversationInfo:
        return await self.endpoints.stop_conversation(project_id, cmd)

    async def delete_conversation(self, project_id: str, cmd: DeleteConversation) -> ConversationDeleted:
        return await self.endpoints.delete_conversation(project_id, cmd)

    async def list_conversations(self, project_id: str, cmd: ListConversations) -> ConversationList:
        return await self.endpoints.list_conversations(project_id, cmd)

    async def send_event(self, project_id: str, cmd: SendEvent, request: Envelope) -> EventAccepted:
        return await self.endpoints.send_event(project_id, cmd, request)

    async def get_projection(self, project_id: str, cmd: GetProjection) -> Any:
        return await self.endpoints.get_projection(project_id, cmd)

    async def replay_info(self, project_id: str, cmd: Subscribe) -> ReplayInfo:
        return await self.endpoints.replay_info(project_id, cmd)
