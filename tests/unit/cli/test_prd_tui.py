"""The PRD TUI started with Textual's pilot on recorded events: it shows the stories, the stream
and the checks, its keys reach the source, ``q`` quits; and its pure model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jidocode.cli.prd_render import StoryRow
from jidocode.cli.prd_tui import PrdApp, TuiModel, apply, choose_prd, model_of, stories_text
from jidocode.shared.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable
from jidocode.shared.events.prd import (
    CheckOutcome,
    LoopInfo,
    PrdAssistantText,
    PrdEvent,
    PrdIterationStarted,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdStoryStateChanged,
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

    def __init__(self, events: list[PrdEvent], *, refuse: bool = False, lose: bool = False) -> None:
        self.recorded = events
        self.calls: list[str] = []
        self.after: int | None = None
        self.drained = asyncio.Event()
        self.refuse = refuse
        self.lose = lose

    async def get(self) -> PrdView:
        loop = LoopInfo(project_id="p1", prd="auth", state="ready", seq=3)
        return PrdView(project_id="p1", name="auth", path="/x/.daedalus/prds/auth", prd=PRD, loop=loop)

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
        assert source.after == 3  # followed from the loop's seq as get() read it
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
    assert choose_prd([("a", "ready"), ("b", "running")], "/r") == "b"
    with pytest.raises(NotFound, match="no PRDs in /r"):
        choose_prd([], "/r")
    with pytest.raises(InvalidInput, match="name one: a, b"):
        choose_prd([("a", "ready"), ("b", "completed")], "/r")
