"""The client's turn tracker: which output event ends a turn, and how."""

from __future__ import annotations

from typing import Any

from jidocode.client import ContextUsage, TurnTracker


def _feed(t: TurnTracker, events: list[tuple[str, dict[str, Any]]], first_id: str = "m1") -> Any:
    out = None
    for n, (type_, data) in enumerate(events):
        out = t.feed(type_, data, event_id=first_id if n == 0 else f"e{n}")
    return out


def test_answer_after_tool_round() -> None:
    t = TurnTracker(message_id="m1")
    out = _feed(
        t,
        [
            ("conversation.user.message", {"text": "hi"}),
            ("conversation.llm.requested", {"turn": 1}),
            ("conversation.llm.completed", {"request_id": "r1", "tool_calls": [{"id": "x"}]}),
            ("conversation.assistant.message", {"request_id": "r1", "text": "looking"}),
            ("conversation.tool.completed", {"request_id": "t1"}),
            ("conversation.llm.completed", {"request_id": "r2", "tool_calls": []}),
        ],
    )
    assert out is None
    out = t.feed("conversation.assistant.message", {"request_id": "r2", "text": "done"}, event_id="e9")
    assert out is not None and (out.status, out.text) == ("answered", "done")


def test_answer_text_may_come_before_its_completion() -> None:
    t = TurnTracker(message_id="m1")
    t.feed("conversation.user.message", {}, event_id="m1")
    assert t.feed("conversation.assistant.message", {"request_id": "r", "text": "a"}, event_id="1") is None
    out = t.feed("conversation.llm.completed", {"request_id": "r"}, event_id="2")
    assert out is not None and out.text == "a"


def test_events_before_own_message_are_ignored() -> None:
    t = TurnTracker(message_id="m2")
    assert t.feed("conversation.llm.completed", {"request_id": "old"}, event_id="a") is None
    assert (
        t.feed("conversation.assistant.message", {"request_id": "old", "text": "old"}, event_id="b") is None
    )
    assert t.feed("conversation.user.message", {}, event_id="other") is None
    t.feed("conversation.user.message", {}, event_id="m2")
    assert t.feed("conversation.assistant.message", {"request_id": "old", "text": "x"}, event_id="c") is None


def test_failures_stops_and_cancel_end_the_turn() -> None:
    for type_, data, status, error in [
        ("conversation.llm.failed", {"error_type": "llm_auth", "message": "bad key"}, "failed", "llm_auth"),
        (
            "conversation.loop.stopped",
            {"reason": "max_turns", "turns": 3, "max_turns": 3},
            "stopped",
            "max_turns",
        ),
        ("conversation.cancel", {"reason": "user"}, "cancelled", None),
    ]:
        t = TurnTracker(message_id="m1")
        t.feed("conversation.user.message", {}, event_id="m1")
        out = t.feed(type_, data, event_id="x")
        assert out is not None and out.status == status and out.error_type == error
        # the outcome sticks
        assert t.feed("conversation.assistant.message", {"request_id": "r"}, event_id="y") == out


def test_started_by_correlation() -> None:
    t = TurnTracker(message_id="m1", correlation_id="corr")
    t.feed("conversation.user.message", {}, event_id="renamed", correlation_id="corr")
    assert t.started


def test_context_usage_reads_like_a_dict() -> None:
    assert ContextUsage(percent_used=12.5)["percent_used"] == 12.5
