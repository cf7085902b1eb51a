"""What a PRD loop's events look like on a terminal: pure functions, event → lines.

``jidocode prd run`` prints these lines and ``jidocode prd tui`` writes them into its
panes, so both show the same thing and one unit test covers both. Nothing here does I/O.

Model and tool text arrive from outside (a provider, a command's output, a PRD someone
wrote): every line is a :class:`rich.text.Text` built from plain strings with styles
attached, never a markup string, so ``[bold]`` or ``[link=…]`` in that text is shown as
written and cannot restyle the terminal or open a link.

Assistant text streams in pieces; :class:`LineRenderer` keeps the unfinished last line
until it ends (a newline, another kind of event, or :meth:`LineRenderer.flush`), so a
piece cut mid-line is never printed as two lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from rich.text import Text

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

__all__ = [
    "EXIT_CODES",
    "MAX_LINE_CHARS",
    "MAX_OUTPUT_LINES",
    "LineRenderer",
    "StoryRow",
    "attempt_note",
    "check_lines",
    "exit_code_for",
    "header_text",
    "preview",
    "safe",
    "story_detail",
    "story_mark",
    "story_rows",
    "story_text",
]

#: The longest line shown (a minified file or a base64 blob would flood a terminal).
MAX_LINE_CHARS: Final = 400
#: Lines of a command's output shown per event (the tail: where errors are).
MAX_OUTPUT_LINES: Final = 20
#: Characters of a tool's input shown in its line.
_ARG_PREVIEW: Final = 60

#: The exit code of ``jidocode prd run`` for a loop that reached each final state.
EXIT_CODES: Final[dict[str, int]] = {"completed": 0, "error": 1, "stopped": 1}

_MARKS: Final = {"passed": ("✓", "green"), "in_progress": ("▶", "yellow"), "pending": ("·", "dim")}
_STATE_STYLES: Final = {
    "ready": "dim",
    "running": "bold green",
    "paused": "bold yellow",
    "stopped": "bold red",
    "error": "bold red",
    "completed": "bold green",
}


#: Control characters (C0 but tab and newline, DEL, C1) shown as U+FFFD: an escape sequence in a
#: model's text must not move the cursor, clear the screen or set the window title.
_CONTROLS: Final = {c: "\ufffd" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)}


def safe(text: str) -> str:
    """``text`` with its control characters replaced (see ``_CONTROLS``)."""
    return text.translate(_CONTROLS)


def _clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(*parts: tuple[str, str] | str) -> Text:
    """A line from plain parts (``(text, style)`` or unstyled text): never parsed as markup."""
    text = Text(no_wrap=False)
    for part in parts:
        if isinstance(part, str):
            text.append(safe(part))
        else:
            text.append(safe(part[0]), style=part[1])
    return text


def preview(args: dict[str, Any]) -> str:
    """A tool's input as ``key=value, …``, each value cut to a short one-line preview."""
    items = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        shown = " ".join(str(shown).split())
        items.append(f"{key}={_clip(shown, _ARG_PREVIEW)}")
    return ", ".join(items)


def _tail(text: str, limit: int = MAX_OUTPUT_LINES) -> list[str]:
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= limit:
        return lines
    return [f"… {len(lines) - limit} earlier lines", *lines[-limit:]]


def check_lines(checks: list[CheckOutcome]) -> list[Text]:
    """One line per quality check, and the tail of a failed one's output under it."""
    out: list[Text] = []
    for check in checks:
        mark, style = ("✓", "green") if check.ok else ("✗", "red")
        why = []
        if check.timed_out:
            why.append("timed out")
        elif check.exit_code is not None:
            why.append(f"exit {check.exit_code}")
        why.append(f"{check.duration_s:.1f}s")
        out.append(_line(("  " + mark + " ", style), _clip(check.command), (f" ({', '.join(why)})", "dim")))
        if not check.ok:
            out.extend(_line(("    │ ", "dim"), _clip(row)) for row in _tail(check.output))
            if check.truncated:
                out.append(_line(("    │ (output truncated)", "dim")))
    return out


def exit_code_for(event: PrdEvent) -> int | None:
    """The exit code a follower ends with after ``event`` (``None``: keep following)."""
    if isinstance(event, PrdLoopStateChanged):
        return EXIT_CODES.get(event.to_state)
    return None


@dataclass
class LineRenderer:
    """Turns loop events into terminal lines; holds only the unfinished assistant line."""

    #: Show each command's output (the TUI does; ``prd run --quiet`` would not).
    command_output: bool = True
    _pending: str = field(default="", repr=False)

    def flush(self) -> list[Text]:
        """The unfinished assistant line, if any (call before anything else is shown, and at the end)."""
        if not self._pending:
            return []
        line, self._pending = self._pending, ""
        return [_line(("  ", ""), _clip(line))]

    def feed(self, event: PrdEvent) -> list[Text]:
        """The complete lines ``event`` adds (assistant text may hold its last part back)."""
        if isinstance(event, PrdAssistantText):
            text = self._pending + event.text
            *done, self._pending = text.split("\n")
            return [_line(("  ", ""), _clip(row)) for row in done]
        return [*self.flush(), *self._lines(event)]

    def _lines(self, event: PrdEvent) -> list[Text]:
        if isinstance(event, PrdLoopStateChanged):
            return [
                _line(
                    ("loop ", "bold"),
                    (event.from_state, _STATE_STYLES.get(event.from_state, "")),
                    " → ",
                    (event.to_state, _STATE_STYLES.get(event.to_state, "")),
                    (f": {_clip(event.reason)}" if event.reason else "", "dim"),
                )
            ]
        if isinstance(event, PrdStoryStateChanged):
            mark, style = _MARKS.get(event.to_state, ("?", ""))
            return [
                _line(
                    (f"{mark} story ", style),
                    (event.story_id, "bold"),
                    f": {event.from_state} → {event.to_state}",
                )
            ]
        if isinstance(event, PrdIterationStarted):
            who = "/".join(p for p in (event.provider, event.model) if p)
            return [
                _line(
                    ("━━ ", "cyan"),
                    (f"story {event.story_id}", "bold cyan"),
                    (f" · attempt {event.attempt}", "cyan"),
                    (f" · {who}" if who else "", "dim"),
                    (" ━━", "cyan"),
                )
            ]
        if isinstance(event, PrdToolStarted):
            return [_line(("  ⏺ ", "cyan"), (event.tool, "cyan"), f"({preview(event.input)})")]
        if isinstance(event, PrdToolFinished):
            mark, style = ("✓", "green") if event.ok else ("✗", "red")
            first = event.output.strip().splitlines()[0] if event.output.strip() else ""
            return [_line((f"    {mark} ", style), event.tool, (f": {_clip(first)}" if first else "", "dim"))]
        if isinstance(event, PrdCommandOutput):
            return self._command(event)
        if isinstance(event, PrdIterationFinished):
            mark, style = ("✓", "green") if event.ok else ("✗", "red")
            tokens = event.usage.get("total_tokens")
            extra = f" · {tokens} tokens" if tokens else ""
            return [
                _line(
                    (f"  {mark} iteration {'done' if event.ok else 'failed'}", style),
                    (f" in {event.duration_s:.1f}s{extra}", "dim"),
                    (f": {_clip(event.summary)}" if event.summary else ""),
                )
            ]
        if isinstance(event, PrdQualityReport):
            head = _line(
                ("  checks ", "bold"),
                ("passed", "bold green") if event.ok else ("failed", "bold red"),
                (f" ({len(event.checks)})", "dim"),
            )
            return [head, *check_lines(event.checks)]
        if isinstance(event, PrdCommitted):
            files = f" · {len(event.files)} file{'s' if len(event.files) != 1 else ''}"
            return [
                _line(
                    ("  ● committed ", "magenta"),
                    (event.commit[:12], "bold magenta"),
                    (f" on {event.branch}" if event.branch else "", "magenta"),
                    f": {_clip(event.message.splitlines()[0] if event.message else '')}",
                    (files, "dim"),
                )
            ]
        if isinstance(event, PrdRetryScheduled):
            return [_line((f"  ↻ retry in {event.delay_s:g}s", "yellow"), f": {_clip(event.reason)}")]
        if isinstance(event, PrdError):
            retry = " (will retry)" if event.retryable else ""
            return [_line((f"  ! error ({event.kind}){retry}: ", "bold red"), _clip(event.message))]
        return [_line((event.type, "dim"))]

    def _command(self, event: PrdCommandOutput) -> list[Text]:
        out: list[Text] = []
        label = "check" if event.source == "check" else "$"
        if event.command:
            out.append(_line((f"  {label} ", "blue"), _clip(event.command)))
        if self.command_output and event.text:
            out.extend(_line(("    │ ", "dim"), _clip(row)) for row in _tail(event.text))
        if event.exit_code is not None:
            style = "green" if event.exit_code == 0 else "red"
            out.append(_line((f"    exit {event.exit_code}", style)))
        return out


# -- stories (from ``PrdView.prd``: prd.json as stored, camelCase keys) -------------------------


@dataclass(frozen=True)
class StoryRow:
    """One story of a PRD, as a UI lists it."""

    id: str
    title: str
    state: str
    priority: int = 1
    attempts: int = 0
    description: str = ""
    criteria: tuple[str, ...] = ()
    #: The loop's notes of the story's attempts (``prd.json`` ``notes``).
    notes: str = ""


def _state_of(story: dict[str, Any]) -> str:
    if story.get("passes"):
        return "passed"
    if story.get("inProgress") or story.get("in_progress"):
        return "in_progress"
    return "pending"


def story_rows(prd: dict[str, Any]) -> list[StoryRow]:
    """The stories of a stored ``prd.json`` in file order (tolerant: a missing key is a default)."""
    stories = prd.get("userStories", prd.get("user_stories", []))
    rows = []
    for story in stories if isinstance(stories, list) else []:
        if not isinstance(story, dict):
            continue
        rows.append(_row(story))
    return rows


def _row(story: dict[str, Any]) -> StoryRow:
    criteria = story.get("acceptanceCriteria", story.get("acceptance_criteria", []))
    return StoryRow(
        id=str(story.get("id", "?")),
        title=str(story.get("title", "")),
        state=_state_of(story),
        priority=int(story.get("priority", 1) or 0),
        attempts=int(story.get("attempts", 0) or 0),
        description=str(story.get("description", "")),
        criteria=tuple(str(c) for c in criteria) if isinstance(criteria, list) else (),
        notes=str(story.get("notes", "")),
    )


def story_mark(state: str) -> tuple[str, str]:
    """The mark and style of a story state (``✓`` passed, ``▶`` in progress, ``·`` pending)."""
    return _MARKS.get(state, ("?", ""))


def story_text(row: StoryRow, *, current: bool = False, selected: bool = False) -> Text:
    """One story line: its mark, id and title (the one being worked in bold, the one
    selected in reverse video)."""
    mark, style = story_mark(row.state)
    line = _line(
        (mark + " ", style),
        (row.id, "bold" if current else ""),
        " ",
        (_clip(row.title, 80), "bold" if current else ""),
    )
    if selected:
        line.stylize("reverse")
    return line


# -- a story's attempts, from its events (the TUI's story view) ----------------------------------


def attempt_note(event: PrdEvent) -> str | None:
    """What ``event`` says of its story's attempt, in a few words (``None``: nothing to note)."""
    if isinstance(event, PrdIterationFinished):
        done = "iteration done" if event.ok else "iteration failed"
        return f"{done}: {event.summary}" if event.summary else done
    if isinstance(event, PrdQualityReport):
        failed = [c.command for c in event.checks if not c.ok]
        if event.ok:
            return f"checks passed ({len(event.checks)})"
        return f"checks failed: {', '.join(failed)}" if failed else "checks failed"
    if isinstance(event, PrdCommitted):
        return f"committed {event.commit[:12]}"
    if isinstance(event, PrdError):
        return f"error ({event.kind}): {event.message}"
    if isinstance(event, PrdStoryStateChanged) and event.to_state == "passed":
        return "passed"
    return None


def story_detail(row: StoryRow, attempts: list[tuple[int, str]]) -> Text:
    """A story's view: its title and state, description, acceptance criteria, attempts with
    what each did (``attempts``: ``(attempt, note)`` in order, from the events) and notes."""
    mark, style = story_mark(row.state)
    lines = [_line((f"{mark} ", style), (row.id, "bold"), " ", _clip(row.title), (f"  ({row.state})", "dim"))]
    if row.description:
        lines += [_line(_clip(part)) for part in row.description.strip().splitlines()[:MAX_OUTPUT_LINES]]
    lines.append(_line(("acceptance criteria:", "bold")))
    lines += [_line(("  • ", "cyan"), _clip(c)) for c in row.criteria] or [_line(("  none", "dim"))]
    lines.append(_line((f"attempts: {row.attempts}", "bold")))
    lines += [_line((f"  #{n} ", "cyan"), _clip(note)) for n, note in attempts[-MAX_OUTPUT_LINES:]]
    if row.notes:
        lines.append(_line(("notes:", "bold")))
        lines += [_line(("  ", ""), _clip(part)) for part in _tail(row.notes)]
    return Text("\n").join(lines)


def header_text(name: str, state: str, story_id: str, attempt: int) -> Text:
    """The TUI's header line: the PRD, its loop state, the story and attempt being worked."""
    parts: list[tuple[str, str] | str] = [
        ("PRD ", "dim"),
        (name, "bold"),
        "  ",
        (state, _STATE_STYLES.get(state, "")),
    ]
    if story_id:
        parts += ["  story ", (story_id, "bold"), (f"  attempt {attempt}", "")]
    return _line(*parts)
