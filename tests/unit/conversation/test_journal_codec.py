"""The journal message format on its own (decision 0322): packing, reading both formats, and
what fails closed."""

from __future__ import annotations

import json

import pytest

from jidocode.services.conversation.codec import (
    JOURNAL_FORMAT,
    journal_entries,
    journal_messages,
    journal_msg_id,
    to_payload,
)
from jidocode.services.conversation.core import Signal
from jidocode.shared.envelope import MSG_ID_HEADER
from jidocode.shared.errors import JidoError


def _entry(i: int, text: str = "hi") -> Signal:
    return Signal(
        id=f"e{i}",
        type="conversation.user.message",
        source="t",
        data={"text": text},
        correlation_id=f"c{i}",
        causation_id=None,
        time="2026-11-28T00:00:00Z",
    )


def test_a_step_packs_into_one_message_and_reads_back_equal() -> None:
    step = [_entry(i) for i in range(3)]
    ((payload, headers),) = journal_messages(step, "p", "c")
    assert json.loads(payload)["format"] == JOURNAL_FORMAT
    assert journal_entries(payload) == step
    assert headers[MSG_ID_HEADER] == journal_msg_id("p", "c", "e0") + "+3"


def test_a_single_entry_keeps_the_entry_id_as_its_message_id() -> None:
    ((_, headers),) = journal_messages([_entry(0)], "p", "c")
    assert headers[MSG_ID_HEADER] == journal_msg_id("p", "c", "e0")


def test_entries_over_the_limit_split_in_order() -> None:
    entries = [_entry(i, "x" * 400) for i in range(10)]
    messages = list(journal_messages(entries, "p", "c", max_bytes=2_000))
    assert len(messages) > 1 and all(len(payload) <= 2_000 for payload, _ in messages)
    assert [e for payload, _ in messages for e in journal_entries(payload)] == entries


def test_format_1_a_bare_cloudevent_is_one_entry() -> None:
    payload, _ = to_payload(_entry(7), "p", "c")
    assert journal_entries(payload) == [_entry(7)]


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"[1, 2]", "not an object"),
        (json.dumps({"format": JOURNAL_FORMAT + 1, "entries": []}).encode(), f"format {JOURNAL_FORMAT + 1}"),
        (json.dumps({"entries": []}).encode(), "format None"),
        (json.dumps({"format": JOURNAL_FORMAT, "entries": []}).encode(), "no entries"),
        (json.dumps({"format": JOURNAL_FORMAT, "entries": [3]}).encode(), "not a JSON object"),
    ],
)
def test_anything_else_fails_closed_naming_what(payload: bytes, says: str) -> None:
    with pytest.raises(JidoError) as raised:
        journal_entries(payload)
    assert raised.value.type == "journal_corrupt" and says in raised.value.message
