"""The conversation service's client: start, stop, send to, read and follow conversations."""

from __future__ import annotations

from typing import Any, Final

from jidocode.shared.events.conversation import (
    ConversationDeleted,
    ConversationInfo,
    ConversationList,
    ConversationsPruned,
    DeleteConversation,
    EventAccepted,
    GetProjection,
    ListConversations,
    Projection,
    PruneConversations,
    ReplayInfo,
    RewindConversation,
    RewindResult,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
    UserMessage,
)

from ._base import Ext, ProjectScoped

#: The least a stop (or a delete, which stops first) is waited for: the service gives the
#: conversation's owner a moment to cancel what it runs before letting it go.
STOP_TIMEOUT_S: Final = 15.0


#: The least a rewind is waited for (the service waits up to 40 s for the owner's answer).
REWIND_TIMEOUT_S: Final = 45.0


def _at_least(timeout: float | None) -> float:
    return max(timeout or 0.0, STOP_TIMEOUT_S)


__all__ = ["ConversationsClient"]


class ConversationsClient(ProjectScoped):
    """``jido.conversations.<p>.<verb>`` of one project."""

    service = "conversation"

    async def start(
        self,
        conversation_id: str | None = None,
        *,
        settings: dict[str, Any] | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ConversationInfo:
        """Start (or reopen) a conversation; its id is minted when ``conversation_id`` is None."""
        cmd = StartConversation(conversation_id=conversation_id, settings=settings or {})
        return await self._scoped("start", cmd, timeout=timeout, **ext)

    async def stop(
        self, conversation_id: str, *, reason: str = "", timeout: float | None = None, **ext: Ext
    ) -> ConversationInfo:
        """Stop it: its LLM call and tool calls are cancelled first (the service waits a moment for
        its owner to apply that), then it is let go; waits at least :data:`STOP_TIMEOUT_S`."""
        cmd = StopConversation(conversation_id=conversation_id, reason=reason)
        return await self._scoped("stop", cmd, timeout=_at_least(timeout or self.timeout), **ext)

    async def list(
        self,
        *,
        limit: int = 500,
        conversation_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ConversationList:
        """The project's conversations, newest first: status, owner replica, last activity
        (``conversation_id``: only that one, an empty list when it is unknown)."""
        cmd = ListConversations(limit=limit, conversation_id=conversation_id)
        return await self._scoped("list", cmd, timeout=timeout, **ext)

    async def delete(
        self, conversation_id: str, *, timeout: float | None = None, **ext: Ext
    ) -> ConversationDeleted:
        """Delete the conversation for good (stopped first): its journal, output, input and records."""
        cmd = DeleteConversation(conversation_id=conversation_id)
        return await self._scoped("delete", cmd, timeout=_at_least(timeout or self.timeout), **ext)

    async def prune(
        self, older_than_days: float, *, dry_run: bool = False, timeout: float | None = None, **ext: Ext
    ) -> ConversationsPruned:
        """Delete (with their token ledger) the conversations no replica runs whose last activity
        is older than ``older_than_days``; ``dry_run``: only name them."""
        cmd = PruneConversations(older_than_days=older_than_days, dry_run=dry_run)
        return await self._scoped("prune", cmd, timeout=max(timeout or 0.0, 120.0), **ext)

    async def send_event(
        self,
        conversation_id: str,
        event_type: str,
        data: dict[str, Any] | None = None,
        *,
        event_id: str | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> EventAccepted:
        """Send one external event (``conversation.user.message``, ``.cancel``, ``.resume``,
        ``.approval.response``); every output it causes carries the returned correlation id."""
        cmd = SendEvent(
            conversation_id=conversation_id,
            event_type=event_type,
            data=data or {},
            id=event_id,
            correlation_id=correlation_id,
        )
        return await self._scoped("send_event", cmd, timeout=timeout, **ext)

    async def send_message(
        self, conversation_id: str, text: str, *, timeout: float | None = None, **ext: Ext
    ) -> EventAccepted:
        """Send a user message."""
        message = UserMessage(text=text)
        return await self.send_event(conversation_id, message.type, message.to_data(), timeout=timeout, **ext)

    async def get_projection(
        self, conversation_id: str, name: str = "timeline", *, timeout: float | None = None, **ext: Ext
    ) -> Projection:
        cmd = GetProjection(conversation_id=conversation_id, name=name)
        return await self._scoped("get_projection", cmd, timeout=timeout, **ext)

    async def replay(
        self,
        conversation_id: str,
        *,
        after_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ReplayInfo:
        """Where to follow the conversation's output, and the stream sequence to replay from."""
        cmd = Subscribe(conversation_id=conversation_id, after_id=after_id)
        return await self._scoped("replay", cmd, timeout=timeout, **ext)

    async def rewind(
        self, conversation_id: str, message_id: str, *, timeout: float | None = None, **ext: Ext
    ) -> RewindResult:
        """Rewind the context to before the user message ``message_id`` (or the turn of that id);
        waits until the conversation journaled its ``conversation.rewound`` entry (at least
        :data:`REWIND_TIMEOUT_S`: a takeover of a dead owner's conversation comes first)."""
        cmd = RewindConversation(conversation_id=conversation_id, message_id=message_id)
        return await self._scoped(
            "rewind", cmd, timeout=max(timeout or self.timeout or 0.0, REWIND_TIMEOUT_S), **ext
        )
