"""The client's turn tracker: the conversation's ``turn.ended`` naming its message ends the turn."""

from __future__ import annotations

from typing import Any

from jidocode.client import ContextUsage, TurnTracker


def _ended(outcome: str, message_ids: list[str], **fields: Any) -> dict[str, Any]:
    return {"outcome": outcome, "message_ids": message_ids, **fields}


def test_the_turn_end_naming_the_message_ends_it_with_the_answer() -> None:
    t = TurnTracker(message_id="m1")
    t.feed("conversation.user.message", {"text": "hi"}, event_id="m1")
    # the model's answers and tool rounds are no end: only the conversation says it
    assert t.feed("conversation.llm.completed", {"request_id": "r2", "tool_calls": []}, event_id="a") is None
    assert t.feed("conversation.assistant.message", {"request_id": "r2", "text": "x"}, event_id="b") is None
    out = t.feed("conversation.turn.ended", _ended("completed", ["m0", "m1"], text="done"), event_id="c")
    assert out is not None and (out.status, out.text) == ("answered", "done")


def test_the_end_of_another_message_s_turn_is_not_ours() -> None:
    t = TurnTracker(message_id="m2")
    assert t.feed("conversation.turn.ended", _ended("completed", ["m1"], text="old"), event_id="a") is None
    t.feed("conversation.user.message", {}, event_id="m2")
    assert t.feed("conversation.turn.ended", _ended("failed", ["m1"]), event_id="b") is None
    # a malformed end names nothing we can trust
    assert t.feed("conversation.turn.ended", {"outcome": "won", "message_ids": ["m2"]}, event_id="c") is None
    assert t.outcome is None


def test_failures_stops_and_cancel_end_the_turn() -> None:
    for data, status, error in [
        (_ended("failed", ["m1"], error_type="llm_auth", message="bad key"), "failed", "llm_auth"),
        (_ended("stopped", ["m1"], error_type="max_turns", message="stopped"), "stopped", "max_turns"),
        (_ended("cancelled", ["m1"], error_type="cancelled", message="user"), "cancelled", None),
    ]:
        t = TurnTracker(message_id="m1")
        t.feed("conversation.user.message", {}, event_id="m1")
        out = t.feed("conversation.turn.ended", data, event_id="x")
        assert out is not None and out.status == status and out.error_type == error
        # the outcome sticks
        assert t.feed("conversation.turn.ended", _ended("completed", ["m1"]), event_id="y") == out


def test_started_by_correlation() -> None:
    t = TurnTracker(message_id="m1", correlation_id="corr")
    t.feed("conversation.user.message", {}, event_id="renamed", correlation_id="corr")
    assert t.started


def test_context_usage_reads_like_a_dict() -> None:
    assert ContextUsage(percent_used=12.5)["percent_used"] == 12.5
