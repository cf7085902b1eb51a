"""The pure mappings of the MCP server: specs to tools, results to MCP results, answers to decisions."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.client import ApprovalAnswer, ApprovalRequest
from jidocode.services.mcp_gateway.approvals import Approvals, Pending, TooManyPending
from jidocode.services.mcp_gateway.chat import ChatArgs, ParkedTurn, ParkedTurns, TurnQuestions, parse_args
from jidocode.services.mcp_gateway.mapping import (
    APPROVAL_SCHEMA,
    ERROR_META_KEY,
    answer_to,
    approval_decision,
    ask_refusal,
    command_prompt,
    question_form,
    result_to_mcp,
    skill_name,
    skill_resource,
    tool_to_mcp,
)
from jidocode.shared.events.tools import ToolResult, ToolResultError, ToolSafety, ToolSpec
from jidocode.shared.tools.specs import builtin_specs


def test_every_builtin_tool_maps_with_its_schemas_and_safety() -> None:
    for raw in builtin_specs():
        spec = ToolSpec.model_validate(raw)
        tool = tool_to_mcp(spec)
        assert tool.name == spec.name
        assert tool.input_schema["type"] == "object"
        if spec.output_schema:
            assert tool.output_schema == spec.output_schema
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is spec.safety.read_only


def test_a_spec_without_schemas_still_has_an_object_input_and_no_output() -> None:
    tool = tool_to_mcp(
        ToolSpec(name="x", output_schema={"type": "string"}, safety=ToolSafety(read_only=True))
    )
    assert tool.input_schema == {"type": "object", "properties": {}}
    assert tool.output_schema is None  # MCP allows object output schemas only
    assert tool.annotations is not None and tool.annotations.destructive_hint is False


def test_results_map_to_text_structured_content_and_is_error() -> None:
    ok = result_to_mcp("read_file", ToolResult(ok=True, data={"content": "hi"}))
    assert ok.is_error is False and ok.structured_content == {"content": "hi"}
    assert isinstance(ok.content[0], types.TextContent) and ok.content[0].text == '{"content": "hi"}'
    text = result_to_mcp("t", ToolResult(ok=True, data="plain"))
    assert text.structured_content is None and text.content[0].text == "plain"  # type: ignore[union-attr]
    failed = result_to_mcp(
        "read_file", ToolResult(ok=False, error=ToolResultError(type="not_found", message="no such file"))
    )
    assert failed.is_error is True
    assert failed.content[0].text == "read_file failed (not_found): no such file"  # type: ignore[union-attr]
    # never structured content (the tool's output schema describes a success): details in _meta
    assert failed.structured_content is None
    assert failed.meta == {ERROR_META_KEY: {"error": "not_found", "message": "no such file", "details": {}}}
    dumped = failed.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "structuredContent" not in dumped and dumped["_meta"]["jidocode/error"]["error"] == "not_found"


def test_an_ask_without_anyone_to_ask_names_the_rule() -> None:
    refused = ToolResult(
        ok=False,
        error=ToolResultError(
            type="permission_denied",
            message="needs approval, but the call has no conversation to ask: write ask/x.txt needs approval "
            "(rule Edit(ask/**))",
            details={"decision": "ask", "rule": "Edit(ask/**)"},
        ),
    )
    result = result_to_mcp("write_file", refused)
    assert result.is_error is True
    message = result.content[0].text  # type: ignore[union-attr]
    assert message == ask_refusal("write_file", refused)
    assert message.startswith("write_file needs approval: Edit(ask/**) asks (write ask/x.txt needs approval")
    assert "does not support elicitation" in message
    assert result.structured_content is None
    assert result.meta == {ERROR_META_KEY: {"error": "approval_needed", "rule": "Edit(ask/**)"}}
    # a plain denial is not an ask
    denied = ToolResult(
        ok=False, error=ToolResultError(type="permission_denied", message="no", details={"decision": "deny"})
    )
    assert "elicitation" not in result_to_mcp("bash", denied).content[0].text  # type: ignore[union-attr]


ANSWERS = st.sampled_from(
    [None, {}, {"approve": True}, {"approve": False}, {"approve": "yes"}, {"other": True}]
)


@settings(max_examples=60, deadline=None)
@given(action=st.sampled_from(["accept", "decline", "cancel"]), content=ANSWERS)
def test_only_an_accepted_true_approves(action: str, content: dict[str, Any] | None) -> None:
    answer = types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]
    expected = "approve_once" if action == "accept" and (content or {}).get("approve") is True else "deny"
    assert approval_decision(answer) == expected


def test_anything_but_an_elicit_result_denies() -> None:
    assert approval_decision(None) == "deny"
    assert approval_decision(types.ListRootsResult(roots=[])) == "deny"


@settings(max_examples=60, deadline=None)
@given(st.from_regex(r"[a-z0-9][a-z0-9-]{0,40}", fullmatch=True))
def test_skill_uris_round_trip(name: str) -> None:
    assert skill_name(str(skill_resource({"name": name, "description": "d"}).uri)) == name


def test_unknown_uris_name_no_skill() -> None:
    assert skill_name("jidocode://skills/") is None
    assert skill_name("file:///etc/passwd") is None


def test_commands_become_prompts_with_their_arguments() -> None:
    prompt = command_prompt(
        {"name": "review", "description": "Review", "arguments": [{"name": "path", "required": True}]}
    )
    assert prompt.name == "review" and prompt.arguments is not None
    assert [(a.name, a.required) for a in prompt.arguments] == [("path", True)]
    hinted = command_prompt({"name": "fix", "argument_hint": "<issue>"})
    assert hinted.arguments is not None and [a.name for a in hinted.arguments] == ["arguments"]
    assert command_prompt({"name": "plain"}).arguments is None


def test_chat_arguments_are_checked_and_each_problem_named() -> None:
    assert parse_args(ChatArgs, "chat", {"message": "hi"}) == ChatArgs(message="hi")
    bad = parse_args(ChatArgs, "chat", {"message": "", "conversation_id": "a.b", "timeout_s": 99999, "x": 1})
    assert isinstance(bad, types.CallToolResult) and bad.is_error is True
    text = bad.content[0].text  # type: ignore[union-attr]
    for field in ("message", "conversation_id", "timeout_s", "x"):
        assert field in text


async def test_parked_calls_are_bounded_and_taken_once() -> None:
    approvals = Approvals(bus=None, project_id="p", max_pending=2)  # type: ignore[arg-type]  # no I/O here
    gate = asyncio.Event()

    async def never() -> ToolResult:
        await gate.wait()
        return ToolResult(ok=True)

    def parked(i: int) -> Pending:
        question: Any = None
        return Pending(f"r{i}", "t", {}, asyncio.ensure_future(never()), question, "c", asyncio.Queue())

    first, second = parked(1), parked(2)
    token = approvals.park(first)
    approvals.park(second)
    third = parked(3)
    with pytest.raises(TooManyPending, match="at most 2"):
        approvals.park(third)
    third.run.cancel()
    assert approvals.take(token) is first
    assert approvals.take(token) is None
    gate.set()
    await second.run  # park's done callback was added first, so it ran before this await returns
    assert approvals.parked == 0  # a call that ended is no longer parked
    with pytest.raises(ValueError, match="max_pending"):
        Approvals(bus=None, project_id="p", max_pending=0)  # type: ignore[arg-type]


async def test_parked_chat_turns_are_bounded_and_taken_once() -> None:
    turns = ParkedTurns(max_pending=1)
    gate = asyncio.Event()

    async def turn() -> types.CallToolResult:
        await gate.wait()
        return types.CallToolResult(content=[])

    def parked() -> ParkedTurn:
        question: Any = None
        return ParkedTurn(asyncio.ensure_future(turn()), TurnQuestions(), question, asyncio.Future())

    first = parked()
    token = turns.park(first)
    second = parked()
    with pytest.raises(TooManyPending, match="at most 1"):
        turns.park(second)
    assert turns.take(token) is first and turns.take(token) is None
    turns.park(second)
    gate.set()
    # gather resumes this test only after each task's earlier done callbacks (the unparking) ran
    await asyncio.gather(first.task, second.task)
    turns.park(parked())
    turns.close()
    with pytest.raises(ValueError, match="max_pending"):
        ParkedTurns(max_pending=0)


async def test_a_turns_ask_waits_for_the_round_that_answers_it() -> None:
    questions = TurnQuestions()
    request: Any = object()
    asking = asyncio.ensure_future(questions.approve(request))
    asked, answer = await questions.questions.get()
    assert asked is request
    answer.set_result("approve_once")
    assert await asking == "approve_once"
    pieces: list[str] = []

    async def sink(count: float, text: str) -> None:
        pieces.append(text)

    await questions.progress(1, "dropped")  # no round to send it to
    questions.sink = sink
    await questions.progress(2, "kept")
    assert pieces == ["kept"]


FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def test_a_calls_questions_come_in_order_each_answered_by_its_own_id() -> None:
    """The policy's ask (the call's id), then its MCP server's forms (``<id>/elicitation-<n>``)."""
    approvals = Approvals(bus=None, project_id="p")  # type: ignore[arg-type]  # no I/O here
    questions = approvals.expect("r1")
    ask = ApprovalRequest(request_id="r1", tool="mcp__x__order", args={})
    form = ApprovalRequest(
        request_id="r1/elicitation-1",
        tool="mcp__x__order",
        args={},
        reason="MCP server 'x' asks: who?",
        form=FORM,
    )
    first = asyncio.ensure_future(approvals._on_ask(ask))
    second = asyncio.ensure_future(approvals._on_ask(form))
    assert await questions.get() == ask
    approvals.answer("r1", "approve_once")
    assert await first == "approve_once"
    assert await questions.get() == form
    approvals.answer(form.request_id, ApprovalAnswer(content={"name": "Ada"}))
    assert await second == ApprovalAnswer(content={"name": "Ada"})
    stranger = ApprovalRequest(request_id="r2/elicitation-1", tool="t", args={})
    assert await approvals._on_ask(stranger) == "deny"  # no call of this server's
    late = asyncio.ensure_future(
        approvals._on_ask(form.model_copy(update={"request_id": "r1/elicitation-2"}))
    )
    await questions.get()
    approvals.forget("r1")  # the call ended: what it still asked is denied
    assert await late == "deny"


def test_a_servers_form_is_asked_as_it_is_and_its_answer_carries_the_values() -> None:
    form = ApprovalRequest(
        request_id="r/elicitation-1", tool="t", args={}, reason="MCP server 'x' asks: who?", form=FORM
    )
    assert question_form(form) == ("MCP server 'x' asks: who?", FORM)
    accepted = types.ElicitResult(action="accept", content={"name": "Ada"})
    assert answer_to(form, accepted) == ApprovalAnswer(decision="approve_once", content={"name": "Ada"})
    assert answer_to(form, types.ElicitResult(action="decline")).decision == "deny"
    assert answer_to(form, types.ElicitResult(action="cancel")).decision == "deny"
    ask = ApprovalRequest(request_id="r", tool="bash", args={"command": "ls"}, reason="Bash(ls:*)")
    message, schema = question_form(ask)
    assert schema == APPROVAL_SCHEMA and "bash" in message and "Bash(ls:*)" in message
    yes = types.ElicitResult(action="accept", content={"approve": True})
    assert answer_to(ask, yes) == ApprovalAnswer(decision="approve_once")
    assert answer_to(ask, types.ElicitResult(action="accept", content={"approve": False})).decision == "deny"
