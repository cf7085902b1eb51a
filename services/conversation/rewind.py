"""The ``rewind`` endpoint (decision 0335): check, send a ``conversation.rewind``, wait for its answer.

The conversation's owner decides (the reducer, ``core/rewind.py``); this checks the same rule
first against the conversation's state as this replica can see it (its own actor, else a replay
of the journal), so a bad rewind is this call's error and nothing is journaled. The rewind then
goes through the conversation's input stream like a stop's cancel, so whichever replica owns the
conversation (or takes it over after its owner died) applies it, in order with the other input;
the reply is the ``conversation.rewound`` entry it journaled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.msg import Msg

from jidocode.shared import subjects
from jidocode.shared.envelope import decode, new_id
from jidocode.shared.errors import Conflict, JidoError, NotFound, RequestTimeout
from jidocode.shared.events.conversation import (
    REWIND_REFUSED,
    ConversationError,
    Rewind,
    RewindConversation,
    RewindResult,
    Rewound,
)

from .core import ConversationState, replay
from .core.rewind import RewindRefusal, rewind_target
from .endpoints import Endpoints, _ready
from .record import ConversationRecord, record_key
from .record_store import limits_of

__all__ = ["REWIND_WAIT_S", "rewind_conversation"]

#: How long the endpoint waits for the owner to journal the answer (a takeover after the
#: owner's death included: its lease has to run out first).
REWIND_WAIT_S = 40.0


async def rewind_conversation(endpoints: Endpoints, project_id: str, cmd: RewindConversation) -> RewindResult:
    """Rewind the conversation before ``cmd.message_id``; ``NotFound``/``Conflict`` when it cannot."""
    record = await endpoints.records.get(project_id, cmd.conversation_id)
    if record.status != "active":
        raise Conflict(
            f"conversation {cmd.conversation_id!r} is stopped: start it again first",
            details={"conversation_id": cmd.conversation_id},
        )
    state = await _current_state(endpoints, project_id, record)
    target = rewind_target(state.status, state.timeline, cmd.message_id)
    if isinstance(target, RewindRefusal):
        raise _refusal_error(target, cmd.conversation_id)
    request_id = f"{new_id()}.rewind"
    answer = await _send_and_wait(endpoints, project_id, cmd.conversation_id, target.message_id, request_id)
    if answer.get("type") == ConversationError.TYPE:
        raise Conflict(
            str(answer.get("message") or "rewind refused"), details=dict(answer.get("details") or {})
        )
    return RewindResult(
        project_id=project_id,
        conversation_id=cmd.conversation_id,
        entry_id=str(answer["id"]),
        message_id=str(answer["message_id"]),
        text=str(answer.get("text") or ""),
        to_index=int(answer["to_index"]),
        kept=int(answer.get("kept") or 0),
        dropped=int(answer.get("dropped") or 0),
    )


def _refusal_error(refusal: RewindRefusal, conversation_id: str) -> JidoError:
    details = {"conversation_id": conversation_id, "message_id": refusal.message_id, "reason": refusal.reason}
    if refusal.reason == "unknown_message":
        return NotFound(refusal.message, details=details)
    return Conflict(refusal.message, details=details)


async def _current_state(
    endpoints: Endpoints, project_id: str, record: ConversationRecord
) -> ConversationState:
    """The conversation's state: its actor's when this replica runs it, else its journal replayed."""
    key = record_key(project_id, record.conversation_id)
    ownership = endpoints.ownership
    if key not in ownership.owned and ownership.maybe_free(key):
        await ownership.try_acquire(key, record)  # nobody runs it: this replica will apply the rewind
    owned = ownership.owned.get(key)
    if owned is not None and await _ready(owned) and owned.actor.state is not None:
        return owned.actor.state
    entries, _ = await endpoints.journal.read(project_id, record.conversation_id)
    return replay(project_id, record.conversation_id, entries, limits_of(record, endpoints.settings.limits))


async def _send_and_wait(
    endpoints: Endpoints, project_id: str, conversation_id: str, message_id: str, request_id: str
) -> dict[str, Any]:
    """Send the rewind input and return the entry answering it (its data, with ``id`` and ``type``)."""
    answered: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def on_entry(msg: Msg) -> None:
        try:
            env = decode(msg.data, msg.headers)
        except JidoError:
            return
        data = env.data if isinstance(env.data, dict) else {}
        answers = data.get("request_id") == request_id or (
            env.type == ConversationError.TYPE
            and data.get("error_type") == REWIND_REFUSED
            and (data.get("details") or {}).get("request_id") == request_id
        )
        if answers and not answered.done():
            answered.set_result({**data, "id": env.id, "type": env.type})

    bus = endpoints.bus
    subs = [
        await bus.nc.subscribe(subjects.conversation_out(project_id, conversation_id, t), cb=on_entry)
        for t in (Rewound.TYPE, ConversationError.TYPE)
    ]
    try:
        await bus.nc.flush()
        await endpoints._send_own(project_id, conversation_id, Rewind(message_id=message_id), request_id)
        try:
            return await asyncio.wait_for(answered, REWIND_WAIT_S)
        except TimeoutError:
            raise RequestTimeout(
                f"the conversation's owner did not apply the rewind within {REWIND_WAIT_S:g} s; "
                "it stays in the conversation's input and is applied when the conversation runs again",
                details={"conversation_id": conversation_id, "request_id": request_id},
            ) from None
    finally:
        for sub in subs:
            await sub.unsubscribe()
