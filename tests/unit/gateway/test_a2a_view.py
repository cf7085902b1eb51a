"""The A2A view of a conversation (pure): the task state folded from the timeline, the live
follower of a turn, approval answers, and the proto task built from a view."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts
from a2a.types.a2a_pb2 import Role, TaskState
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.gateway.a2a.tasks import to_task
from jidocode.services.gateway.a2a.view import (
    AnswerError,
    Asked,
    Delta,
    Ended,
    PendingApproval,
    TurnFollower,
    fold,
    parse_decision,
)


def e(kind: str, eid: str = "x", **data: Any) -> dict[str, Any]:
    return {"id": eid, "type": f"conversation.{kind}", "data": data, "correlation_id": "corr-" + eid}


USER = e("user.message", "u1", text="hi")
FINAL = e("llm.completed", "c1", request_id="r1", content="hello", tool_calls=[])
ANSWER = e("assistant.message", "a1", request_id="r1", text="hello")
TOOLS = e("llm.completed", "c0", request_id="r0", tool_calls=[{"id": "t", "name": "write_file"}])
END = e("turn.ended", "z1", outcome="completed", message_ids=["u1"], answer_id="a1", text="hello")


def ended(outcome: str, **data: Any) -> dict[str, Any]:
    return e("turn.ended", "z", outcome=outcome, message_ids=["u1"], **data)


ASKED = e(
    "approval.requested", "q1", request_id="tool-1", tool="write_file", args={"path": "a"}, reason="ask rule"
)


def test_no_message_is_submitted_and_a_message_is_working() -> None:
    assert fold([]).state == "submitted"
    assert fold([USER]).state == "working"


def test_the_conversation_s_turn_end_completes_the_task_with_its_answer() -> None:
    assert fold([USER, FINAL, ANSWER]).state == "working"  # an answer is no end by itself
    view = fold([USER, FINAL, ANSWER, END])
    assert (view.state, view.answer) == ("completed", "hello")
    assert [(u.role, u.text) for u in view.history] == [("user", "hi"), ("agent", "hello")]
    # the end of an earlier message's turn is not the last message's
    later = e("user.message", "u2", text="more")
    assert fold([USER, later, FINAL, ANSWER, END]).state == "working"
    # a malformed end is ignored
    assert fold([USER, e("turn.ended", "z", outcome="?", message_ids=["u1"])]).state == "working"


def test_a_call_with_tool_calls_keeps_working() -> None:
    interim = e("assistant.message", "a0", request_id="r0", text="let me look")
    assert fold([USER, TOOLS, interim]).state == "working"


def test_an_unanswered_approval_is_input_required_until_answered_or_the_call_ends() -> None:
    asked = fold([USER, TOOLS, ASKED])
    assert asked.state == "input-required"
    (pending,) = asked.pending
    assert (pending.request_id, pending.tool, pending.args, pending.correlation_id) == (
        "tool-1",
        "write_file",
        {"path": "a"},
        "corr-q1",
    )
    answered = e("approval.response", "r", request_id="tool-1", decision="deny")
    assert fold([USER, TOOLS, ASKED, answered]).state == "working"
    timed_out = e(
        "tool.failed", "f", request_id="tool-1", call_id="t", name="write_file", error_type="x", message=""
    )
    assert fold([USER, TOOLS, ASKED, timed_out]).state == "working"


def test_failure_cancel_and_a_new_message() -> None:
    failed = fold([USER, ended("failed", error_type="llm_auth", message="bad key")])
    assert (failed.state, failed.reason) == ("failed", "bad key")
    stopped = fold([USER, ended("stopped", error_type="max_turns", message="the loop stopped")])
    assert stopped.state == "failed" and "max_turns" in stopped.reason
    cancel = e("cancel", "c", reason="stop it")
    cancelled = fold(
        [USER, TOOLS, ASKED, cancel, ended("cancelled", error_type="cancelled", message="stop it")]
    )
    assert (cancelled.state, cancelled.reason, cancelled.pending) == ("canceled", "stop it", ())
    again = fold([USER, e("cancel", "c"), e("resume", "r"), e("user.message", "u2", text="again")])
    assert again.state == "working"


def test_parse_decision_reads_words_and_data_parts() -> None:
    one = PendingApproval(request_id="a", tool="t")
    two = PendingApproval(request_id="b", tool="t")
    assert parse_decision(["  Allow. "], [], [one, two]) == (one, "approve_once")
    assert parse_decision(["allow always"], [], [one]) == (one, "approve_session")
    assert parse_decision(["No"], [], [one]) == (one, "deny")
    assert parse_decision(["ignored"], [{"decision": "deny", "request_id": "b"}], [one, two]) == (two, "deny")
    assert parse_decision([], [{"decision": "approve_session"}], [one]) == (one, "approve_session")


@pytest.mark.parametrize(
    ("texts", "datas", "pending", "says"),
    [
        (["maybe"], [], True, "'maybe' is no answer"),
        ([], [{"decision": "perhaps"}], True, "unknown decision 'perhaps'"),
        ([], [{"decision": "deny", "request_id": "zzz"}], True, "no approval 'zzz'"),
        (["allow"], [], False, "no approval is waiting"),
    ],
)
def test_parse_decision_says_what_was_wrong(
    texts: list[str], datas: list[Any], pending: bool, says: str
) -> None:
    waiting = [PendingApproval(request_id="a", tool="t")] if pending else []
    with pytest.raises(AnswerError, match=says):
        parse_decision(texts, datas, waiting)


def test_the_follower_skips_what_came_before_its_message_then_streams_and_ends_once() -> None:
    follower = TurnFollower("u1")
    assert follower.feed("conversation.assistant.delta", {"text": "old"}, event_id="d0") == []
    assert follower.feed(USER["type"], USER["data"], event_id="u1") == []
    assert follower.feed("conversation.assistant.delta", {"text": "hel"}, event_id="d1") == [Delta("hel")]
    assert follower.feed(ASKED["type"], ASKED["data"], event_id="q1") == [
        Asked(PendingApproval(request_id="tool-1", tool="write_file", args={"path": "a"}, reason="ask rule"))
    ]
    assert follower.feed(FINAL["type"], FINAL["data"], event_id="c1") == []
    assert follower.feed(ANSWER["type"], ANSWER["data"], event_id="a1") == []
    other = e("turn.ended", "z0", outcome="failed", message_ids=["u0"])
    assert follower.feed(other["type"], other["data"], event_id="z0") == []
    assert follower.feed(END["type"], END["data"], event_id="z1") == [Ended("completed", "hello")]
    assert follower.feed(END["type"], END["data"], event_id="z2") == []


_AFTER_USER = st.sampled_from(
    [
        FINAL,
        ANSWER,
        TOOLS,
        ASKED,
        e("assistant.message", "a0", request_id="r0", text="interim"),
        e("approval.response", "r", request_id="tool-1", decision="approve_once"),
        e("llm.failed", "f", request_id="r1", error_type="llm_error", message="boom"),
        e("loop.stopped", "s", reason="max_turns"),
        e("cancel", "c", reason="bye"),
        END,
        ended("failed", error_type="llm_error", message="boom"),
        ended("stopped", error_type="max_turns"),
        ended("cancelled", error_type="cancelled", message="bye"),
        e("turn.ended", "z9", outcome="completed", message_ids=["u0"], text="not ours"),
        e("tool.completed", "t", request_id="tool-1", call_id="t", name="write_file"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_AFTER_USER, max_size=12))
def test_the_live_follower_and_the_fold_agree_when_the_turn_ends(events: list[dict[str, Any]]) -> None:
    """What a streaming client saw at the end of the turn is what GetTask says right then."""
    follower = TurnFollower("u1")
    follower.feed(USER["type"], USER["data"], event_id="u1")
    seen = [USER]
    for event in events:
        seen.append(event)
        ended = [
            u
            for u in follower.feed(event["type"], event["data"], event_id=event["id"])
            if isinstance(u, Ended)
        ]
        if ended:
            view = fold(seen)
            assert view.state == ended[0].state
            if ended[0].state == "completed":
                assert view.answer == ended[0].text
            return
    assert fold(seen).state in ("working", "input-required")


def test_to_task_carries_the_state_the_history_the_answer_and_the_question() -> None:
    done = to_task("t1", fold([USER, FINAL, ANSWER, END]))
    assert (done.id, done.context_id, done.status.state) == ("t1", "t1", TaskState.TASK_STATE_COMPLETED)
    assert [get_artifact_text(a) for a in done.artifacts] == ["hello"]
    assert [m.role for m in done.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    asking = to_task("t1", fold([USER, TOOLS, ASKED]))
    assert asking.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    (question,) = get_data_parts(asking.status.message.parts)
    assert question["request_id"] == "tool-1" and question["tool"] == "write_file"
    assert not asking.artifacts


def test_a_refused_first_message_fails_the_task_and_ends_its_follower() -> None:
    rejected = e(
        "error",
        "x1",
        error_type="payload_too_large",
        message="data is 300000 bytes, over 262144",
        details={"rejected_id": "u1"},
    )
    view = fold([rejected])
    assert view.state == "failed" and "over 262144" in view.reason
    assert fold([USER, rejected]).state == "working"  # someone else's input, later: not this task's
    follower = TurnFollower("u1")
    (ended,) = follower.feed(rejected["type"], rejected["data"], event_id="x1")
    assert isinstance(ended, Ended) and ended.state == "failed" and "over 262144" in ended.text
    dropped = e("queue.overflow", "o", dropped_id="u2", dropped_type="conversation.user.message")
    assert TurnFollower("u1").feed(dropped["type"], dropped["data"], event_id="o") == []
    (full,) = TurnFollower("u2").feed(dropped["type"], dropped["data"], event_id="o")
    assert full == Ended("failed", "the conversation's queue was full: the message was dropped")
