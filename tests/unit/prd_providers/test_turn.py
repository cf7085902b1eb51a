"""When the jidocode provider's turn is over (pure)."""

from __future__ import annotations

from jidocode.services.prd.providers.turn import Outcome, Turn

ECHO = ("conversation.user.message", {"text": "go"})


def _turn() -> Turn:
    turn = Turn(message_id="m1")
    # an earlier turn's answer, before our echo, is not ours
    assert turn.feed("conversation.llm.completed", {"request_id": "r0"}, event_id="x") is None
    assert (
        turn.feed("conversation.assistant.message", {"request_id": "r0", "text": "old"}, event_id="y") is None
    )
    assert turn.feed(*ECHO, event_id="m1") is None and turn.started
    return turn


def test_answered_in_either_order_of_completion_and_message() -> None:
    turn = _turn()
    assert (
        turn.feed(
            "conversation.llm.completed", {"request_id": "r1", "tool_calls": [{"id": "c"}]}, event_id="a"
        )
        is None
    )
    assert (
        turn.feed("conversation.assistant.message", {"request_id": "r2", "text": "done"}, event_id="b")
        is None
    )
    assert turn.feed("conversation.llm.completed", {"request_id": "r2"}, event_id="c") == Outcome(
        "answered", "done"
    )
    other = _turn()
    other.feed("conversation.llm.completed", {"request_id": "r2"}, event_id="c")
    assert other.feed(
        "conversation.assistant.message", {"request_id": "r2", "text": "ok"}, event_id="d"
    ) == Outcome("answered", "ok")


def test_the_echo_is_found_by_its_correlation_id_too() -> None:
    turn = Turn(message_id="m1")
    turn.feed(*ECHO, event_id="other", correlation_id="m1")
    assert turn.started


def test_failures_stops_and_cancels_end_the_turn() -> None:
    failed = _turn().feed(
        "conversation.llm.failed",
        {"request_id": "r", "error_type": "llm_auth", "message": "bad key"},
        event_id="e",
    )
    assert failed == Outcome("failed", error_type="llm_auth", message="bad key")
    stopped = _turn().feed(
        "conversation.loop.stopped", {"reason": "max_turns", "turns": 5, "max_turns": 5}, event_id="e"
    )
    assert stopped is not None and stopped.status == "stopped" and "5 of 5" in stopped.message
    cancelled = _turn().feed("conversation.cancel", {"reason": "pause"}, event_id="e")
    assert cancelled == Outcome("cancelled", message="pause")


def test_a_context_overflow_waits_for_the_compaction() -> None:
    turn = _turn()
    overflow = {"request_id": "r", "error_type": "llm_context_overflow", "message": "too long"}
    assert turn.feed("conversation.llm.failed", overflow, event_id="e") is None
    assert turn.overflow is not None and turn.overflow.error_type == "llm_context_overflow"
    turn.feed("conversation.compaction.requested", {}, event_id="f")
    assert turn.overflow is None and turn.outcome is None
