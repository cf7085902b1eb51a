"""An elicitation as an approval question, and the answer back (pure)."""

from __future__ import annotations

import mcp_types as types
import pytest

from jidocode.services.tool_runner.approvals import Reply
from jidocode.services.tool_runner.mcp.elicit import answerable, fill, form_of, question, result_of
from jidocode.shared.errors import InvalidInput

CONFIRM = {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}
COLOUR = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}


def form(schema: dict[str, object], message: str = "Deploy?") -> types.ElicitRequestFormParams:
    return types.ElicitRequestFormParams(message=message, requested_schema=schema)  # type: ignore[arg-type]


URL = types.ElicitRequestURLParams(
    message="Connect your account", url="https://example.com/x", elicitation_id="e1"
)


@pytest.mark.parametrize(
    ("schema", "content"),
    [
        ({"type": "object", "properties": {}}, {}),
        (CONFIRM, {"approve": True}),
        (COLOUR, None),
        ({**COLOUR, "properties": {"colour": {"type": "string", "default": "red"}}}, {"colour": "red"}),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
                "required": ["a", "b"],
            },
            None,
        ),
        ({"type": "object", "properties": {"note": {"type": "string"}}}, {}),
    ],
)
def test_a_yes_fills_only_what_it_can(schema: dict[str, object], content: dict[str, object] | None) -> None:
    assert fill(schema) == content
    assert answerable(form(schema))  # a client with a form can answer what a yes cannot
    result = result_of(Reply("approve_once"), form(schema))
    assert (result.action, result.content) == (("cancel", None) if content is None else ("accept", content))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "properties": {"where": {"type": "object"}}},
        {"type": "object", "properties": {"site": {"type": "string", "format": "hostname"}}},
        {"type": "object", "properties": {}, "required": ["ghost"]},
    ],
)
def test_a_form_outside_the_mcp_restriction_is_not_asked(schema: dict[str, object]) -> None:
    assert not answerable(form(schema))


def test_content_that_fits_is_accepted_as_it_is() -> None:
    result = result_of(Reply("approve_once", {"colour": "teal"}), form(COLOUR))
    assert (result.action, result.content) == ("accept", {"colour": "teal"})
    assert form_of(form(COLOUR)) == COLOUR and form_of(URL) is None


def test_content_that_does_not_fit_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match="'colour'"):
        result_of(Reply("approve_once", {"colour": 7}), form(COLOUR))


def test_a_denial_with_content_is_a_decline_and_forwards_nothing() -> None:
    assert result_of(Reply("deny", {"colour": "teal"}), form(COLOUR)) == types.ElicitResult(action="decline")


@pytest.mark.parametrize(
    ("answer", "action"),
    [
        ("approve_once", "accept"),
        ("approve_session", "accept"),
        ("deny", "decline"),
        ("timeout", "cancel"),
        ("cancelled", "cancel"),
        ("no_conversation", "cancel"),
    ],
)
def test_answers_map_onto_actions(answer: str, action: str) -> None:
    result = result_of(Reply(answer), form(CONFIRM))
    assert result.action == action
    assert result.content == ({"approve": True} if action == "accept" else None)


def test_a_url_elicitation_is_accepted_without_content_and_names_the_url() -> None:
    assert result_of(Reply("approve_once"), URL) == types.ElicitResult(action="accept")
    args, reason = question("docs", URL)
    assert args["url"] == "https://example.com/x" and "https://example.com/x" in reason
    assert answerable(URL)


def test_the_question_quotes_the_server_and_cuts_long_text() -> None:
    args, reason = question("docs", form(CONFIRM, "x" * 5000))
    assert reason.startswith("MCP server 'docs' asks: ")
    assert len(args["message"]) == 2000 and args["schema"] == CONFIRM
