"""``/prd`` in the chat: its words, and following a loop until it ends (or the user stops)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.text import Text

from jidocode.cli.chat_lines import ChatInput, parse_input
from jidocode.cli.chat_prd import follow_until_done, parse_prd
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import PrdEvent, PrdIterationStarted, PrdLoopStateChanged

BASE: dict[str, Any] = {"project_id": "p1", "prd": "auth"}


def test_the_words_of_prd() -> None:
    assert parse_input("/prd run auth") == ChatInput(
        "builtin", text="/prd run auth", name="prd", arguments="run auth"
    )
    assert parse_prd("") == ("list", "") == parse_prd("list")
    assert parse_prd("run auth") == ("run", "auth") and parse_prd("STATUS a-1") == ("status", "a-1")
    assert parse_prd("pause x_y") == ("pause", "x_y")
    for bad in ("run", "run a b", "delete auth", "list auth"):
        with pytest.raises(InvalidInput, match="usage: /prd"):
            parse_prd(bad)
    with pytest.raises(InvalidInput, match="'a/b' is not a PRD name"):
        parse_prd("run a/b")


class Feed:
    """Recorded events, then nothing (``None``: no event within the poll)."""

    def __init__(self, events: list[PrdEvent], stopped: asyncio.Event | None = None) -> None:
        self.events = list(events)
        self.stopped = stopped

    async def next(self) -> PrdEvent | None:
        if self.events:
            return self.events.pop(0)
        if self.stopped is not None:
            self.stopped.set()  # the user pressed Ctrl-C while nothing came
        return None


async def test_following_starts_at_the_runs_start_and_ends_with_the_loop() -> None:
    shown: list[Text] = []
    events: list[PrdEvent] = [
        PrdLoopStateChanged(
            **BASE, seq=3, from_state="running", to_state="completed"
        ),  # the previous run's end
        PrdLoopStateChanged(**BASE, seq=4, from_state="completed", to_state="running"),
        PrdIterationStarted(**BASE, seq=5, story_id="US-1", attempt=1, provider="jidocode"),
        PrdLoopStateChanged(**BASE, seq=6, from_state="running", to_state="error", reason="out of retries"),
    ]
    code = await follow_until_done(Feed(events), shown.append, asyncio.Event())
    assert code == 1
    assert [t.plain for t in shown] == [
        "loop completed → running",
        "━━ story US-1 · attempt 1 · jidocode ━━",
        "loop running → error: out of retries",
    ]


async def test_ctrl_c_stops_following_without_an_end() -> None:
    stopped = asyncio.Event()
    shown: list[Text] = []
    running = PrdLoopStateChanged(**BASE, seq=1, from_state="ready", to_state="running")
    assert await follow_until_done(Feed([running], stopped), shown.append, stopped) is None
    assert [t.plain for t in shown] == ["loop ready → running"]
