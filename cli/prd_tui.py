"""``jidocode prd tui``: a Textual app that shows one PRD's loop live and drives it.

Left, the PRD's stories with their state marks and, under them, the selected story
(``j``/``k``): its description, acceptance criteria, attempts with what each did, and the
loop's notes; right, the iteration stream (assistant text, tools, command output) and,
under it, the checks' last results; a header with the loop's state, story and attempt.
Keys: ``p`` pause, ``r`` resume, ``s`` stop, ``q`` quit (the loop runs on without the TUI).

The stream starts with the PRD's history: its last :data:`HISTORY_EVENTS` stored events
(a finished PRD shows what its loop did), then follows live. History only draws: the
header and the story marks come from the PRD as read, so an old event never puts a story
back in an earlier state. Without a name and with several PRDs, :class:`PrdPicker` asks
which to open first.

The app reads a :class:`PrdSource`: :class:`BusSource` is the real one (PrdClient.get
and the :class:`~.prd_follow.PrdFollower`); tests give it recorded events. What is
shown is computed by pure functions (:func:`apply` folds an event into a
:class:`TuiModel`; :mod:`.prd_render` turns events into lines), so the widgets only
display. Every line is a ``rich.text.Text`` built from plain strings: model and tool
text is never parsed as markup.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from jidocode.shared.bus import Bus
from jidocode.shared.clients import PrdClient
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.prd import (
    LoopInfo,
    PrdEvent,
    PrdIterationStarted,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdStoryStateChanged,
    PrdSummary,
    PrdView,
)

from .common import cli_bus, resolve_project
from .prd_follow import PrdFollower
from .prd_render import (
    LineRenderer,
    StoryRow,
    attempt_note,
    check_lines,
    header_text,
    safe,
    story_detail,
    story_rows,
    story_text,
)

__all__ = [
    "HISTORY_EVENTS",
    "MAX_LOG_LINES",
    "MAX_NOTES",
    "BusSource",
    "PrdApp",
    "PrdPicker",
    "PrdSource",
    "TuiModel",
    "apply",
    "choose_prd",
    "model_of",
    "run_tui",
    "selected_story",
    "stories_text",
    "story_view",
]

#: Lines the stream pane keeps (older ones scroll away: the TUI's memory stays bounded).
MAX_LOG_LINES: Final = 5000
#: Stored events shown as history when the TUI opens (the PRD's newest).
HISTORY_EVENTS: Final = 2000
#: Attempt notes the model keeps (the newest; the story view shows each story's last ones).
MAX_NOTES: Final = 2000


class PrdSource(Protocol):
    """Where the TUI's data comes from and where its keys go."""

    name: str

    async def get(self) -> PrdView: ...

    def events(self, after_seq: int) -> AsyncIterator[PrdEvent]: ...

    async def pause(self) -> LoopInfo: ...

    async def resume(self) -> LoopInfo: ...

    async def stop(self) -> LoopInfo: ...


@dataclass(frozen=True)
class TuiModel:
    """What the header and the story list show."""

    name: str
    state: str = "ready"
    story_id: str = ""
    attempt: int = 0
    stories: tuple[StoryRow, ...] = ()
    seq: int = 0
    #: What each attempt did, from the events: ``(story_id, attempt, note)``, oldest first.
    notes: tuple[tuple[str, int, str], ...] = ()


def model_of(view: PrdView) -> TuiModel:
    """The model of a freshly read PRD."""
    loop = view.loop
    return TuiModel(
        name=view.name,
        state=loop.state if loop else "ready",
        story_id=loop.story_id if loop else "",
        attempt=loop.attempt if loop else 0,
        stories=tuple(story_rows(view.prd)),
        seq=loop.seq if loop else 0,
    )


def apply(model: TuiModel, event: PrdEvent, *, past: bool = False) -> TuiModel:
    """``model`` after ``event`` (pure). A ``past`` event (one the PRD as read already
    includes) only adds its attempt note: the loop's and the stories' states stay as read."""
    model = dataclasses.replace(model, seq=max(model.seq, event.seq))
    note = attempt_note(event)
    if note is not None and event.story_id:
        notes = (*model.notes, (event.story_id, event.attempt, note))[-MAX_NOTES:]
        model = dataclasses.replace(model, notes=notes)
    if past:
        return model
    if isinstance(event, PrdLoopStateChanged):
        done = event.to_state in ("completed", "stopped", "error")
        return dataclasses.replace(
            model,
            state=event.to_state,
            story_id="" if done else model.story_id,
            attempt=0 if done else model.attempt,
        )
    if isinstance(event, PrdIterationStarted):
        return dataclasses.replace(model, story_id=event.story_id, attempt=event.attempt)
    if isinstance(event, PrdStoryStateChanged):
        stories = tuple(
            dataclasses.replace(s, state=event.to_state) if s.id == event.story_id else s
            for s in model.stories
        )
        return dataclasses.replace(model, stories=stories)
    return model


def stories_text(model: TuiModel, selected: str = "") -> Text:
    """The story list: one line per story, the one being worked in bold, ``selected`` in reverse."""
    if not model.stories:
        return Text("no stories", style="dim")
    return Text("\n").join(
        story_text(s, current=s.id == model.story_id, selected=s.id == selected) for s in model.stories
    )


def selected_story(model: TuiModel, selected: str, step: int = 0) -> str:
    """The story selected after moving ``step`` rows from ``selected`` (clamped); with nothing
    selected yet, the one being worked, else the first not passed, else the first."""
    ids = [s.id for s in model.stories]
    if not ids:
        return ""
    if selected not in ids:
        waiting = [s.id for s in model.stories if s.state != "passed"]
        return model.story_id if model.story_id in ids else (waiting or ids)[0]
    return ids[max(0, min(len(ids) - 1, ids.index(selected) + step))]


def story_view(model: TuiModel, selected: str) -> Text:
    """The selected story's view (:func:`~.prd_render.story_detail`) with its attempts' notes."""
    row = next((s for s in model.stories if s.id == selected), None)
    if row is None:
        return Text("no story selected", style="dim")
    return story_detail(row, [(attempt, note) for sid, attempt, note in model.notes if sid == selected])


class PrdApp(App[int]):
    """One PRD, live. Exits with 0 (``q``)."""

    TITLE = "jidocode prd"
    CSS = """
    #header { height: 1; background: $boost; padding: 0 1; }
    #left { width: 48; }
    #stories { height: 1fr; border: round $primary; padding: 0 1; overflow-y: auto; }
    #story { height: 2fr; border: round $secondary; padding: 0 1; overflow-y: auto; }
    #stream { border: round $primary; }
    #checks { height: 12; border: round $secondary; }
    """
    BINDINGS: Final = [  # type: ignore[misc]
        Binding("p", "pause", "pause"),
        Binding("r", "resume", "resume"),
        Binding("s", "stop", "stop"),
        Binding("j", "select(1)", "next story"),
        Binding("k", "select(-1)", "previous story"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, source: PrdSource) -> None:
        super().__init__()
        self.source = source
        self.model = TuiModel(name=source.name)
        self.renderer = LineRenderer()
        #: Every action sent to the source, in order (what the keys did; tests read it).
        self.sent: list[str] = []
        self.failures: list[str] = []
        #: Set once the PRD was read (or could not be): the panes show it.
        self.loaded = asyncio.Event()
        #: The ``seq`` the PRD was read at: events up to it are history.
        self.read_seq = 0
        #: The story the story view shows.
        self.selected = ""

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Horizontal():
            with Vertical(id="left"):
                yield Static(id="stories")
                yield Static(id="story")
            with Vertical():
                yield RichLog(id="stream", max_lines=MAX_LOG_LINES, wrap=True, markup=False, highlight=False)
                yield RichLog(id="checks", max_lines=500, wrap=True, markup=False, highlight=False)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#stream", RichLog).border_title = "iteration"
        self.query_one("#checks", RichLog).border_title = "checks"
        self.query_one("#stories", Static).border_title = "stories"
        self.query_one("#story", Static).border_title = "story"
        try:
            view = await self.source.get()
        except JidoError as exc:
            self._fail(f"{exc.type}: {exc.message}")
            self._redraw()
            self.loaded.set()
            return
        self.model = model_of(view)
        self.read_seq = self.model.seq
        self.selected = selected_story(self.model, "")
        self._redraw()
        self.loaded.set()
        history = max(0, self.read_seq - HISTORY_EVENTS)
        self.run_worker(self._follow(history), exclusive=True, group="follow")

    async def _follow(self, after: int) -> None:
        try:
            async for event in self.source.events(after):
                self.show(event)
        except JidoError as exc:  # no stream, or NATS gone: said on screen, the app stays
            self._fail(f"the live events stopped: {exc.type}: {exc.message}")

    def show(self, event: PrdEvent) -> None:
        """Fold ``event`` into the model and the panes (one up to :attr:`read_seq` as history)."""
        self.model = apply(self.model, event, past=event.seq <= self.read_seq)
        stream = self.query_one("#stream", RichLog)
        for line in self.renderer.feed(event):
            stream.write(line)
        if isinstance(event, PrdQualityReport):
            checks = self.query_one("#checks", RichLog)
            checks.clear()
            checks.write(
                Text.assemble(
                    (safe(f"story {event.story_id} attempt {event.attempt}: "), "bold"),
                    ("passed", "green") if event.ok else ("failed", "red"),
                )
            )
            for line in check_lines(event.checks):
                checks.write(line)
        self._redraw()

    def _redraw(self) -> None:
        m = self.model
        self.query_one("#header", Static).update(header_text(m.name, m.state, m.story_id, m.attempt))
        self.query_one("#stories", Static).update(stories_text(m, self.selected))
        self.query_one("#story", Static).update(story_view(m, self.selected))

    def _fail(self, message: str) -> None:
        self.failures.append(message)
        self.notify(safe(message), severity="error", markup=False)

    async def _send(self, verb: str) -> None:
        self.sent.append(verb)
        try:
            if verb == "pause":
                loop = await self.source.pause()
            elif verb == "resume":
                loop = await self.source.resume()
            else:
                loop = await self.source.stop()
        except JidoError as exc:
            self._fail(f"{verb}: {exc.type}: {exc.message}")
            return
        self.notify(safe(f"{verb}: the loop is {loop.state}"), markup=False)

    async def action_pause(self) -> None:
        await self._send("pause")

    async def action_resume(self) -> None:
        await self._send("resume")

    async def action_stop(self) -> None:
        await self._send("stop")

    def action_select(self, step: int) -> None:
        """Show the next (``1``) or previous (``-1``) story in the story view."""
        self.selected = selected_story(self.model, self.selected, step)
        self._redraw()

    async def action_quit(self) -> None:
        self.exit(0)


def _picker_option(prd: PrdSummary) -> Option:
    line = Text.assemble(
        (safe(prd.name), "bold"),
        (f"  {prd.state}", "dim"),
        f"  {prd.passed}/{prd.stories} passed",
        (safe(f"  {prd.title}") if prd.title else "", ""),
        (safe(f"  ({prd.problem})") if prd.problem else "", "red"),
    )
    return Option(line, id=prd.name)


class PrdPicker(App[str]):
    """The project's PRDs to choose from: exits with the chosen name (``enter``), or ``""``
    (``q``, ``escape``). The only running or paused one is highlighted first."""

    TITLE = "jidocode prd: choose a PRD"
    BINDINGS: Final = [  # type: ignore[misc]
        Binding("q", "quit", "quit"),
        Binding("escape", "quit", "quit", show=False),
    ]

    def __init__(self, prds: list[PrdSummary]) -> None:
        super().__init__()
        self.prds = prds

    def compose(self) -> ComposeResult:
        yield OptionList(*(_picker_option(p) for p in self.prds), id="prds")
        yield Footer()

    def on_mount(self) -> None:
        options = self.query_one("#prds", OptionList)
        options.border_title = "PRDs (enter opens one)"
        active = [i for i, p in enumerate(self.prds) if p.state in ("running", "paused")]
        options.highlighted = active[0] if len(active) == 1 else 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.exit(event.option.id or "")

    async def action_quit(self) -> None:
        self.exit("")


@dataclass
class BusSource:
    """The real source: the prd service through :class:`PrdClient`, events through the follower."""

    bus: Bus
    project_id: str
    name: str
    client: PrdClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = PrdClient(self.bus, self.project_id, timeout=30)

    async def get(self) -> PrdView:
        return await self.client.get(self.name)

    async def events(self, after_seq: int) -> AsyncIterator[PrdEvent]:
        async with PrdFollower(self.bus, self.project_id, self.name, after_seq=after_seq) as follower:
            async for event in follower:
                yield event

    async def pause(self) -> LoopInfo:
        return await self.client.pause(self.name)

    async def resume(self) -> LoopInfo:
        return await self.client.resume(self.name)

    async def stop(self) -> LoopInfo:
        return await self.client.stop(self.name, reason="jidocode prd tui")


def choose_prd(names_states: list[tuple[str, str]], root: str) -> str:
    """The PRD the TUI opens when none is named: the only one; ``""`` when there are several
    (:class:`PrdPicker` asks); :class:`NotFound` when there is none."""
    if not names_states:
        raise NotFound(f"no PRDs in {root}: create one with `jidocode prd new`", details={"root": root})
    return names_states[0][0] if len(names_states) == 1 else ""


async def run_tui(project_dir: str, name: str = "") -> int:
    """Open the TUI on ``name`` (or the PRD :func:`choose_prd` or the picker picks) until ``q``."""
    async with cli_bus("prd-tui") as bus:
        info = await resolve_project(bus, project_dir)
        if not name:
            listed = await PrdClient(bus, info.project_id, timeout=30).list()
            name = choose_prd([(p.name, p.state) for p in listed.prds], info.root_path)
            name = name or await PrdPicker(listed.prds).run_async() or ""
            if not name:
                return 0  # left the picker
        source = BusSource(bus, info.project_id, name)
        await source.get()  # an unknown PRD is an error before the screen opens
        result = await PrdApp(source).run_async()
        return result or 0
