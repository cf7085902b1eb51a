"""Rewinding a conversation (issue 30, decision 0335): its input, its timeline entry, its command.

Part of the conversation catalogue (``conversation.EVENTS``, re-exported there); in a module of
its own so the conversation module stays one screen of types per concern.

A rewind takes the conversation back to the moment before one of its user messages: the
``conversation.rewind`` input goes through the conversation's input stream like a cancel, the
reducer answers it with a ``conversation.rewound`` entry (or a ``conversation.error``
``rewind_refused``), and from that entry on the ``llm_context`` projection is what it was
before the message. Nothing leaves the journal: replay and audit still see the whole history.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ._base import Command, EventModel

__all__ = ["REWIND_REFUSED", "Rewind", "RewindConversation", "RewindResult", "Rewound"]

#: ``error_type`` of the ``conversation.error`` entry a refused rewind input gets.
REWIND_REFUSED = "rewind_refused"


class Rewind(EventModel):
    """Go back to the moment before the user message ``message_id`` (an external input).

    ``message_id`` is the id of a ``conversation.user.message`` entry of this conversation, or
    of a ``conversation.turn.ended`` entry (the first user message that turn answered). Refused
    while a turn runs (cancel it first), for a message the context no longer holds (rewound
    away, or summarised by a compaction) and for an id the conversation does not know.
    """

    channel: ClassVar[str] = "conversation"
    type: Literal["conversation.rewind"] = "conversation.rewind"
    message_id: str = Field(min_length=1, max_length=512)


class Rewound(EventModel):
    """The reducer's answer to a :class:`Rewind`: from here the context is as before the message."""

    channel: ClassVar[str] = "conversation"
    type: Literal["conversation.rewound"] = "conversation.rewound"
    #: The ``conversation.rewind`` input this answers.
    request_id: str
    #: The user message gone back before, and its text (a client may offer it for editing).
    message_id: str
    text: str = ""
    #: Timeline position of that message: the context is that of the entries before it.
    to_index: int = Field(ge=0)
    #: Context messages kept and dropped.
    kept: int = Field(default=0, ge=0)
    dropped: int = Field(default=0, ge=0)


class RewindResult(EventModel):
    """Reply of ``rewind``: the ``conversation.rewound`` entry the conversation journaled."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.rewind_result"] = "conversation.rewind_result"
    project_id: str
    conversation_id: str
    #: Id of the journaled ``conversation.rewound`` entry.
    entry_id: str
    message_id: str
    text: str = ""
    to_index: int = Field(ge=0)
    kept: int = Field(default=0, ge=0)
    dropped: int = Field(default=0, ge=0)


class RewindConversation(Command[RewindResult]):
    """Rewind the conversation's context to the moment before the user message ``message_id``.

    Checked first (``not_found`` for an unknown message, ``conflict`` while a turn runs or for
    a message the context no longer holds), then sent as a ``conversation.rewind`` input and
    answered once the conversation's owner journaled the ``conversation.rewound`` entry.
    """

    type: Literal["conversation.cmd.rewind"] = "conversation.cmd.rewind"
    conversation_id: str
    message_id: str = Field(min_length=1, max_length=512)


EVENTS: tuple[type[EventModel], ...] = (Rewind, Rewound, RewindConversation, RewindResult)
