"""The rewind tools: ``checkpoints_list``, ``checkpoints_diff``, ``rewind`` (issue 30, point 2).

Another agent goes back before a user message of a conversation as ``/rewind`` in
``jidocode chat`` does (docs/rewind.md): ``checkpoints_list`` names the checkpoints (and, for a
conversation, the user messages a rewind can go back before), ``checkpoints_diff`` shows what
restoring one changes, ``rewind`` restores the files, the conversation or both. ``rewind``
without ``confirm: true`` changes nothing at all: it answers with the files' diff (the files
somebody else changed since named in ``changed_by_user``), and a second call with ``confirm``
does it; those files are kept unless ``overwrite_user_changes``. Every call goes through the
typed clients (``shared/rewind.py``, the SDK's rewind: ``ConversationsClient.rewind``,
``ToolsClient.checkpoints_*``).

They stand under the project's policy exactly as the PRD tools do (``prd_tools.py``: the same
gate, each tool by its name: ``"rewind"`` in ``permissions.allow``), so an untrusted
project's own rules do not count. Errors are text (decision 0331).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, ToolsClient
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import CheckpointDiff, CheckpointInfo
from jidocode.shared.policy import InvalidRule, tool_exposed
from jidocode.shared.rewind import CHECKPOINT_TIMEOUT_S, RewindOutcome, rewind, rewindable_messages

from .chat import ID_PATTERN, parse_args
from .mapping import error_result
from .prd_tools import Asker, PrdTools

__all__ = [
    "REWIND_TOOLS",
    "REWIND_TOOL_NAMES",
    "CheckpointsDiffArgs",
    "CheckpointsListArgs",
    "RewindArgs",
    "RewindTools",
    "diff_text",
]

#: A checkpoint's id (the start of its commit id in the shadow repository).
CHECKPOINT_PATTERN: Final = r"^[0-9a-f]{4,64}$"
#: Seconds a conversation service request (its timeline) may take.
REQUEST_TIMEOUT_S: Final = 15.0


class CheckpointsListArgs(BaseModel):
    """The arguments of ``checkpoints_list``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conversation_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="only this conversation's checkpoints, and its user messages a rewind can go back "
        "before; the whole project's checkpoints when absent",
    )


class CheckpointsDiffArgs(BaseModel):
    """The arguments of ``checkpoints_diff``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: str = Field(pattern=CHECKPOINT_PATTERN, description="the checkpoint's id (checkpoints_list)")


class RewindArgs(BaseModel):
    """The arguments of ``rewind``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conversation_id: str = Field(pattern=ID_PATTERN, description="the conversation to rewind")
    message_id: str = Field(
        pattern=ID_PATTERN, description="the user message to go back before (checkpoints_list lists them)"
    )
    what: Literal["files", "conversation", "both"] = Field(
        default="both", description="restore the files, the conversation, or both"
    )
    confirm: bool = Field(
        default=False, description="do it; without it nothing changes and the files' diff is returned"
    )
    overwrite_user_changes: bool = Field(
        default=False, description="also restore the files somebody else than the agent changed since"
    )


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


_ARGS: Final[dict[str, type[BaseModel]]] = {
    "checkpoints_list": CheckpointsListArgs,
    "checkpoints_diff": CheckpointsDiffArgs,
    "rewind": RewindArgs,
}
_READ_ONLY: Final = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

REWIND_TOOLS: Final = (
    types.Tool(
        name="checkpoints_list",
        description="The project's checkpoints (its files before a turn's first write), oldest first; "
        "for a conversation also its user messages a rewind can go back before.",
        input_schema=_schema(CheckpointsListArgs),
        output_schema={
            "type": "object",
            "properties": {"checkpoints": {"type": "array"}, "messages": {"type": "array"}},
            "required": ["checkpoints"],
        },
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="checkpoints_diff",
        description="What restoring a checkpoint would change: files to write back (modified), bring "
        "back (added) and delete (deleted); changed_by_user names those somebody else changed since.",
        input_schema=_schema(CheckpointsDiffArgs),
        output_schema={"type": "object", "properties": {"checkpoint": {"type": "object"}}},
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="rewind",
        description="Go back before a user message: its files, the conversation, or both. Without "
        "confirm: true nothing changes and the files' diff is returned; files changed since by "
        "somebody else are kept unless overwrite_user_changes.",
        input_schema=_schema(RewindArgs),
        output_schema={
            "type": "object",
            "properties": {"done": {"type": "boolean"}, "message_id": {"type": "string"}},
            "required": ["done", "message_id"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    ),
)
REWIND_TOOL_NAMES: Final = frozenset(tool.name for tool in REWIND_TOOLS)


def diff_text(diff: CheckpointDiff) -> str:
    """What restoring the files changes, one path a line, the user's changes marked as kept."""
    kept = set(diff.changed_by_user)
    lines = [
        f"{label} {path}" + (" (changed since by somebody else: kept)" if path in kept else "")
        for label, paths in (("restore", diff.modified), ("bring back", diff.added), ("delete", diff.deleted))
        for path in paths
    ]
    return "\n".join(lines) or "no file to restore"


def _checkpoint(info: CheckpointInfo) -> str:
    return f"{info.id} ({info.files} files) before {info.label!r} in {info.conversation_id}"


class RewindTools:
    """The rewind tools of one project's MCP server; ``gate`` is the PRD tools' policy check."""

    def __init__(self, bus: Bus, project_id: str, gate: PrdTools) -> None:
        self.conversations = ConversationsClient(bus, project_id, timeout=REQUEST_TIMEOUT_S)
        self.tools = ToolsClient(bus, project_id, timeout=CHECKPOINT_TIMEOUT_S)
        self.gate = gate

    async def exposed(self) -> list[types.Tool]:
        """The rewind tools the project's policy could allow or ask (``tools/list``)."""
        try:
            policy = await self.gate._policy()
        except (JidoError, InvalidRule):
            return []
        return [tool for tool in REWIND_TOOLS if tool_exposed(policy, tool.name)]

    async def call(
        self, name: str, arguments: dict[str, Any] | None, ask: Asker | None
    ) -> types.CallToolResult:
        """Run rewind tool ``name`` if the policy lets it; any refusal or failure as a text error."""
        args = parse_args(_ARGS[name], name, arguments)
        if isinstance(args, types.CallToolResult):
            return args
        try:
            refused = await self.gate._refusal(name, args.model_dump(), ask)
            if refused is not None:
                return refused
            if isinstance(args, CheckpointsListArgs):
                return await self._list(args)
            if isinstance(args, CheckpointsDiffArgs):
                diff = await self.tools.checkpoints_diff(args.checkpoint, timeout=CHECKPOINT_TIMEOUT_S)
                return _ok(diff.model_dump(mode="json", exclude={"type"}), diff_text(diff))
            assert isinstance(args, RewindArgs)
            return await self._rewind(args)
        except JidoError as exc:
            return error_result(f"{name} failed ({exc.type}): {exc.message}", error=exc.type)
        except InvalidRule as exc:
            return error_result(f"{name} failed (invalid_input): {exc}", error="invalid_input")

    async def _list(self, args: CheckpointsListArgs) -> types.CallToolResult:
        listed = await self.tools.checkpoints_list(args.conversation_id, timeout=CHECKPOINT_TIMEOUT_S)
        data: dict[str, Any] = {"checkpoints": [c.model_dump(mode="json") for c in listed.checkpoints]}
        lines = [_checkpoint(c) for c in listed.checkpoints] or ["no checkpoints"]
        if args.conversation_id is not None:
            timeline = await self.conversations.get_projection(args.conversation_id, "timeline")
            messages = rewindable_messages(timeline.value or [])
            data["messages"] = [m.model_dump(mode="json") for m in messages]
            lines += [f"message {m.id}: {m.text!r}" for m in messages]
        return _ok(data, "\n".join(lines))

    async def _rewind(self, args: RewindArgs) -> types.CallToolResult:
        """With ``confirm``: the rewind. Without: the files' diff only (a ``files`` rewind that
        confirms nothing changes nothing), and what a confirmed call would do."""
        if not args.confirm:
            preview = await rewind(self.conversations, args.conversation_id, args.message_id, "files")
            return _outcome(preview.model_copy(update={"what": args.what, "done": False}))
        outcome = await rewind(
            self.conversations,
            args.conversation_id,
            args.message_id,
            args.what,
            confirm=True,
            overwrite_user_changes=args.overwrite_user_changes,
        )
        return _outcome(outcome)


def _outcome(outcome: RewindOutcome) -> types.CallToolResult:
    """``rewind``'s result: what was (or would be) done, as text and structured content."""
    lines: list[str] = []
    if not outcome.done:
        lines.append(f"nothing changed: call rewind again with confirm: true to rewind {outcome.what}")
    if outcome.what != "conversation":
        lines.append(diff_text(outcome.diff) if outcome.diff is not None else "no file to restore")
    if outcome.conversation is not None:
        lines.append(f"conversation: back before the message ({outcome.conversation.dropped} dropped)")
    if outcome.files is not None:
        lines.append(f"files: {len(outcome.files.restored)} restored, kept: {outcome.files.kept or 'none'}")
    return _ok(outcome.model_dump(mode="json"), "\n".join(lines))


def _ok(data: dict[str, Any], text: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=data, is_error=False
    )
