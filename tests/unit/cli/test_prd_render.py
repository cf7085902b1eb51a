"""How `jidocode prd run` and the TUI show loop events (pure): lines, markup safety, exit codes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from jidocode.cli.prd_render import (
    MAX_LINE_CHARS,
    MAX_OUTPUT_LINES,
    LineRenderer,
    exit_code_for,
    header_text,
    preview,
    safe,
    story_rows,
    story_text,
)
from jidocode.shared.events.prd import (
    CheckOutcome,
    PrdAssistantText,
    PrdCommandOutput,
    PrdCommitted,
    PrdError,
    PrdEvent,
    PrdIterationFinished,
    PrdIterationStarted,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdRetryScheduled,
    PrdStoryStateChanged,
    PrdToolFinished,
    PrdToolStarted,
)

BASE: dict[str, Any] = {"project_id": "p1", "prd": "auth", "story_id": "US-1", "attempt": 1}
HOSTILE = "[bold]pwned[/bold] [link=https://evil.example]click[/link] [red]x"


def _ev(cls: type[PrdEvent], seq: int = 1, **kw: Any) -> PrdEvent:
    return cls(**{**BASE, "seq": seq, **kw})


def _plain(lines: list[Any]) -> list[str]:
    return [line.plain for line in lines]


def _rendered(lines: list[Any]) -> str:
    """What a terminal shows (styles and links as ANSI), to check nothing in the text took effect."""
    console = Console(width=400, force_terminal=True, color_system="truecolor", file=io.StringIO())
    for line in lines:
        console.print(line)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_story_is_shown_from_header_to_commit() -> None:
    r = LineRenderer()
    events = [
        _ev(PrdLoopStateChanged, 1, from_state="ready", to_state="running"),
        _ev(PrdStoryStateChanged, 2, from_state="pending", to_state="in_progress"),
        _ev(PrdIterationStarted, 3, provider="jidocode", model="openai/scripted"),
        _ev(PrdAssistantText, 4, text="I will add "),
        _ev(PrdAssistantText, 5, text="the login.\nDone"),
        _ev(PrdToolStarted, 6, tool="edit_file", input={"path": "a.py", "content": "x" * 500}),
        _ev(PrdToolFinished, 7, tool="edit_file", output="wrote 3 lines\nmore"),
        _ev(PrdCommandOutput, 8, command="pytest -q", text="1 passed\n", exit_code=0),
        _ev(PrdIterationFinished, 9, ok=True, duration_s=2.5, usage={"total_tokens": 120}),
        _ev(
            PrdQualityReport,
            10,
            ok=False,
            checks=[
                CheckOutcome(command="ruff check .", ok=True, exit_code=0, duration_s=0.4),
                CheckOutcome(
                    command="pytest", ok=False, exit_code=1, output="E assert 1 == 2", duration_s=1.0
                ),
            ],
        ),
        _ev(PrdRetryScheduled, 11, delay_s=5, reason="checks failed"),
        _ev(
            PrdCommitted,
            12,
            commit="0123456789abcdef",
            message="US-1: login\n\nbody",
            branch="prd/auth",
            files=["a.py"],
        ),
        _ev(PrdError, 13, kind="transient", message="model timed out", retryable=True),
    ]
    lines = _plain([line for e in events for line in r.feed(e)] + r.flush())
    assert lines[0] == "loop ready → running"
    assert lines[1] == "▶ story US-1: pending → in_progress"
    assert lines[2] == "━━ story US-1 · attempt 1 · jidocode/openai/scripted ━━"
    # streamed text: pieces joined, held until the line ends
    assert lines[3] == "  I will add the login."
    assert lines[4] == "  Done"
    assert lines[5].startswith("  ⏺ edit_file(path=a.py, content=xxx") and lines[5].endswith("…)")
    assert lines[6] == "    ✓ edit_file: wrote 3 lines"
    assert lines[7:10] == ["  $ pytest -q", "    │ 1 passed", "    exit 0"]
    assert lines[10] == "  ✓ iteration done in 2.5s · 120 tokens"
    assert lines[11:15] == [
        "  checks failed (2)",
        "  ✓ ruff check . (exit 0, 0.4s)",
        "  ✗ pytest (exit 1, 1.0s)",
        "    │ E assert 1 == 2",
    ]
    assert lines[15] == "  ↻ retry in 5s: checks failed"
    assert lines[16] == "  ● committed 0123456789ab on prd/auth: US-1: login · 1 file"
    assert lines[17] == "  ! error (transient) (will retry): model timed out"
    assert len(lines) == 18


def test_text_from_the_model_and_tools_is_never_markup() -> None:
    r = LineRenderer()
    events = [
        _ev(PrdAssistantText, 1, text=HOSTILE + "\n"),
        _ev(PrdToolStarted, 2, tool="[bold]t", input={"q": HOSTILE}),
        _ev(PrdToolFinished, 3, tool="t", ok=False, output=HOSTILE),
        _ev(PrdCommandOutput, 4, command=HOSTILE, text=HOSTILE, exit_code=2),
        _ev(PrdError, 5, kind="provider", message=HOSTILE),
        _ev(PrdCommitted, 6, commit="abc", message=HOSTILE),
        _ev(PrdQualityReport, 7, ok=False, checks=[CheckOutcome(command=HOSTILE, ok=False, output=HOSTILE)]),
    ]
    lines = [line for e in events for line in r.feed(e)]
    for line in lines:
        # the text is kept as written and only our own styles (never one named in it) apply
        assert (
            "[bold]" in line.plain
            or "[link=" in line.plain
            or line.plain.strip().startswith(("exit", "checks"))
        )
        for span in line.spans:
            assert "link" not in str(span.style) and "evil" not in str(span.style)
    shown = _rendered(lines)
    assert "[bold]pwned[/bold]" in shown and "[link=https://evil.example]click[/link]" in shown
    assert "\x1b]8;" not in shown  # no hyperlink escape sequence reached the terminal


def test_escape_sequences_in_text_never_reach_the_terminal() -> None:
    lines = LineRenderer().feed(
        _ev(PrdCommandOutput, 1, command="\x1b]0;title\x07ls", text="\x1b[2J\x1b[31mred\r\n")
    )
    shown = _rendered(lines)
    assert "\x1b[2J" not in shown and "\x1b]0;" not in shown and "\r" not in shown
    assert [line.plain for line in lines][:2] == [
        "  $ \ufffd]0;title\ufffdls",
        "    │ \ufffd[2J\ufffd[31mred",
    ]


def test_long_output_shows_its_tail_and_long_lines_are_cut() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + "\n" + "y" * 5000
    lines = _plain(LineRenderer().feed(_ev(PrdCommandOutput, 1, command="make", text=text)))
    body = [line for line in lines if line.startswith("    │")]
    assert body[0] == "    │ … 81 earlier lines"
    assert len(body) == MAX_OUTPUT_LINES + 1
    assert max(len(line) for line in lines) <= MAX_LINE_CHARS + len("    │ ")
    assert LineRenderer(command_output=False).feed(_ev(PrdCommandOutput, 1, command="make", text=text)) != []


@pytest.mark.parametrize(
    ("to_state", "code"),
    [("completed", 0), ("error", 1), ("stopped", 1), ("paused", None), ("running", None)],
)
def test_exit_codes_follow_the_final_state(to_state: str, code: int | None) -> None:
    event = _ev(PrdLoopStateChanged, 1, from_state="running", to_state=to_state)
    assert exit_code_for(event) == code
    assert exit_code_for(_ev(PrdAssistantText, 1, text="completed")) is None


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30), max_size=20))
def test_streamed_text_is_shown_whole_however_it_is_cut(pieces: list[str]) -> None:
    r = LineRenderer()
    lines = [
        line.plain for i, p in enumerate(pieces) for line in r.feed(_ev(PrdAssistantText, i + 1, text=p))
    ]
    lines += [line.plain for line in r.flush()]
    whole = safe("".join(pieces))
    expected = whole.split("\n")
    if expected and expected[-1] == "":
        expected.pop()
    assert [line[2:] for line in lines] == [
        e[: MAX_LINE_CHARS - 1] + "…" if len(e) > MAX_LINE_CHARS else e for e in expected
    ]


def test_stories_from_prd_json() -> None:
    prd = {
        "name": "auth",
        "userStories": [
            {"id": "US-1", "title": "Login", "passes": True, "priority": 1},
            {"id": "US-2", "title": "[bold]Logout", "inProgress": True, "attempts": 2},
            {"id": "US-3", "title": "Reset"},
            "not a story",
        ],
    }
    rows = story_rows(prd)
    assert [(r.id, r.state) for r in rows] == [
        ("US-1", "passed"),
        ("US-2", "in_progress"),
        ("US-3", "pending"),
    ]
    assert rows[1].attempts == 2
    assert [story_text(r).plain for r in rows] == ["✓ US-1 Login", "▶ US-2 [bold]Logout", "· US-3 Reset"]
    assert story_rows({"userStories": "oops"}) == []
    assert header_text("auth", "running", "US-2", 2).plain == "PRD auth  running  story US-2  attempt 2"
    assert header_text("auth", "ready", "", 0).plain == "PRD auth  ready"


def test_preview_is_short_and_on_one_line() -> None:
    assert preview({"path": "a.py", "n": 3, "body": "a\n  b"}) == "path=a.py, n=3, body=a b"
    assert len(preview({"x": "z" * 1000})) < 70
