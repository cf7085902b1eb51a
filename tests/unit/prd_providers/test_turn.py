"""When the jidocode provider's turn is over (pure)."""

from __future__ import annotations

from jidocode.services.prd.providers.turn import Outcome, Turn

ECHO = ("conversation.user.message", {"text": "go"})


def _ended(outcome: str, message_ids: list[str], **fields: object) -> dict[str, object]:
    return {"outcome": outcome, "message_ids": message_ids, **fields}


def _turn() -> Turn:
    turn = Turn(message_id="m1")
    # an earlier turn's end is not ours
    assert turn.feed("conversation.turn.ended", _ended("completed", ["m0"], text="old"), event_id="x") is None
    assert turn.feed(*ECHO, event_id="m1") is None and turn.started
    return turn


def test_only_the_conversation_s_turn_end_naming_the_message_ends_it() -> None:
    turn = _turn()
    # answers, tool rounds and overflows are no end: the conversation says when it is
    assert turn.feed("conversation.llm.completed", {"request_id": "r2"}, event_id="a") is None
    assert (
        turn.feed("conversation.assistant.message", {"request_id": "r2", "text": "x"}, event_id="b") is None
    )
    overflow = {"request_id": "r", "error_type": "llm_context_overflow", "message": "too long"}
    assert turn.feed("conversation.llm.failed", overflow, event_id="c") is None
    assert turn.feed("conversation.turn.ended", {"outcome": "?", "message_ids": ["m1"]}, event_id="d") is None
    ended = _ended("completed", ["m1"], text="done", overflow_retried=True)
    assert turn.feed("conversation.turn.ended", ended, event_id="e") == Outcome("answered", "done")


def test_the_echo_is_found_by_its_correlation_id_too() -> None:
    turn = Turn(message_id="m1")
    turn.feed(*ECHO, event_id="other", correlation_id="m1")
    assert turn.started


def test_failures_stops_and_cancels_end_the_turn() -> None:
    def end(data: dict[str, object]) -> Outcome | None:
        return _turn().feed("conversation.turn.ended", data, event_id="e")

    failed = end(_ended("failed", ["m1"], error_type="llm_auth", message="bad key"))
    assert failed == Outcome("failed", error_type="llm_auth", message="bad key")
    stopped = end(_ended("stopped", ["m1"], error_type="max_turns", message="after 5 of 5 turns"))
    assert stopped is not None and stopped.status == "stopped" and "5 of 5" in stopped.message
    cancelled = end(_ended("cancelled", ["m1"], error_type="cancelled", message="pause"))
    assert cancelled == Outcome("cancelled", message="pause")
    overflowed = end(_ended("failed", ["m1"], error_type="llm_context_overflow", message="too long"))
    assert overflowed is not None and overflowed.error_type == "llm_context_overflow"
