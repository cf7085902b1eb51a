"""An elicitation as an approval question, and the answer back (pure)."""

from __future__ import annotations

import mcp_types as types
import pytest

from jidocode.services.tool_runner.mcp.elicit import answerable, fill, question, result_of

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
    assert answerable(form(schema)) is (content is not None)


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
    result = result_of(answer, form(CONFIRM))
    assert result.action == action
    assert result.content == ({"approve": True} if action == "accept" else None)


def test_a_url_elicitation_is_accepted_without_content_and_names_the_url() -> None:
    assert result_of("approve_once", URL) == types.ElicitResult(action="accept")
    args, reason = question("docs", URL)
    assert args["url"] == "https://example.com/x" and "https://example.com/x" in reason
    assert answerable(URL)


def test_the_question_quotes_the_server_and_cuts_long_text() -> None:
    args, reason = question("docs", form(CONFIRM, "x" * 5000))
    assert reason.startswith("MCP server 'docs' asks: ")
    assert len(args["message"]) == 2000 and args["schema"] == CONFIRM
