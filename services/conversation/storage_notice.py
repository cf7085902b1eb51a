"""A step the journal could not store for lack of space: its turn is told as failed at once.

When the JetStream store's disk is full the journal refuses (or never acknowledges) the
append of a step, so nothing of the step can be journaled, not even the turn's end. Its
followers would wait for nothing (issue 31, point 2). Instead the actor publishes, without
journaling them, a ``conversation.turn.ended`` (``failed``, ``storage_full``, retryable) for the
user messages of the open turn and the waiting ones, and a ``conversation.error`` naming the
store; then it stops, and the ownership room takes the conversation again with backoff. Once
there is room the step is taken again from the input (nothing accepted is lost), and the turn
ends a second time, as journaled.
"""

from __future__ import annotations

from jidocode.shared.bus import Bus
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ConversationError
from jidocode.shared.events.turn import TurnEnded

from .core import ConversationState

__all__ = ["storage_full_notice", "tell_storage_full"]


def storage_full_notice(
    state: ConversationState | None, exc: JidoError
) -> tuple[TurnEnded, ConversationError]:
    """The turn end and the error that tell followers the store had no room for a step (pure)."""
    message_ids = [*state.turn_messages, *state.waiting_messages] if state is not None else []
    ended = TurnEnded(
        outcome="failed", message_ids=message_ids, error_type=exc.type, message=exc.message, retryable=True
    )
    return ended, ConversationError(error_type=exc.type, message=exc.message, details=exc.details)


async def tell_storage_full(
    bus: Bus, project_id: str, conversation_id: str, state: ConversationState | None, exc: JidoError
) -> None:
    """Publish :func:`storage_full_notice` on the conversation's output (never journaled)."""
    for event in storage_full_notice(state, exc):
        await bus.emit(event, project_id=project_id, conversation_id=conversation_id)
    await bus.nc.flush()
