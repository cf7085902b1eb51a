"""Following one turn of a conversation from its output events (pure).

The conversation says when a turn is over: its reducer journals one
:class:`TurnEnded` per turn (decision 0317), naming the user messages the
turn answered. The tracker waits for the one naming its message and maps its
outcome:

==============  ===========================================================
``answered``    ``completed``: the model answered (``text``)
``failed``      ``failed``: a model call failed (``llm_auth``,
                ``llm_budget_exceeded``, a context overflow its compaction
                could not turn around …)
``stopped``     ``stopped``: the turn limit
``cancelled``   ``cancelled``
==============  ===========================================================

A malformed end is ignored (it names no message this tracker can trust).
``started`` turns true at the echo of the user's own message: the live text
pieces before it belong to an earlier turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.events.conversation import TurnEnded, UserMessage

__all__ = ["TurnOutcome", "TurnTracker"]


class TurnOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Literal["answered", "failed", "stopped", "cancelled"]
    text: str = ""
    error_type: str | None = None
    message: str = ""
    retryable: bool = False


_STATUS: dict[str, Literal["answered", "failed", "stopped", "cancelled"]] = {
    "completed": "answered",
    "failed": "failed",
    "stopped": "stopped",
    "cancelled": "cancelled",
}


def outcome_of(ended: TurnEnded) -> TurnOutcome:
    """What a :class:`TurnEnded` means to the sender of one of its messages."""
    if ended.outcome == "completed":
        return TurnOutcome(status="answered", text=ended.text)
    return TurnOutcome(
        status=_STATUS[ended.outcome],
        error_type=None if ended.outcome == "cancelled" else ended.error_type,
        message=ended.message or ended.outcome,
        retryable=ended.retryable,
    )


@dataclass
class TurnTracker:
    #: Id of the :class:`UserMessage` that opened the turn.
    message_id: str
    correlation_id: str | None = None
    started: bool = False
    outcome: TurnOutcome | None = None

    def feed(
        self, event_type: str, data: dict[str, Any], *, event_id: str, correlation_id: str | None = None
    ) -> TurnOutcome | None:
        """Take one output event; return the outcome once the turn is over (and keep returning it)."""
        if self.outcome is not None:
            return self.outcome
        if event_type == UserMessage.TYPE and (
            event_id == self.message_id
            or (correlation_id is not None and correlation_id == self.correlation_id)
        ):
            self.started = True
        elif event_type == TurnEnded.TYPE:
            ended = TurnEnded.read(data)
            if ended is not None and ended.ends(self.message_id):
                self.outcome = outcome_of(ended)
        return self.outcome
