"""What a conversation actor needs from the runtime that owns it (a port, so neither imports the other).

The runtime (``runtime.py``) creates actors and satisfies :class:`ActorHost`;
the actor (``actor.py``) sees only this: the bus, the journal, the settings,
the LLM and tool ports, and the project's tool list.
"""

from __future__ import annotations

from typing import Protocol

from jidocode.shared.bus import Bus

from .journal import Journal
from .ports import LlmPort, LlmToolSpec, ToolPort
from .record import ConversationRecord
from .settings import RuntimeSettings

__all__ = ["ActorHost"]


class ActorHost(Protocol):
    @property
    def bus(self) -> Bus: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def settings(self) -> RuntimeSettings: ...

    @property
    def llm(self) -> LlmPort: ...

    @property
    def tools(self) -> ToolPort: ...

    async def tool_specs(self, project_id: str) -> list[LlmToolSpec]:
        """The project's policy-filtered tool list (cached by the runtime)."""
        ...

    async def current_record(self, project_id: str, conversation_id: str) -> ConversationRecord | None:
        """The conversation's record as stored now (its settings may have changed since it was
        loaded: ``configure_tools``); ``None`` when it cannot be read."""
        ...
