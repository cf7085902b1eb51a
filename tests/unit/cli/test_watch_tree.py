"""`jidocode watch --tree`: a turn's ``conversation.turn.ended`` is its end line (decision 0317)."""

from __future__ import annotations

from jidocode.cli.watch_tree import TurnTree
from jidocode.shared.envelope import Envelope, new_id, now_iso


def _env(type_: str, correlation: str, *, conversation: str = "c1", **data: object) -> Envelope:
    return Envelope(
        id=new_id(),
        source="t",
        type=type_,
        data=dict(data),
        time=now_iso(),
        extensions={"projectid": "P1", "conversationid": conversation, "correlationid": correlation},
    )


def _lines(*events: Envelope) -> list[str]:
    tree = TurnTree()
    return [line for env in events for line in tree.add(env)]


def test_a_completed_turn_ends_with_its_end_line_under_the_answer() -> None:
    lines = _lines(
        _env("conversation.user.message", "k1", text="hi"),
        _env("conversation.llm.requested", "k1", turn=1),
        _env("conversation.assistant.message", "k1", text="hello", request_id="r1"),
        _env("conversation.turn.ended", "k1", outcome="completed", message_ids=["k1"], turns=1, text="hello"),
    )
    assert lines[1:] == [
        '  ▸ turn k1: "hi"',
        "    ├ llm requested (loop turn 1)",
        '    ├ answer: "hello"',
        "    └ turn ended: completed · 1 model call",
    ]


def test_a_failed_turn_names_its_cause_and_an_overflow_retry() -> None:
    lines = _lines(
        _env("conversation.user.message", "k1", text="hi"),
        _env(
            "conversation.turn.ended",
            "k1",
            outcome="failed",
            message_ids=["k1"],
            error_type="llm_auth",
            message="bad key",
            turns=2,
            overflow_retried=True,
        ),
    )
    assert lines[-1] == (
        "    └ turn ended: failed: llm_auth: bad key · 2 model calls · context overflowed, compacted and retried"
    )


def test_an_end_correlated_elsewhere_stays_under_the_turn_it_answered() -> None:
    # a cancel carries its own correlation id; the end names the user message it answered
    lines = _lines(
        _env("conversation.user.message", "k1", text="hi"),
        _env("conversation.turn.ended", "cancel-1", outcome="cancelled", message_ids=["k1"]),
    )
    assert lines[1:] == ['  ▸ turn k1: "hi"', "    └ turn ended: cancelled"]


def test_a_malformed_end_is_shown_not_skipped() -> None:
    lines = _lines(_env("conversation.turn.ended", "k1", outcome="exploded"))
    assert lines[1:] == ["  ▸ turn k1", "    └ turn ended: exploded (malformed)"]
