"""What the SDK calls back: the ``approve`` callback with an :class:`ApprovalRequest`, ``on_delta``
with each piece of the answer, ``on_event`` hooks with every output event.

A callback may be a plain function or a coroutine function (:func:`call_back` awaits what it
returns). An ``approve`` callback answers ``True`` or a :data:`Decision`; anything else, and a
callback that raises, is a denial (:func:`decision_of`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ApprovalRequested

__all__ = [
    "ApprovalRequest",
    "ApproveCallback",
    "Decision",
    "DeltaCallback",
    "EventCallback",
    "approval_request_of",
    "call_back",
    "decision_of",
]

Decision = Literal["approve_once", "approve_session", "deny"]
DeltaCallback = Callable[[str], Awaitable[None] | None]
EventCallback = Callable[[Envelope], Awaitable[None] | None]


class ApprovalRequest(BaseModel):
    """An ``ask`` rule matched: the tool runner waits for an answer."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    tool: str
    args: dict[str, Any]
    reason: str = ""
    conversation_id: str = ""


ApproveCallback = Callable[[ApprovalRequest], Awaitable[Decision | bool] | Decision | bool]


async def call_back(callback: Callable[..., Any] | None, *args: Any) -> Any:
    """What ``callback(*args)`` returns, awaited when it is awaitable (``None`` without a callback)."""
    if callback is None:
        return None
    result = callback(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def decision_of(value: Any) -> Decision:
    """An ``approve`` callback's answer as a decision: ``True`` approves once, a non-decision denies."""
    if value is True:
        return "approve_once"
    if value in ("approve_once", "approve_session", "deny"):
        return value  # type: ignore[no-any-return]
    return "deny"


def approval_request_of(env: Envelope, conversation_id: str) -> ApprovalRequest | None:
    """The request an ``approval.requested`` event asks (``None``: malformed, or another type);
    ``conversation_id`` when the event names none."""
    try:
        asked = env.event()
    except JidoError:
        return None
    if not isinstance(asked, ApprovalRequested):
        return None
    return ApprovalRequest(
        request_id=asked.request_id,
        tool=asked.tool,
        args=dict(asked.args),
        reason=asked.reason,
        conversation_id=env.conversation_id or conversation_id,
    )
