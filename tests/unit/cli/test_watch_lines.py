"""`jidocode watch`: each event once, its subject shown, and what --since accepts (pure parts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import typer

from jidocode.cli.watch import EventFilter, Seen, format_line, parse_since, ulid_time
from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope, new_id


def test_seen_keeps_the_first_copy_of_an_id_only_and_forgets_the_oldest() -> None:
    seen = Seen(size=2)
    assert [seen.first(i) for i in ("a", "a", "b", "a")] == [True, False, True, False]
    assert seen.first("c")  # evicts "a"
    assert seen.first("a") and not seen.first("c")


def test_line_shows_the_subject_and_the_type_only_when_the_subject_does_not_end_with_it() -> None:
    env = Envelope(
        id="1",
        source="s",
        type="conversation.user.message",
        data={"text": "hi"},
        time="2026-11-24T08:25:27.946644Z",
    )
    out = subjects.conversation_out("P1", "C1", env.type)
    line = format_line(env, out)
    assert out in line and "08:25:27.946" in line and "text=hi" in line
    assert "[cyan]" not in line  # the subject already names the type
    journal = format_line(env, subjects.journal("P1", "C1"))
    assert subjects.journal("P1", "C1") in journal and "[cyan]conversation.user.message[/]" in journal


def test_since_accepts_ages_iso_times_and_times_of_day_else_it_is_an_event_id() -> None:
    now = datetime(2026, 11, 24, 8, 30, tzinfo=UTC)
    assert parse_since("15m", now) == now - timedelta(minutes=15)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("2026-11-24T08:25:00Z", now) == datetime(2026, 11, 24, 8, 25, tzinfo=UTC)
    assert parse_since("2026-11-24T09:25:00+01:00", now) == datetime(2026, 11, 24, 8, 25, tzinfo=UTC)
    day = parse_since("08:25+00:00", now)
    assert day == datetime(2026, 11, 24, 8, 25, tzinfo=UTC)
    assert parse_since("01M86AHW49N07D36NK3M1N6J5H", now) == "01M86AHW49N07D36NK3M1N6J5H"
    assert parse_since("P:C:1", now) == "P:C:1"
    with pytest.raises(typer.BadParameter):
        parse_since(" ", now)


def test_ulid_time_reads_the_milliseconds_of_an_event_id() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    when = ulid_time(new_id())
    assert when is not None and before <= when <= datetime.now(UTC)
    assert ulid_time("P:C:1") is None
    assert ulid_time("not-a-ulid") is None


def test_replay_reads_only_the_asked_project_and_conversation() -> None:
    assert EventFilter().stored_subject() == subjects.conversation_out_filter()
    assert EventFilter("P1", "C1").stored_subject() == subjects.conversation_out_filter("P1", "C1")
    assert EventFilter("bad.id").stored_subject() == subjects.conversation_out_filter()
