"""Recovery by need (which conversations left by a dead replica have work pending), and backoff.

After a crash (or a stop that left busy conversations loaded) the conversations whose key names
a replica that is gone are sorted by need (``ownership.py``): those with work pending are taken
over first, a few at a time; the idle ones are unmarked and wait for their next input (the
wake-up consumer loads them then), so a restart does not reload everything at once.

Work is pending when input was stored after the journal's last message (input not applied yet),
or the journal's last entry is not one a conversation rests on (a turn in flight: a model call, a
tool call, an approval outstanding). Two direct reads decide it, whatever the journal's length:
the last journal message of the conversation and the last input message, whose stream times
(the server's clock, one clock for both) are compared. When in doubt (an unreadable entry, a
read that failed) the answer is "pending": taking an idle conversation costs a load, leaving a
busy one would strand its turn.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.api
import nats.js.errors

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import encode, error_envelope
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.conversation import Cancel, LoopStopped
from jidocode.shared.events.turn import TurnEnded

from .codec import journal_entries

__all__ = [
    "AT_REST",
    "Retry",
    "Tail",
    "backoff_delay",
    "failure_payload",
    "has_pending_work",
    "needs_owner",
    "read_tail",
]

log = logging.getLogger("jidocode.conversation.recovery")

#: The journal entries a conversation rests on: the last of an idle one is one of these.
AT_REST: Final = frozenset({TurnEnded.TYPE, Cancel.TYPE, LoopStopped.TYPE})


@dataclass(frozen=True, slots=True)
class Tail:
    """The end of a conversation as stored: its journal's last message and its last input."""

    #: When the journal's last message was stored, and its last entry's type (``None``: empty).
    journal_at: datetime.datetime | None = None
    last_entry: str | None = None
    #: When the conversation's last input was stored (``None``: none ever).
    input_at: datetime.datetime | None = None


def needs_owner(tail: Tail) -> bool:
    """Whether a conversation whose end is ``tail`` has work pending (see the module docstring)."""
    if tail.input_at is not None and (tail.journal_at is None or tail.input_at >= tail.journal_at):
        return True  # input not applied yet
    if tail.journal_at is None:
        return False  # never used
    return tail.last_entry not in AT_REST


async def read_tail(bus: Bus, project_id: str, conversation_id: str) -> Tail:
    """Read a conversation's :class:`Tail`: two direct reads of last messages by subject."""
    journal = await _last(bus, subjects.STREAM_JOURNAL, subjects.journal(project_id, conversation_id))
    inputs = await _last(bus, subjects.STREAM_CONV_IN, subjects.conversation_in(project_id, conversation_id))
    last_entry: str | None = None
    if journal is not None:
        try:
            last_entry = journal_entries(journal.data or b"")[-1].type
        except Exception as exc:  # unreadable: pending (the load says what is wrong)
            log.warning("journal of %s/%s: %s", project_id, conversation_id, exc)
            last_entry = "unreadable"
    return Tail(
        journal_at=None if journal is None else journal.time,
        last_entry=last_entry,
        input_at=None if inputs is None else inputs.time,
    )


async def has_pending_work(bus: Bus, project_id: str, conversation_id: str) -> bool:
    """Whether the conversation has work pending (``True`` when that cannot be read)."""
    try:
        return needs_owner(await read_tail(bus, project_id, conversation_id))
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
        log.warning("pending work of %s/%s: %s; taking it to be sure", project_id, conversation_id, exc)
        return True


async def _last(bus: Bus, stream: str, subject: str) -> nats.js.api.RawStreamMsg | None:
    try:
        return await bus.js.get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None


# -- an actor that fails: backoff, then an error -------------------------------------------


def backoff_delay(failures: int, base_s: float, cap_s: float, draw: float) -> float:
    """Seconds before the next load after ``failures`` in a row: ``base_s`` doubled each time up
    to ``cap_s``, scaled by a jitter in [0.5, 1) from ``draw`` in [0, 1)."""
    doubled: float = base_s * 2.0 ** max(0, failures - 1)
    return min(cap_s, doubled) * (0.5 + draw / 2)


@dataclass(frozen=True, slots=True)
class Retry:
    """A conversation whose actor failed: how many times in a row, and when to load it again."""

    failures: int
    due: float


def failure_payload(source: str, key: str, exc: Exception, failures: int) -> bytes:
    """The ``conversation.error`` of a conversation failed ``failures`` times in a row."""
    project_id, conversation_id = key.split(".", 1)
    error = ServiceUnavailable(
        f"conversation {conversation_id!r} failed {failures} times in a row and is left until "
        f"its next input; last failure: {type(exc).__name__}: {exc}",
        details={"conversation_id": conversation_id, "failures": failures, "error": type(exc).__name__},
    )
    envelope = error_envelope(source, error, project_id=project_id, conversation_id=conversation_id)
    return encode(envelope)[0]
