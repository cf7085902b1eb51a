"""Rewind before a user message — its files, the conversation, or both — over the typed clients.

The one implementation behind ``JidoClient.rewind()`` (the SDK re-exports it from
``client/_rewind.py``), the web console's rewind routes and the MCP server's ``rewind`` tool
(decision 0346). The conversation part is the conversation service's ``rewind`` (a journaled
``conversation.rewound`` entry moves the ``llm_context`` back; nothing is deleted). The files
part is the tool runner's checkpoints (docs/checkpoints.md): the files as they were before the
message are those of the first checkpoint recorded in a turn from that message on (a turn
records one before its first writing call); no such checkpoint means no turn since wrote
files. Files are never restored unasked: the diff comes first, and ``confirm`` says yes (a
callback that sees the diff, or ``True``); the files somebody else changed since are listed
(``changed_by_user``) and kept unless ``overwrite_user_changes``. See docs/rewind.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.clients import ConversationsClient, ToolsClient
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import CompactionCompleted, RewindResult, Rewound, UserMessage
from jidocode.shared.events.tools import CheckpointDiff, CheckpointInfo, CheckpointRestored

__all__ = [
    "CHECKPOINT_TIMEOUT_S",
    "Confirm",
    "RewindOutcome",
    "RewindWhat",
    "UserMessageRef",
    "checkpoint_before",
    "rewind",
    "rewindable_messages",
]

RewindWhat = Literal["files", "conversation", "both"]
#: Asked with the diff before any file is restored: restore (True) or leave everything (False).
Confirm = Callable[[CheckpointDiff], bool | Awaitable[bool]]
#: Seconds a checkpoint's diff or restore may take (the tool runner runs git in its sandbox).
CHECKPOINT_TIMEOUT_S = 120.0


class UserMessageRef(BaseModel):
    """A user message a rewind may go back before: its entry id and its text (untrusted)."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str


class RewindOutcome(BaseModel):
    """What ``rewind()`` found and did. ``done`` False: only the diff was shown, or it was declined."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    what: RewindWhat
    #: The checkpoint of the files before the message (``None``: no turn since wrote files).
    checkpoint: CheckpointInfo | None = None
    #: What restoring it changes, ``changed_by_user`` included (``None`` without a checkpoint).
    diff: CheckpointDiff | None = None
    #: The files restored and kept (``None``: not restored).
    files: CheckpointRestored | None = None
    #: The conversation's ``conversation.rewound`` entry (``None``: not rewound).
    conversation: RewindResult | None = None
    done: bool = False


def rewindable_messages(timeline: Sequence[dict[str, Any]]) -> list[UserMessageRef]:
    """The user messages of a ``timeline`` projection that a rewind can go back before, oldest
    first: those still in the context (not rewound away, not summarised by a compaction)."""
    messages: list[tuple[int, UserMessageRef]] = []
    compacted_to = 0
    for position, entry in enumerate(timeline):
        data = entry.get("data") if isinstance(entry.get("data"), dict) else {}
        assert isinstance(data, dict)
        kind = entry.get("type")
        if kind == UserMessage.TYPE:
            messages.append(
                (position, UserMessageRef(id=str(entry.get("id")), text=str(data.get("text", ""))))
            )
        elif kind == Rewound.TYPE:
            gone = next((i for i, (_, m) in enumerate(messages) if m.id == data.get("message_id")), None)
            if gone is not None:
                del messages[gone:]
        elif kind == CompactionCompleted.TYPE:
            compacted_to = max(compacted_to, int(data.get("to_index") or 0))
    return [message for position, message in messages if position >= compacted_to]


def checkpoint_before(
    checkpoints: Sequence[CheckpointInfo], message_ids: Sequence[str], message_id: str
) -> CheckpointInfo | None:
    """The checkpoint holding the files as they were before ``message_id``: that of the first
    turn opened by it or a later message (``message_ids``: the conversation's, oldest first)."""
    if message_id not in message_ids:
        return None
    later = message_ids[message_ids.index(message_id) :]
    order = {mid: index for index, mid in enumerate(later)}
    candidates = [c for c in checkpoints if c.turn_id in order]
    return min(candidates, key=lambda c: (order[c.turn_id], c.created_at), default=None)


async def rewind(
    conversations: ConversationsClient,
    conversation_id: str,
    message_id: str,
    what: RewindWhat = "both",
    *,
    confirm: Confirm | bool = False,
    overwrite_user_changes: bool = False,
) -> RewindOutcome:
    """Rewind the conversation ``conversation_id`` before ``message_id`` (see the module docstring).

    ``NotFound`` for a message that is no user message of the conversation; the service's
    ``Conflict`` while a turn runs. With files to restore and ``confirm`` False (or a callback
    saying no), nothing at all is done: the outcome carries the diff.
    """
    tools = ToolsClient(conversations.bus, conversations.project_id, timeout=CHECKPOINT_TIMEOUT_S)
    timeline = (await conversations.get_projection(conversation_id, "timeline")).value or []
    ids = [str(e.get("id")) for e in timeline if e.get("type") == UserMessage.TYPE]
    if message_id not in ids:
        raise NotFound(
            f"{message_id!r} is not a user message of conversation {conversation_id!r}",
            details={"conversation_id": conversation_id, "message_id": message_id},
        )
    outcome = RewindOutcome(message_id=message_id, what=what)
    if what != "conversation":
        listed = await tools.checkpoints_list(conversation_id, timeout=CHECKPOINT_TIMEOUT_S)
        checkpoint = checkpoint_before(listed.checkpoints, ids, message_id)
        if checkpoint is not None:
            diff = await tools.checkpoints_diff(checkpoint.id, timeout=CHECKPOINT_TIMEOUT_S)
            outcome = outcome.model_copy(update={"checkpoint": checkpoint, "diff": diff})
            if _changes(diff) and not await _confirmed(confirm, diff):
                return outcome
    if what != "files":
        result = await conversations.rewind(conversation_id, message_id)
        outcome = outcome.model_copy(update={"conversation": result})
    if outcome.diff is not None and _changes(outcome.diff) and outcome.checkpoint is not None:
        files = await tools.checkpoints_restore(
            outcome.checkpoint.id,
            overwrite_user_changes=overwrite_user_changes,
            timeout=CHECKPOINT_TIMEOUT_S,
        )
        outcome = outcome.model_copy(update={"files": files})
    return outcome.model_copy(update={"done": True})


def _changes(diff: CheckpointDiff) -> bool:
    return bool(diff.added or diff.modified or diff.deleted)


async def _confirmed(confirm: Confirm | bool, diff: CheckpointDiff) -> bool:
    if isinstance(confirm, bool):
        return confirm
    answer = confirm(diff)
    if inspect.isawaitable(answer):
        answer = await answer
    return bool(answer)
