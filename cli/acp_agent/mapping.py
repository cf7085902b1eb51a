"""What the conversation's events and the project's facts are in ACP terms (pure).

A tool call of the conversation is one ACP tool call whose id is the tool runner's request id
(the id of its ``conversation.tool.requested`` entry, which its approval request and its
result name too): :func:`tool_call_start` when the model asks for it (its kind from the
built-in tool's declaration, the locations it reads or writes, a diff for an edit),
:func:`tool_call_end` when it completed or failed. An ``ask`` becomes a permission request
with the options of :data:`PERMISSION_OPTIONS`, whose answer :func:`decision_of_outcome` maps
to the SDK's decision. Paths the model names are kept only when they stay inside the project's
root: a location is a hint the editor follows, and model text is untrusted.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any, Final, Literal
from urllib.parse import unquote, urlparse

from acp.schema import (
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandInput,
    ContentToolCallContent,
    DeniedOutcome,
    FileEditToolCallContent,
    PermissionOption,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

from jidocode.client import ApprovalRequest, Decision
from jidocode.shared.tools.specs import BUILTIN_BY_NAME

__all__ = [
    "MAX_TOOL_TEXT",
    "PERMISSION_OPTIONS",
    "ToolKind",
    "available_commands",
    "decision_of_outcome",
    "file_uri_path",
    "inside_root",
    "permission_tool_call",
    "tool_call_end",
    "tool_call_running",
    "tool_call_start",
    "tool_kind",
    "tool_title",
]

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]

#: Characters of a tool's result shown in the editor (the model still gets all of it).
MAX_TOOL_TEXT: Final = 4000

#: The answers an ``ask`` offers. "Always" is the CLI's "[a]lways this session"
#: (``approve_session``): the tool runner lets the same command, path or call through for the
#: rest of the conversation; no rule is written to the project's settings.
PERMISSION_OPTIONS: Final = (
    PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow in this session", kind="allow_always"),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
)
_DECISION_OF_OPTION: Final[dict[str, Decision]] = {
    "allow_once": "approve_once",
    "allow_always": "approve_session",
    "reject_once": "deny",
}
_SEARCH_TOOLS: Final = frozenset({"glob", "grep"})
_ACCESS_KIND: Final[dict[str, ToolKind]] = {"read": "read", "write": "edit", "run": "execute"}
_CONTROLS: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def tool_kind(name: str) -> ToolKind:
    """The ACP kind of the tool ``name``: from a built-in's declaration, ``other`` for the rest."""
    if name in _SEARCH_TOOLS:
        return "search"
    if name == "web_fetch":
        return "fetch"
    spec = BUILTIN_BY_NAME.get(name)
    return _ACCESS_KIND.get(spec.access, "other") if spec is not None else "other"


def inside_root(root: str, path: Any) -> str | None:
    """``path`` (relative to ``root``, or absolute) as an absolute path inside ``root``; ``None``
    when it is no string or leaves the root (it is never followed on disk: only named)."""
    if not isinstance(path, str) or not path or "\0" in path:
        return None
    real_root = os.path.normpath(root)
    full = os.path.normpath(os.path.join(real_root, path))
    return full if os.path.commonpath((real_root, full)) == real_root else None


def _path_of(name: str, args: dict[str, Any]) -> Any:
    spec = BUILTIN_BY_NAME.get(name)
    if spec is None or spec.path_arg is None:
        return None
    return args.get(spec.path_arg.name, spec.path_arg.default)


def tool_title(name: str, args: dict[str, Any]) -> str:
    """One line naming the call: the tool and its path, command or pattern (controls removed)."""
    detail = args.get("command") or args.get("pattern") or _path_of(name, args)
    text = f"{name} {detail}" if isinstance(detail, str) and detail else name
    return _CONTROLS.sub(" ", text)[:200]


def _locations(root: str, name: str, args: dict[str, Any]) -> list[ToolCallLocation] | None:
    path = inside_root(root, _path_of(name, args))
    if path is None:
        return None
    offset = args.get("offset")
    line = offset if name == "read_file" and isinstance(offset, int) and offset >= 1 else None
    return [ToolCallLocation(path=path, line=line)]


def _diff(root: str, name: str, args: dict[str, Any]) -> list[FileEditToolCallContent] | None:
    """An edit's diff: ``edit_file``'s old and new text, ``write_file``'s whole new content."""
    path = inside_root(root, args.get("path"))
    if path is None:
        return None
    if (
        name == "edit_file"
        and isinstance(args.get("old_string"), str)
        and isinstance(args.get("new_string"), str)
    ):
        return [
            FileEditToolCallContent(
                type="diff", path=path, old_text=args["old_string"], new_text=args["new_string"]
            )
        ]
    if name == "write_file" and isinstance(args.get("content"), str):
        return [FileEditToolCallContent(type="diff", path=path, old_text=None, new_text=args["content"])]
    return None


def tool_call_start(root: str, request_id: str, name: str, args: dict[str, Any]) -> ToolCallStart:
    """The ``tool_call`` of a call the model asked for (pending until it ends)."""
    return ToolCallStart(
        session_update="tool_call",
        tool_call_id=request_id,
        title=tool_title(name, args),
        kind=tool_kind(name),
        status="pending",
        content=_diff(root, name, args),  # type: ignore[arg-type]
        locations=_locations(root, name, args),
        raw_input=args,
    )


def permission_tool_call(root: str, request: ApprovalRequest) -> ToolCallUpdate:
    """The tool call a permission request is about (the same id as its ``tool_call``)."""
    return ToolCallUpdate(
        tool_call_id=request.request_id,
        title=tool_title(request.tool, request.args),
        kind=tool_kind(request.tool),
        status="pending",
        content=_diff(root, request.tool, request.args),  # type: ignore[arg-type]
        locations=_locations(root, request.tool, request.args),
        raw_input=request.args,
    )


def _result_text(data: Any) -> str:
    """A tool result as text: its main text field when it has one, else its JSON."""
    if isinstance(data, dict):
        for key in ("content", "output", "stdout"):
            if isinstance(data.get(key), str):
                return str(data[key])
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return text


def _text_content(text: str) -> list[ContentToolCallContent]:
    cut = text if len(text) <= MAX_TOOL_TEXT else text[:MAX_TOOL_TEXT] + "\n…"
    return [ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=cut))]


def tool_call_running(request_id: str) -> ToolCallProgress:
    """The ``tool_call_update`` of a call the user allowed: it runs now."""
    return ToolCallProgress(session_update="tool_call_update", tool_call_id=request_id, status="in_progress")


def tool_call_end(
    request_id: str, name: str, *, data: Any = None, error: str | None = None
) -> ToolCallProgress:
    """The ``tool_call_update`` of a call that ended: ``completed`` with its result (an edit keeps
    its diff), ``failed`` with the error's message."""
    if error is not None:
        return ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=request_id,
            status="failed",
            content=_text_content(error),  # type: ignore[arg-type]
        )
    content = None if tool_kind(name) == "edit" else _text_content(_result_text(data))
    return ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=request_id,
        status="completed",
        content=content,  # type: ignore[arg-type]
        raw_output=data,
    )


def decision_of_outcome(outcome: AllowedOutcome | DeniedOutcome) -> Decision:
    """The decision an answer to a permission request is: a cancelled request or an unknown
    option denies."""
    if isinstance(outcome, AllowedOutcome):
        return _DECISION_OF_OPTION.get(outcome.option_id, "deny")
    return "deny"


def available_commands(items: Iterable[dict[str, Any]]) -> list[AvailableCommand]:
    """The project's slash commands (``AssetsClient.list("command")`` items) as ACP commands."""
    commands: list[AvailableCommand] = []
    for item in items:
        name = item.get("name")
        if not isinstance(name, str) or not name:
            continue
        description = item.get("description")
        hint = item.get("argument_hint") or _argument_names(item.get("arguments"))
        commands.append(
            AvailableCommand(
                name=name,
                description=description if isinstance(description, str) and description else f"/{name}",
                input=AvailableCommandInput(UnstructuredCommandInput(hint=hint))
                if isinstance(hint, str) and hint
                else None,
            )
        )
    return commands


def _argument_names(arguments: Any) -> str:
    """A hint from a command's declared arguments (``<name> <other>``), "" without any."""
    if not isinstance(arguments, list):
        return ""
    names = [a.get("name") for a in arguments if isinstance(a, dict)]
    return " ".join(f"<{n}>" for n in names if isinstance(n, str) and n)


def file_uri_path(uri: str) -> str | None:
    """The local path of a ``file://`` URI (``None`` for any other)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return unquote(parsed.path) or None
