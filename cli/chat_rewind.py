"""``/rewind [n] [files|conversation|both]`` in ``jidocode chat``: go back before a user message.

Lists the user messages a rewind can go back before (numbered, oldest first), asks which one
and what to restore (the files, the conversation or both), then — for files — shows what
restoring them changes, names the files changed since by somebody else than the assistant
(they are kept) and asks before anything is written (``client.rewind``, docs/rewind.md). A
number and a choice typed after ``/rewind`` skip those questions; the files are always asked
for. Message text comes from the conversation: untrusted, escaped wherever it is shown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

from rich.console import Console
from rich.markup import escape

from jidocode.client import JidoClient, RewindOutcome, RewindWhat, UserMessageRef, rewindable_messages

if TYPE_CHECKING:
    from jidocode.shared.events.tools import CheckpointDiff

__all__ = ["diff_lines", "message_lines", "outcome_lines", "parse_rewind", "rewind_asking"]

#: Reads one answer from the user (``None``: end of input).
Ask = Callable[[str], Awaitable[str | None]]

_WHATS: Final[dict[str, RewindWhat]] = {
    "b": "both",
    "both": "both",
    "f": "files",
    "files": "files",
    "c": "conversation",
    "conversation": "conversation",
}
_PREVIEW: Final = 70

out = Console(highlight=False)


def parse_rewind(arguments: str) -> tuple[int | None, RewindWhat | None]:
    """``/rewind``'s words: the message's number and what to restore (each ``None`` when absent
    or not understood: asked then)."""
    number: int | None = None
    what: RewindWhat | None = None
    for word in arguments.split():
        if word.isdigit():
            number = int(word)
        elif word.lower() in _WHATS:
            what = _WHATS[word.lower()]
    return number, what


def message_lines(messages: Sequence[UserMessageRef]) -> list[str]:
    """The numbered list of the messages a rewind can go back before (markup, text escaped)."""
    lines = []
    for number, message in enumerate(messages, 1):
        text = " ".join(message.text.split())
        cut = text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"
        lines.append(f"  [bold]{number:>3}[/]  {escape(cut)}")
    return lines


def diff_lines(diff: CheckpointDiff) -> list[str]:
    """What restoring the files changes, one path a line (markup, paths escaped)."""
    kept = set(diff.changed_by_user)
    lines = []
    for label, paths in (("restore", diff.modified), ("bring back", diff.added), ("delete", diff.deleted)):
        for path in paths:
            note = " [yellow](changed since by you: kept)[/]" if path in kept else ""
            lines.append(f"  {label:<10} {escape(path)}{note}")
    return lines


def outcome_lines(outcome: RewindOutcome) -> list[str]:
    """What the rewind did (markup)."""
    if not outcome.done:
        return ["[dim]nothing rewound[/]"]
    lines = []
    if outcome.conversation is not None:
        lines.append(
            f"[dim]conversation: back before that message ({outcome.conversation.dropped} context "
            "messages dropped; the journal keeps them)[/]"
        )
    if outcome.files is not None:
        lines.append(f"[dim]files: {len(outcome.files.restored)} restored[/]")
        if outcome.files.kept:
            kept = ", ".join(escape(p) for p in outcome.files.kept)
            lines.append(f"[yellow]kept, changed since by you[/]: {kept}")
    elif outcome.what != "conversation":
        lines.append("[dim]files: nothing to restore (no turn since that message changed files)[/]")
    return lines


async def rewind_asking(client: JidoClient, arguments: str, ask: Ask) -> None:
    """``/rewind``: ask (with ``ask``, the chat's line reader) which message and what, show the
    files' diff and ask, then rewind."""
    messages = rewindable_messages(await client.get_timeline())
    if not messages:
        out.print("[dim]no message to rewind to yet[/]")
        return
    number, what = parse_rewind(arguments)
    if number is None:
        out.print("rewind to before which message?")
        for line in message_lines(messages):
            out.print(line)
        number = _number(await ask(f"message (1-{len(messages)}, empty to leave): "))
    if number is None or not 1 <= number <= len(messages):
        out.print("[dim]nothing rewound[/]")
        return
    if what is None:
        what = _WHATS.get(
            (await ask("restore [b]oth, [f]iles or [c]onversation? (b): ") or "b").strip().lower()
        )
    if what is None:
        out.print("[dim]nothing rewound[/]")
        return

    async def confirm(diff: CheckpointDiff) -> bool:
        out.print("restoring the files changes:")
        for line in diff_lines(diff):
            out.print(line)
        answer = await ask("restore these files? [y/N]: ")
        return (answer or "").strip().lower() in ("y", "yes")

    outcome = await client.rewind(messages[number - 1].id, what, confirm=confirm)
    for line in outcome_lines(outcome):
        out.print(line)


def _number(answer: str | None) -> int | None:
    text = (answer or "").strip()
    return int(text) if text.isdigit() else None
