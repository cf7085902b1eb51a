"""What the SDK calls back: the ``approve`` callback with an :class:`ApprovalRequest`, ``on_delta``
with each piece of the answer, ``on_event`` hooks with every output event.

A callback may be a plain function or a coroutine function (:func:`call_back` awaits what it
returns). An ``approve`` callback answers ``True``, a :data:`Decision`, or an
:class:`ApprovalAnswer` (a decision with the values a question's ``form`` asks for: an MCP
server's elicitation); anything else, and a callback that raises, is a denial (:func:`answer_of`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.conversation import ApprovalRequested, ApprovalResponse
from jidocode.shared.forms import check_content

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "ApproveCallback",
    "Decision",
    "DeltaCallback",
    "EventCallback",
    "answer_of",
    "approval_request_of",
    "approval_response",
    "call_back",
    "decision_of",
    "response_of",
]

log = logging.getLogger("jidocode.client")

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
    #: The form the answer may fill (an MCP elicitation's schema; ``jidocode.shared.forms``):
    #: the server's text, untrusted.
    form: dict[str, Any] | None = None


class ApprovalAnswer(BaseModel):
    """An answer with content: ``decision`` and the values of the request's ``form`` (an
    approve only; checked against the form before it is sent)."""

    model_config = ConfigDict(frozen=True)

    decision: Decision = "approve_once"
    content: dict[str, Any] | None = None


ApproveCallback = Callable[
    [ApprovalRequest],
    Awaitable[Decision | bool | ApprovalAnswer] | Decision | bool | ApprovalAnswer,
]


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


def answer_of(value: Any) -> ApprovalAnswer:
    """An ``approve`` callback's answer: an :class:`ApprovalAnswer` as it is, else
    :func:`decision_of` without content."""
    if isinstance(value, ApprovalAnswer):
        return value
    return ApprovalAnswer(decision=decision_of(value))


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
        form=asked.form,
    )


def approval_response(request: ApprovalRequest, answer: ApprovalAnswer) -> ApprovalResponse:
    """The response ``answer`` makes to ``request``: :class:`InvalidInput` when its content does
    not fit the request's form (naming the field), or comes without a form or with a denial."""
    content = answer.content
    if content is not None:
        if request.form is None or answer.decision == "deny":
            raise InvalidInput(f"approval {request.request_id!r}: content answers a form, and it asks none")
        content = check_content(request.form, content)
    return ApprovalResponse(request_id=request.request_id, decision=answer.decision, content=content)


async def response_of(approve: ApproveCallback, request: ApprovalRequest) -> ApprovalResponse:
    """What the ``approve`` callback answers ``request``; a denial when it raises or gives content
    that does not fit the request's form (logged)."""
    try:
        return approval_response(request, answer_of(await call_back(approve, request)))
    except Exception:
        log.exception("approve callback failed; denying %s", request.request_id)
        return ApprovalResponse(request_id=request.request_id, decision="deny")
