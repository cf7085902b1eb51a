"""A2A's ``input-required`` with a form (an MCP server's elicitation, pure): the question's
data part carries the form, the client's data part ``{"content": …}`` fills it, checked."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers.proto_helpers import get_data_parts

from jidocode.services.gateway.a2a.tasks import agent_message
from jidocode.services.gateway.a2a.view import (
    AnswerError,
    Asked,
    TurnFollower,
    fold,
    parse_content,
    parse_decision,
)

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"count": {"type": "integer"}, "colour": {"type": "string", "enum": ["red", "blue"]}},
    "required": ["count"],
}
ASKED: dict[str, Any] = {
    "request_id": "t1/elicitation-1",
    "tool": "mcp__shop__order",
    "args": {"elicitation": "form"},
    "reason": "MCP server 'shop' asks: Your order?",
    "form": FORM,
}
TIMELINE = [
    {"id": "u1", "type": "conversation.user.message", "data": {"text": "order"}},
    {"id": "q1", "type": "conversation.approval.requested", "data": ASKED, "correlation_id": "c1"},
]


def test_the_pending_approval_keeps_its_form_and_the_question_carries_it() -> None:
    view = fold(TIMELINE)
    assert view.state == "input-required" and view.pending[0].form == FORM
    (live,) = TurnFollower(None).feed("conversation.approval.requested", ASKED, event_id="q1")
    assert isinstance(live, Asked) and live.approval.form == FORM
    message = agent_message("task", view.pending[0].question(), approval=view.pending[0])
    (data,) = get_data_parts(message.parts)
    assert data["form"]["properties"]["colour"]["enum"] == ["red", "blue"]
    assert '"content"' in view.pending[0].question()


def test_content_that_fits_the_form_is_the_answer() -> None:
    pending = fold(TIMELINE).pending
    datas = [{"decision": "allow", "content": {"count": 2, "colour": "blue"}}]
    approval, decision = parse_decision([], datas, pending)
    assert parse_content(datas, approval, decision) == {"count": 2, "colour": "blue"}
    assert parse_content([{"decision": "deny", "content": {"count": 2}}], approval, "deny") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"count": "2"}, "field 'count': expected an integer"),
        ({"count": 2, "colour": "green"}, "field 'colour'"),
        ({"colour": "red"}, "field 'count' is required"),
        ("2", "not an object"),
    ],
)
def test_content_that_does_not_fit_is_an_answer_error_naming_the_field(content: Any, message: str) -> None:
    (approval,) = fold(TIMELINE).pending
    with pytest.raises(AnswerError, match=message):
        parse_content([{"decision": "allow", "content": content}], approval, "approve_once")


def test_content_for_an_approval_without_a_form_is_refused() -> None:
    plain = fold([TIMELINE[0], {**TIMELINE[1], "data": {**ASKED, "form": None}}]).pending[0]
    with pytest.raises(AnswerError, match="asks no form"):
        parse_content([{"decision": "allow", "content": {"count": 1}}], plain, "approve_once")
