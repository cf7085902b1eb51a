"""A conversation's title: its first user message on one line, cut (services/conversation/record.py)."""

from __future__ import annotations

from jidocode.services.conversation.record import TITLE_CHARS, ConversationRecord, title_of


def test_a_title_is_the_message_on_one_line() -> None:
    assert title_of("  Fix the\n\ttests,\r\n please  ") == "Fix the tests, please"


def test_a_title_holds_no_terminal_escape() -> None:
    assert title_of("hi \x1b]52;c;ZXZpbA==\x07there\x1b[2J") == "hi ]52;c;ZXZpbA==there[2J"


def test_a_long_message_is_cut_with_an_ellipsis() -> None:
    title = title_of("word " * 100)
    assert len(title) <= TITLE_CHARS and title.endswith("…") and title.startswith("word word")


def test_a_record_written_before_titles_reads_without_one() -> None:
    old = '{"project_id": "p", "conversation_id": "c", "status": "active"}'
    assert ConversationRecord.model_validate_json(old).title == ""
