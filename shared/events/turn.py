"""The end of a conversation's turn (decision 0317): what every follower of a conversation waits for.

Part of the conversation catalogue (``conversation.EVENTS``, re-exported there); in a module of
its own so the followers' reading of it sits with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, ValidationError

from ._base import EventModel

__all__ = ["TurnEndOutcome", "TurnEnded"]

TurnEndOutcome = Literal["completed", "failed", "stopped", "cancelled"]


class TurnEnded(EventModel):
    """A turn is over: minted by the reducer once per turn, the one end every follower waits for.

    A turn opens with the first model call after the conversation was idle and ends with one
    outcome (decision 0317): ``completed`` (the final answer, ``text``), ``failed``
    (a model call failed, or a context overflow whose compaction failed: ``error_type``,
    ``message``), ``stopped`` (``max_turns``) or ``cancelled``. A context overflow answered by
    a compaction and one retry is no end: the turn ends with the retry's outcome and
    ``overflow_retried`` says it happened. The envelope's correlation id is that of the
    entry that ended the turn; ``message_ids`` name the user messages the turn answered.
    """

    channel: ClassVar[str] = "conversation"
    type: Literal["conversation.turn.ended"] = "conversation.turn.ended"
    outcome: TurnEndOutcome
    #: Ids of the user messages (timeline entries) this turn answered, oldest first.
    message_ids: list[str] = Field(default_factory=list)
    #: The final :class:`AssistantMessage` entry (``completed``) and its text.
    answer_id: str | None = None
    text: str = ""
    #: Why the turn did not complete (``llm_auth``, ``max_turns``, ``cancelled`` …) and how.
    error_type: str | None = None
    message: str = ""
    retryable: bool = False
    #: Model calls the turn made.
    turns: int = Field(default=0, ge=0)
    #: The context overflowed once, was compacted and the model call retried.
    overflow_retried: bool = False

    @classmethod
    def read(cls, data: object) -> TurnEnded | None:
        """The entry from a follower's event ``data``; ``None`` when it is not a valid one."""
        if not isinstance(data, Mapping):
            return None
        try:
            return cls.model_validate({**data, "type": cls.TYPE})
        except ValidationError:
            return None

    def ends(self, message_id: str | None) -> bool:
        """Whether this ends the turn of the user message ``message_id``."""
        return message_id is not None and message_id in self.message_ids
