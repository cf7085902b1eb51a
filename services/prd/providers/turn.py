"""When a conversation's turn is over, from its output events (pure): what the jidocode provider waits on.

The conversation says it: its reducer journals one :class:`TurnEnded` per turn (decision 0317),
naming the user messages the turn answered. The provider's turn waits for the one naming the
message it sent; ``started`` turns true at that message's echo (events before it belong to
someone else). The outcomes, as the client SDK names them (``client/_turn.py``):

==============  =================================================================================
``answered``    ``completed``: the final answer is ``text``
``failed``      ``failed``: a model call failed, or an overflow its compaction could not turn around
``stopped``     ``stopped``: the turn limit
``cancelled``   ``cancelled``
==============  =================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from jidocode.shared.events.conversation import TurnEnded, UserMessage

__all__ = ["Outcome", "Turn"]

_OVERFLOW = "llm_context_overflow"


@dataclass(frozen=True)
class Outcome:
    status: Literal["answered", "failed", "stopped", "cancelled"]
    text: str = ""
    error_type: str = ""
    message: str = ""
    retryable: bool = False


_STATUS: dict[str, Literal["answered", "failed", "stopped", "cancelled"]] = {
    "completed": "answered",
    "failed": "failed",
    "stopped": "stopped",
    "cancelled": "cancelled",
}


def outcome_of(ended: TurnEnded) -> Outcome:
    """What a :class:`TurnEnded` means to the provider that sent one of its messages."""
    if ended.outcome == "completed":
        return Outcome("answered", text=ended.text)
    error_type = "" if ended.outcome == "cancelled" else ended.error_type or ""
    return Outcome(
        _STATUS[ended.outcome], error_type=error_type, message=ended.message, retryable=ended.retryable
    )


@dataclass
class Turn:
    #: Id of the user message that opened the turn.
    message_id: str
    started: bool = False
    outcome: Outcome | None = None

    def feed(
        self, event_type: str, data: dict[str, Any], *, event_id: str, correlation_id: str | None = None
    ) -> Outcome | None:
        """Take one output event; the outcome once the turn is over (and from then on)."""
        if self.outcome is not None:
            return self.outcome
        if event_type == UserMessage.TYPE and self.message_id in (event_id, correlation_id):
            self.started = True
        elif event_type == TurnEnded.TYPE:
            ended = TurnEnded.read(data)
            if ended is not None and ended.ends(self.message_id):
                self.outcome = outcome_of(ended)
        return self.outcome
