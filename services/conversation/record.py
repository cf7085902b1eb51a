"""A conversation's record: its entry in the ``jido_conversations`` KV bucket.

Key ``<project_id>.<conversation_id>`` (:func:`record_key`); value a
:class:`ConversationRecord` (status ``active``, ``stopped`` or ``deleted``, settings).
A ``deleted`` record is a tombstone: the conversation's journal, output and input
are gone (:mod:`.deletion`); it reads as unknown, and its id can be started again
once the streams' duplicate window has passed.
The runtime writes and watches the records; an actor reads its own.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import subjects
from jidocode.shared.errors import InvalidInput

__all__ = ["TITLE_CHARS", "ConversationRecord", "record_key", "title_of", "write_title"]

log = logging.getLogger("jidocode.conversation.record")

#: The longest title a record keeps (lists cut it further to their width).
TITLE_CHARS: Final = 100


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
    #: Its first user message, on one line and cut (:func:`title_of`); written once, with it.
    title: str = ""


def title_of(text: str) -> str:
    """A conversation's title from its first user message: whitespace runs made one space,
    characters that do not print (terminal escapes) left out, cut to :data:`TITLE_CHARS`
    with an ellipsis."""
    line = "".join(ch for ch in " ".join(text.split()) if ch.isprintable())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


async def write_title(records: KeyValue, key: str, title: str) -> tuple[int, ConversationRecord] | None:
    """Give the record ``key`` its title unless it has one: compare-and-set on the revision
    read now, so a stop or start written meanwhile is kept. The new revision and record, or
    ``None`` when there was nothing to write or the bucket could not be written (the title is
    only shown in lists: the message it comes from is sent all the same)."""
    for _ in range(8):
        try:
            entry = await records.get(key)
            current = ConversationRecord.model_validate_json(entry.value or b"{}")
            if current.title or not title:
                return None
            titled = current.model_copy(update={"title": title})
            revision = await records.update(key, titled.model_dump_json().encode(), last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            continue  # written meanwhile: read it again
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("conversation %s keeps no title: %s", key, exc)
            return None
        return revision, titled
    log.warning("conversation %s keeps no title: its record kept changing", key)
    return None
