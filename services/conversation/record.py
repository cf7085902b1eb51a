"""A conversation's record: its entry in the ``jido_conversations`` KV bucket.

Key ``<project_id>.<conversation_id>`` (:func:`record_key`); value a
:class:`ConversationRecord` (status ``active``, ``stopped`` or ``deleted``, settings).
A ``deleted`` record is a tombstone: the conversation's journal, output and input
are gone (:mod:`.deletion`); it reads as unknown, and its id can be started again
once the streams' duplicate window has passed.
The runtime writes and watches the records; an actor reads its own.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import subjects
from jidocode.shared.errors import InvalidInput

__all__ = ["ConversationRecord", "record_key"]


def record_key(project_id: str, conversation_id: str) -> str:
    """``<p>.<c>``; a malformed id is :class:`InvalidInput` naming it (a client's mistake, not ours)."""
    try:
        return f"{subjects.validate_token(project_id, 'project id')}.{subjects.validate_token(conversation_id, 'conversation id')}"
    except ValueError as exc:
        raise InvalidInput(str(exc), details={"conversation_id": conversation_id}) from None


class ConversationRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    project_id: str
    conversation_id: str
    status: str = "active"
    settings: dict[str, Any] = Field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    #: Stopped with work outstanding, which the stop cancelled: ``start`` resumes it.
    resume_on_start: bool = False
