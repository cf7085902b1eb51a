"""The PRD TUI started with Textual's pilot on recorded events: it shows the stories, the stream
and the checks, its keys reach the source, ``q`` quits; a finished PRD's history, the story view
(criteria, attempts) and the PRD picker; and its pure model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jidocode.cli.prd_render import StoryRow
from jidocode.cli.prd_tui import (
    PrdApp,
    PrdPicker,
    TuiModel,
    apply,
    choose_prd,
    model_of,
    selected_story,
    stories_text,
)
from jidocode.shared.errors import Conflict, NotFound, ServiceUnavailable
from jidocode.shared.events.prd import (
    CheckOutcome,
    LoopInfo,
    PrdAssistantText,
    PrdCommitted,
    PrdEvent,
    PrdIterationFinished,
    PrdIterationStarted,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdStoryStateChanged,
    PrdSummary,
    PrdToolStarted,
    PrdView,
)

PRD = {
    "name": "auth",
    "title": "Auth",
    "userStories": [
        {"id": "US-1", "title": "Login", "passes": True},
        {"id": "US-2", "title": "Logout [bold]now[/bold]"},
    ],
}
BASE: dict[str, Any] = {"project_id": "p1", "prd": "auth"}


def _recorded() -> list[PrdEvent]:
    story: dict[str, Any] = {**BASE, "story_id": "US-2", "attempt": 1}
    return [
        PrdLoopStateChanged(**BASE, seq=4, from_state="ready", to_state="running"),
        PrdStoryStateChanged(**story, seq=5, from_state="pending", to_state="in_progress"),
        PrdIterationStarted(**story, seq=6, provider="jidocode"),
        PrdAssistantText(**story, seq=7, text="[link=https://evil.example]hi[/link]\n"),
        PrdToolStarted(**story, seq=8, tool="edit_file", input={"path": "a.py"}),
        PrdQualityReport(
            **story,
            seq=9,
            ok=False,
            checks=[CheckOutcome(command="pytest", ok=False, exit_code=1, output="E boom")],
        ),
    ]


class FakeSource:
    """Recorded events, and a record of what the keys asked for."""

    name = "auth"

    def __init__(
        self,
        events: list[PrdEvent],
        *,
        refuse: bool = False,
        lose: bool = False,
        prd: dict[str, Any] | None = None,
        loop: LoopInfo | None = None,
    ) -> None:
        self.recorded = events
        self.prd = prd or PRD
        self.loop = loop or LoopInfo(project_id="p1", prd="auth", state="ready", seq=3)
        self.calls: list[str] = []
        self.after: int | None = None
        self.drained = asyncio.Event()
        self.refuse = refuse
        self.lose = lose

    async def get(self) -> PrdView:
        return PrdView(
            project_id="p1", name="auth", path="/x/.daedalus/prds/auth", prd=self.prd, loop=self.loop
        )

    async def events(self, after_seq: int) -> AsyncIterator[PrdEvent]:
        self.after = after_seq
        for event in self.recorded:
            if event.seq > after_seq:
                yield event
        self.drained.set()
        if self.lose:
            raise ServiceUnavailable("lost the connection to NATS")
        await asyncio.Event().wait()  # live: nothing more comes

    async def _verb(self, verb: str, state: str) -> LoopInfo:
        self.calls.append(verb)
        if self.refuse:
            raise Conflict(f"cannot {verb}: [bold]the loop is not running")
        return LoopInfo(project_id="p1", prd="auth", state=state)  # type: ignore[arg-type]

    async def pause(self) -> LoopInfo:
        return await self._verb("pause", "paused")

    async def resume(self) -> LoopInfo:
        return await self._verb("resume", "running")

    async def stop(self) -> LoopInfo:
        return await self._verb("stop", "stopped")


async def test_the_tui_shows_the_prd_live_and_its_keys_drive_the_source() -> None:
    source = FakeSource(_recorded())
    app = PrdApp(source)
    async with app.run_test(size=(140, 40)) as pilot:
        await asyncio.wait_for(app.loaded.wait(), 30)
        await asyncio.wait_for(source.drained.wait(), 30)
        await pilot.pause()
        assert source.after == 0  # from the PRD's first event: its history, then live
        assert app.model.state == "running" and app.model.story_id == "US-2" and app.model.seq == 9
        stories = str(app.query_one("#stories").render())
        assert "✓ US-1 Login" in stories and "▶ US-2 Logout [bold]now[/bold]" in stories
        assert "running" in str(app.query_one("#header").render())
        stream = "\n".join(strip.text for strip in app.query_one("#stream").lines)  # type: ignore[attr-defined]
        assert "[link=https://evil.example]hi[/link]" in stream and "edit_file(path=a.py)" in stream
        checks = "\n".join(strip.text for strip in app.query_one("#checks").lines)  # type: ignore[attr-defined]
        assert "✗ pytest" in checks and "E boom" in checks

        await pilot.press("p")
        await pilot.press("r")
        await pilot.press("s")
        await pilot.pause()
        assert source.calls == ["pause", "resume", "stop"] == app.sent
        await pilot.press("q")
    assert app.return_value == 0


async def test_a_refused_key_is_shown_not_raised() -> None:
    source = FakeSource([], refuse=True)
    app = PrdApp(source)
    async with app.run_test() as pilot:
        await asyncio.wait_for(source.drained.wait(), 30)
        await pilot.press("p")
        await pilot.pause()
        assert source.calls == ["pause"]
        assert app.failures == ["pause: conflict: cannot pause: [bold]the loop is not running"]
        await pilot.press("q")
    assert app.return_value == 0


async def test_a_lost_stream_is_shown_and_the_app_stays() -> None:
    source = FakeSource(_recorded()[:2], lose=True)
    app = PrdApp(source)
    async with app.run_test() as pilot:
        await asyncio.wait_for(source.drained.wait(), 30)
        await pilot.pause()
        assert app.failures == ["the live events stopped: service_unavailable: lost the connection to NATS"]
        assert app.model.seq == 5 and app.is_running
        await pilot.press("q")
    assert app.return_value == 0


def test_the_model_follows_the_events() -> None:
    view = PrdView(project_id="p1", name="auth", path="/x", prd=PRD)
    model = model_of(view)
    assert model == TuiModel(
        name="auth",
        stories=(StoryRow("US-1", "Login", "passed"), StoryRow("US-2", "Logout [bold]now[/bold]", "pending")),
    )
    for event in _recorded():
        model = apply(model, event)
    assert (model.state, model.story_id, model.attempt, model.seq) == ("running", "US-2", 1, 9)
    assert [s.state for s in model.stories] == ["passed", "in_progress"]
    assert stories_text(model).plain == "✓ US-1 Login\n▶ US-2 Logout [bold]now[/bold]"
    done = apply(model, PrdLoopStateChanged(**BASE, seq=10, from_state="running", to_state="completed"))
    assert (done.state, done.story_id, done.seq) == ("completed", "", 10)
    assert stories_text(TuiModel(name="x")).plain == "no stories"


def test_choosing_the_prd_to_open() -> None:
    assert choose_prd([("a", "ready")], "/r") == "a"
    assert choose_prd([("a", "ready"), ("b", "running")], "/r") == ""  # the picker asks
    with pytest.raises(NotFound, match="no PRDs in /r"):
        choose_prd([], "/r")


FINISHED = {
    "name": "auth",
    "title": "Auth",
    "userStories": [
        {
            "id": "US-1",
            "title": "Login",
            "description": "A form [b]to log in[/b]",
            "acceptanceCriteria": ["shows a form", "rejects a bad password"],
            "passes": True,
            "attempts": 2,
            "notes": "attempt 1: checks failed",
        },
        {
            "id": "US-2",
            "title": "Logout",
            "acceptanceCriteria": ["ends the session"],
            "passes": True,
            "attempts": 1,
        },
    ],
}


def _history() -> list[PrdEvent]:
    """A whole finished run: US-1 fails its checks once then passes, US-2 passes at once."""
    one: dict[str, Any] = {**BASE, "story_id": "US-1"}
    two: dict[str, Any] = {**BASE, "story_id": "US-2", "attempt": 1}
    failed = CheckOutcome(command="pytest", ok=False, exit_code=1, output="E wrong password")
    passed = CheckOutcome(command="pytest", ok=True, exit_code=0)
    return [
        PrdLoopStateChanged(**BASE, seq=1, from_state="ready", to_state="running"),
        PrdStoryStateChanged(**one, attempt=1, seq=2, from_state="pending", to_state="in_progress"),
        PrdIterationStarted(**one, attempt=1, seq=3, provider="jidocode"),
        PrdIterationFinished(**one, attempt=1, seq=4, ok=True, summary="added the form"),
        PrdQualityReport(**one, attempt=1, seq=5, ok=False, checks=[failed]),
        PrdIterationStarted(**one, attempt=2, seq=6, provider="jidocode"),
        PrdQualityReport(**one, attempt=2, seq=7, ok=True, checks=[passed]),
        PrdCommitted(**one, attempt=2, seq=8, commit="04d1ea14b2bf99", message="US-1: Login"),
        PrdStoryStateChanged(**one, attempt=2, seq=9, from_state="in_progress", to_state="passed"),
        PrdIterationStarted(**two, seq=10, provider="jidocode"),
        PrdQualityReport(**two, seq=11, ok=True, checks=[passed]),
        PrdStoryStateChanged(**two, seq=12, from_state="in_progress", to_state="passed"),
        PrdLoopStateChanged(**BASE, seq=13, from_state="running", to_state="completed"),
    ]


def _lines(app: PrdApp, pane: str) -> str:
    return "\n".join(strip.text for strip in app.query_one(pane).lines)  # type: ignore[attr-defined]


async def test_a_finished_prd_shows_its_history_stories_criteria_and_attempts() -> None:
    loop = LoopInfo(project_id="p1", prd="auth", state="completed", seq=13)
    source = FakeSource(_history(), prd=FINISHED, loop=loop)
    app = PrdApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        await asyncio.wait_for(source.drained.wait(), 30)
        await pilot.pause()
        assert source.after == 0
        stream = _lines(app, "#stream")
        assert "━━ story US-1 · attempt 1 · jidocode" in stream and "━━ story US-1 · attempt 2" in stream
        assert "● committed 04d1ea14b2bf" in stream and "loop running → completed" in stream
        assert "passed" in _lines(app, "#checks") and "story US-2 attempt 1" in _lines(app, "#checks")
        # history draws, it does not move the states read from the PRD
        assert (app.model.state, app.model.story_id) == ("completed", "")
        assert "✓ US-1 Login" in str(app.query_one("#stories").render())
        story = str(app.query_one("#story").render())  # the first story: every one passed
        for expected in (
            "✓ US-1 Login  (passed)",
            "A form [b]to log in[/b]",
            "• shows a form",
            "• rejects a bad password",
            "attempts: 2",
            "#1 iteration done: added the form",
            "#1 checks failed: pytest",
            "#2 checks passed (1)",
            "#2 committed 04d1ea14b2bf",
            "attempt 1: checks failed",
        ):
            assert expected in story, f"{expected!r} not in:\n{story}"
        await pilot.press("j")
        await pilot.pause()
        story = str(app.query_one("#story").render())
        assert "US-2 Logout" in story and "• ends the session" in story and "US-1" not in story
        await pilot.press("j", "k")
        await pilot.pause()
        assert "US-1 Login" in str(app.query_one("#story").render())
        await pilot.press("q")
    assert app.return_value == 0


def test_the_story_selection_moves_within_the_list() -> None:
    model = model_of(PrdView(project_id="p1", name="auth", path="/x", prd=PRD))
    assert selected_story(model, "") == "US-2"  # the first not passed
    assert selected_story(model, "US-2", 1) == "US-2" and selected_story(model, "US-2", -5) == "US-1"
    working = TuiModel(name="auth", story_id="US-1", stories=model.stories)
    assert selected_story(working, "") == "US-1"
    assert selected_story(TuiModel(name="x"), "") == ""
    assert stories_text(model, "US-1").plain == stories_text(model).plain  # only the style changes


def _summary(name: str, state: str) -> PrdSummary:
    return PrdSummary(name=name, title=f"[b]{name}[/b]", stories=2, passed=1, state=state)  # type: ignore[arg-type]


async def test_the_picker_offers_every_prd_and_returns_the_chosen_one() -> None:
    prds = [_summary("alpha", "completed"), _summary("beta", "running"), _summary("gamma", "ready")]
    picker = PrdPicker(prds)
    async with picker.run_test() as pilot:
        await pilot.pause()
        options = picker.query_one("#prds")
        assert options.highlighted == 1  # type: ignore[attr-defined]  # the running one
        shown = [str(options.get_option_at_index(i).prompt) for i in range(3)]  # type: ignore[attr-defined]
        assert shown[0] == "alpha  completed  1/2 passed  [b]alpha[/b]"
        await pilot.press("down", "enter")
    assert picker.return_value == "gamma"
    left = PrdPicker(prds)
    async with left.run_test() as pilot:
        await pilot.press("q")
    assert left.return_value == ""
