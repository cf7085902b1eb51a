"""Rewind (decision 0335): which user message a ``conversation.rewind`` names, and whether it may go.

Pure: the reducer uses it to answer a rewind input, the ``rewind`` endpoint to refuse a bad
one before anything is journaled; both read the same state, so both say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jidocode.shared.events.conversation import TurnEnded, UserMessage

from .context import ContextBuilder
from .signal import Signal
from .state import Status
from .timeline import Timeline

__all__ = ["RefusalReason", "RewindRefusal", "RewindTarget", "rewind_target"]

RefusalReason = Literal["unknown_message", "turn_running", "not_in_context"]


@dataclass(frozen=True)
class RewindTarget:
    """The user message a rewind goes back before: its timeline position, id and text."""

    position: int
    message_id: str
    text: str
    #: Context messages the rewind keeps and drops.
    kept: int
    dropped: int


@dataclass(frozen=True)
class RewindRefusal:
    """Why a rewind cannot go: ``reason`` for code, ``message`` for people."""

    reason: RefusalReason
    message: str
    message_id: str


def rewind_target(status: Status, timeline: Timeline, ref: str) -> RewindTarget | RewindRefusal:
    """The user message ``ref`` names in ``timeline`` (its id, or a ``turn.ended`` entry's id:
    the first message that turn answered), or why the conversation cannot go back before it."""
    position = _user_message_position(timeline, ref)
    if position is None:
        return RewindRefusal(
            "unknown_message",
            f"{ref!r} is not a user message (nor a turn) of this conversation",
            ref,
        )
    entry = timeline[position]
    if status.running:
        return RewindRefusal(
            "turn_running",
            "a turn is running: cancel it first, then rewind",
            entry.id,
        )
    builder = timeline.fold(ContextBuilder)
    if not builder.holds_user_message(position):
        return RewindRefusal(
            "not_in_context",
            f"message {entry.id!r} is no longer in the context "
            "(an earlier rewind went back before it, or a compaction summarised it)",
            entry.id,
        )
    kept, dropped = builder.rewind_split(position)
    text = entry.event_as(UserMessage).text
    return RewindTarget(position, entry.id, text, kept, dropped)


def _user_message_position(timeline: Timeline, ref: str) -> int | None:
    """Position of the user message ``ref`` names (the newest entry with that id), if any."""
    for index in range(len(timeline) - 1, -1, -1):
        entry = timeline[index]
        if entry.id != ref:
            continue
        if entry.type == UserMessage.TYPE:
            return index
        if entry.type == TurnEnded.TYPE:
            ids = entry.event_as(TurnEnded).message_ids
            return _first_user_message(timeline, ids[0]) if ids else None
    return None


def _first_user_message(timeline: Timeline, message_id: str) -> int | None:
    for index in range(len(timeline)):
        entry: Signal = timeline[index]
        if entry.id == message_id and entry.type == UserMessage.TYPE:
            return index
    return None
