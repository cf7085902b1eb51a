"""A step's journaled entries on the conversation's output: one flush for the whole step.

Every entry goes out on ``jido.evt.<p>.<c>.<type>`` (kept by ``STREAM_EVENTS``),
except the tool runner's approval questions, which it published itself. Every
entry that came from outside the actor (its input: a user's message, an
endpoint's event, a tool runner's approval question) is also announced as
``conversation.event_ingested`` (:func:`announced`); the results of the
conversation's own model and tool calls are not (decision 0328): they are on the
output already, and nobody waits for their announcement.
The messages are all encoded first, then handed to the connection together, so
the step's events and signals leave in one write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, subject_of
from jidocode.shared.envelope import encode
from jidocode.shared.events.conversation import EventIngested

from .codec import to_payload
from .core import CORE_SOURCE, Signal
from .outcomes import LLM_SOURCE, TOOLS_SOURCE

__all__ = ["APPROVAL_SOURCE", "announced", "publish_step"]

#: Source of the journaled approval requests of the tool runner.
APPROVAL_SOURCE: Final = "tool_runner/approval"
#: Sources of entries the actor makes itself: the core's, and its own calls' results.
_OWN_SOURCES: Final = frozenset({CORE_SOURCE, LLM_SOURCE, TOOLS_SOURCE})


def announced(entry: Signal) -> bool:
    """Whether ``entry`` is announced as ``conversation.event_ingested``: it came from outside
    the actor (not minted by the core, not a result of the conversation's own calls)."""
    return entry.source not in _OWN_SOURCES


def step_messages(
    bus: Bus, project_id: str, conversation_id: str, entries: Sequence[Signal]
) -> list[tuple[str, bytes, dict[str, str] | None]]:
    """``(subject, payload, headers)`` of every message the journaled ``entries`` send, in order."""
    out: list[tuple[str, bytes, dict[str, str] | None]] = []
    p, c = project_id, conversation_id
    for entry in entries:
        if entry.source != APPROVAL_SOURCE:  # the tool runner published its question itself
            payload, headers = to_payload(entry, p, c)
            out.append((subjects.conversation_out(p, c, entry.type), payload, headers))
        if announced(entry):
            ingested = EventIngested(
                project_id=p, conversation_id=c, event_id=entry.id, event_type=entry.type
            )
            env = bus.envelope(
                ingested,
                project_id=p,
                conversation_id=c,
                correlation_id=entry.correlation_id,
                causation_id=entry.id,
            )
            payload, signal_headers = encode(env)
            out.append((subject_of(ingested), payload, signal_headers))
    return out


async def publish_step(bus: Bus, project_id: str, conversation_id: str, entries: Sequence[Signal]) -> None:
    """Publish what the journaled ``entries`` of one step send (core publishes: no round trip)."""
    for subject, payload, headers in step_messages(bus, project_id, conversation_id, entries):
        await bus.nc.publish(subject, payload, headers=headers)
