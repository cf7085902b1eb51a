"""``/rewind`` in an ACP session: go back before a user message (issue 30 point 2, docs/rewind.md).

``/rewind`` alone lists the user messages a rewind can go back before, numbered oldest first;
``/rewind <n> [files|conversation|both]`` (``both`` when not said) rewinds before message *n*
with the SDK's ``client.rewind``: when files would change, their diff is put to the editor's
user as a ``session/request_permission`` request (the files changed since by somebody else
named, and kept) and nothing at all is done unless it is allowed. What happened is said as the
agent's message. Message text comes from the conversation: untrusted, so it is shown as plain
text (markdown's characters escaped, no link or image the editor would follow).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from acp.schema import (
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandInput,
    ContentToolCallContent,
    PermissionOption,
    TextContentBlock,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

from jidocode.cli.chat_rewind import parse_rewind
from jidocode.client import JidoClient, RewindOutcome, UserMessageRef, rewindable_messages
from jidocode.shared.events.tools import CheckpointDiff

__all__ = [
    "REWIND_COMMAND",
    "allowed",
    "diff_text",
    "is_rewind",
    "message_list",
    "outcome_text",
    "rewind_in_session",
]

#: Says one piece of the agent's answer to the editor.
Say = Callable[[str], Awaitable[None]]
#: Asks the editor's user (``session/request_permission``) about a tool call; True when allowed.
AskPermission = Callable[[ToolCallUpdate, list[PermissionOption]], Awaitable[bool]]

REWIND_COMMAND: Final = AvailableCommand(
    name="rewind",
    description="Go back before one of your messages: its files, the conversation or both (/rewind lists them)",
    input=AvailableCommandInput(UnstructuredCommandInput(hint="<n> [files|conversation|both]")),
)
RESTORE_OPTIONS: Final = (
    PermissionOption(option_id="restore", name="Restore the files", kind="allow_once"),
    PermissionOption(option_id="leave", name="Leave everything", kind="reject_once"),
)
_PREVIEW: Final = 70
_COMMAND: Final = re.compile(r"^\s*/rewind(?:\s+(?P<arguments>.*))?\s*$", re.DOTALL)
_MARKDOWN: Final = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")


def is_rewind(text: str) -> str | None:
    """The arguments of a ``/rewind`` prompt ("" without any), ``None`` for any other prompt."""
    found = _COMMAND.match(text)
    return None if found is None else (found.group("arguments") or "").strip()


def _plain(text: str) -> str:
    """Untrusted text as one line of plain text in a markdown answer."""
    line = " ".join(text.split())
    cut = line if len(line) <= _PREVIEW else line[: _PREVIEW - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", cut)


def message_list(messages: Sequence[UserMessageRef]) -> str:
    """The numbered messages a rewind can go back before, and how to choose one."""
    lines = [f"{number}. {_plain(m.text)}" for number, m in enumerate(messages, 1)]
    return (
        "Rewind to before which message?\n\n"
        + "\n".join(lines)
        + "\n\nSend /rewind <n> [files|conversation|both] (both when not said)."
    )


def diff_text(diff: CheckpointDiff) -> str:
    """What restoring the files changes, one path a line (the user's changes marked as kept)."""
    kept = set(diff.changed_by_user)
    return "\n".join(
        f"{label} {path}" + (" (changed since by you: kept)" if path in kept else "")
        for label, paths in (("restore", diff.modified), ("bring back", diff.added), ("delete", diff.deleted))
        for path in paths
    )


def outcome_text(outcome: RewindOutcome) -> str:
    """What the rewind did."""
    if not outcome.done:
        return "Nothing rewound."
    lines = []
    if outcome.conversation is not None:
        lines.append(
            f"Conversation: back before that message ({outcome.conversation.dropped} context messages "
            "dropped; the journal keeps them)."
        )
    if outcome.files is not None:
        lines.append(f"Files: {len(outcome.files.restored)} restored.")
        if outcome.files.kept:
            lines.append("Kept, changed since by you: " + ", ".join(_plain(p) for p in outcome.files.kept))
    elif outcome.what != "conversation":
        lines.append("Files: nothing to restore (no turn since that message changed files).")
    return "\n".join(lines)


def _restore_call(message: UserMessageRef, diff: CheckpointDiff) -> ToolCallUpdate:
    """The "tool call" a restore's permission request is about: the files' diff as its content."""
    return ToolCallUpdate(
        tool_call_id=f"rewind-{message.id}",
        title="rewind: restore the files from before your message",
        kind="edit",
        status="pending",
        content=[
            ContentToolCallContent(
                type="content", content=TextContentBlock(type="text", text=diff_text(diff))
            )
        ],
        raw_input={"message_id": message.id, "checkpoint": diff.checkpoint.id},
    )


async def rewind_in_session(client: JidoClient, arguments: str, say: Say, ask: AskPermission) -> None:
    """``/rewind [n] [files|conversation|both]``: the list, or the rewind (files asked first)."""
    messages = rewindable_messages(await client.get_timeline())
    if not messages:
        await say("No message to rewind to yet.")
        return
    number, what = parse_rewind(arguments)
    if number is None:
        await say(message_list(messages))
        return
    if not 1 <= number <= len(messages):
        await say(f"No message {number}: choose 1 to {len(messages)} (/rewind lists them).")
        return
    message = messages[number - 1]

    async def confirm(diff: CheckpointDiff) -> bool:
        return await ask(_restore_call(message, diff), list(RESTORE_OPTIONS))

    outcome = await client.rewind(message.id, what or "both", confirm=confirm)
    await say(outcome_text(outcome))


def allowed(outcome: object) -> bool:
    """The answer to a restore's permission request says restore (a cancel or anything else: no)."""
    return isinstance(outcome, AllowedOutcome) and outcome.option_id == "restore"
