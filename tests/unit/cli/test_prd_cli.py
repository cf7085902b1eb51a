"""`jidocode prd` without a system: bad names and stories files are clear errors before any
connection, and the live follower's end (exit codes, Ctrl-C asking for a pause)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.cli.prd import EXIT_INTERRUPTED, MAX_STORIES_FILE_BYTES, check_name, follow_loop, read_stories
from jidocode.cli.prd_render import LineRenderer
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import PrdAssistantText, PrdEvent, PrdLoopStateChanged

BASE: dict[str, Any] = {"project_id": "p1", "prd": "auth"}
runner = CliRunner()


@pytest.mark.parametrize("command", ["new", "show", "run", "pause", "resume", "stop", "tui"])
def test_a_bad_name_is_refused_before_connecting(command: str, tmp_path: Path) -> None:
    # NATS_URL points nowhere: a connection attempt would fail differently
    result = runner.invoke(
        app, ["prd", command, str(tmp_path), "no/such name"], env={"NATS_URL": "nats://127.0.0.1:1"}
    )
    assert result.exit_code == 2, result.output
    assert "invalid PRD name 'no/such name': use 1 to 64 letters, digits, '_' or '-'" in " ".join(
        result.output.split()
    )


def test_an_error_quoting_input_prints_it_as_text(tmp_path: Path) -> None:
    result = runner.invoke(app, ["prd", "new", str(tmp_path), "[bold]x[/bold]"])
    assert result.exit_code == 2 and "invalid PRD name '[bold]x[/bold]'" in result.output


def test_reset_story_checks_the_name_before_asking(tmp_path: Path) -> None:
    result = runner.invoke(app, ["prd", "reset-story", str(tmp_path), "x" * 65, "US-1"], input="y\n")
    assert (
        result.exit_code == 2
        and "invalid PRD name" in result.output
        and "back to pending?" not in result.output
    )
    declined = runner.invoke(
        app,
        ["prd", "reset-story", str(tmp_path), "auth", "US-1"],
        input="n\n",
        env={"NATS_URL": "nats://127.0.0.1:1"},
    )
    assert declined.exit_code == 1 and "put story US-1 of PRD auth back to pending?" in declined.output


def test_names() -> None:
    assert check_name("auth_v2-x") == "auth_v2-x"
    for bad in ("", "a b", "a.b", "x" * 65, "../x"):
        with pytest.raises(InvalidInput, match="invalid PRD name"):
            check_name(bad)


def test_stories_file(tmp_path: Path) -> None:
    good = tmp_path / "s.json"
    good.write_text(
        json.dumps([{"title": "Login", "acceptance_criteria": ["works"], "priority": 2}, {"title": "Out"}])
    )
    stories = read_stories(str(good))
    assert [(s.title, s.priority, s.acceptance_criteria) for s in stories] == [
        ("Login", 2, ["works"]),
        ("Out", 1, []),
    ]
    wrapped = tmp_path / "w.json"
    wrapped.write_text(json.dumps({"stories": [{"title": "A"}]}))
    assert [s.title for s in read_stories(str(wrapped))] == ["A"]

    cases = {
        "[{}]": "story 0.title in .*: Field required",
        '[{"title": "a", "colour": "red"}]': r"story 0.colour in .*: Extra inputs are not permitted",
        '[{"title": "a", "priority": -1}]': r"story 0.priority",
        '{"a": 1}': "must hold a JSON list of stories, got dict",
        "not json": "is not JSON",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(InvalidInput, match=message):
            read_stories(str(bad))
    with pytest.raises(InvalidInput, match="cannot read the stories file"):
        read_stories(str(tmp_path / "missing.json"))
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_STORIES_FILE_BYTES + 1))
    with pytest.raises(InvalidInput, match=f"at most {MAX_STORIES_FILE_BYTES} are read"):
        read_stories(str(big))
    at_limit = tmp_path / "limit.json"
    at_limit.write_bytes(b"[]" + b" " * (MAX_STORIES_FILE_BYTES - 2))
    assert read_stories(str(at_limit)) == []


class Feed:
    """Events in order, then nothing (``None``) forever."""

    def __init__(self, events: list[PrdEvent]) -> None:
        self.events = list(events)
        self.polls = 0

    async def next(self) -> PrdEvent | None:
        self.polls += 1
        if self.events:
            return self.events.pop(0)
        await asyncio.sleep(0)
        return None


def _state(seq: int, to: str) -> PrdLoopStateChanged:
    return PrdLoopStateChanged(**BASE, seq=seq, from_state="running", to_state=to)  # type: ignore[arg-type]


@pytest.mark.parametrize(("final", "code"), [("completed", 0), ("error", 1), ("stopped", 1)])
async def test_the_follower_ends_with_the_loop(final: str, code: int) -> None:
    shown: list[Text] = []
    feed = Feed([_state(1, "paused"), PrdAssistantText(**BASE, seq=2, text="half a line"), _state(3, final)])
    assert await follow_loop(feed, LineRenderer(), shown.append) == code
    # a pause by someone else does not end it; the unfinished text is shown before the end
    assert [t.plain for t in shown] == ["loop running → paused", "  half a line", f"loop running → {final}"]


async def test_a_run_skips_what_came_before_its_start() -> None:
    shown: list[Text] = []
    stale = [PrdAssistantText(**BASE, seq=4, text="old\n"), _state(5, "completed")]
    start = PrdLoopStateChanged(**BASE, seq=6, from_state="ready", to_state="running")
    feed = Feed([*stale, start, _state(7, "error")])
    assert await follow_loop(feed, LineRenderer(), shown.append, from_start=True) == 1
    assert [t.plain for t in shown] == ["loop ready → running", "loop running → error"]


async def test_json_hands_over_the_events_not_lines() -> None:
    shown: list[Text] = []
    events: list[PrdEvent] = []
    feed = Feed([PrdAssistantText(**BASE, seq=1, text="a\n"), _state(2, "completed")])
    assert await follow_loop(feed, LineRenderer(), shown.append, on_event=events.append) == 0
    assert shown == [] and [e.seq for e in events] == [1, 2]


async def test_ctrl_c_asks_for_a_pause_and_ends_once_paused() -> None:
    interrupted = asyncio.Event()
    asked: list[str] = []
    feed = Feed([PrdAssistantText(**BASE, seq=1, text="working\n")])

    async def pause() -> None:
        asked.append("pause")
        feed.events.append(_state(2, "paused"))

    interrupted.set()
    code = await asyncio.wait_for(
        follow_loop(feed, LineRenderer(), lambda _: None, interrupted=interrupted, on_interrupt=pause), 30
    )
    assert code == EXIT_INTERRUPTED and asked == ["pause"]
