"""The Codex CLI as a provider: ``codex exec --json`` (its JSON-lines "thread" events).

Command line: ``codex [args] exec --json --skip-git-repo-check --sandbox <policy> [-m model] -``
with the prompt on stdin (``-``). ``--skip-git-repo-check``: a PRD worktree is a git repository,
but the loop decides that, not the CLI. Codex's own sandbox runs inside ours.

Native events (``codex exec --json``): ``thread.started`` (``thread_id``), ``turn.started``,
``item.started`` / ``item.updated`` / ``item.completed`` with an ``item`` (``id``, ``type``:
``agent_message`` / ``reasoning`` (``text``), ``command_execution`` (``command``,
``aggregated_output``, ``exit_code``, ``status``), ``file_change`` (``changes``: ``path``,
``kind``), ``mcp_tool_call`` (``server``, ``tool``, ``arguments``, ``result``, ``error``),
``web_search`` (``query``), ``todo_list``, ``error``), ``turn.completed`` (``usage``),
``turn.failed`` (``error.message``), ``error`` (``message``). Assumed where the documentation is
silent: ``mcp_tool_call.result.content`` holds MCP content blocks (``{"type": "text", "text"}``).
"""

from __future__ import annotations

from typing import Any, Final

from jidocode.services.prd.config import ProviderSettings

from .base import IterationRequest, ProviderCapabilities, ProviderContext, ProviderEvent, full_prompt
from .cli_stream import CliFlavor, CliProvider
from .login import CODEX
from .sequence import classify, clip_input, usage_metadata

__all__ = ["FLAVOR", "build", "create", "normalize"]

_SANDBOXES: Final = frozenset({"read-only", "workspace-write", "danger-full-access"})


def build(request: IterationRequest, settings: ProviderSettings, model: str) -> tuple[list[str], str | None]:
    """``exec --json …  -`` and the prompt for stdin."""
    policy = request.sandbox_policy if request.sandbox_policy in _SANDBOXES else "workspace-write"
    args = ["exec", "--json", "--skip-git-repo-check", "--sandbox", policy]
    if model:
        args += ["-m", model]
    return [*args, "-"], full_prompt(request)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _mcp_result(item: dict[str, Any]) -> str:
    error = item.get("error")
    if isinstance(error, dict) and error.get("message"):
        return _text(error.get("message"))
    result = item.get("result")
    if isinstance(result, dict):
        blocks = result.get("content")
        if isinstance(blocks, list):
            return "\n".join(_text(b.get("text")) for b in blocks if isinstance(b, dict))
    return ""


def _opening(phase: str, start: ProviderEvent) -> list[ProviderEvent]:
    """What an unfinished item shows: its start on ``item.started``, nothing on ``item.updated``."""
    return [start] if phase == "item.started" else []


def _command(phase: str, item: dict[str, Any], meta: dict[str, str]) -> list[ProviderEvent]:
    """A ``command_execution`` item: the shell call's start, then its output and its finish."""
    call_id = _text(item.get("id"))
    command = _text(item.get("command"))
    start = ProviderEvent(
        kind="tool_started",
        tool="shell",
        call_id=call_id,
        command=command,
        input={"command": command},
        metadata=meta,
    )
    if phase != "item.completed":
        return _opening(phase, start)
    status = _text(item.get("status"))
    code = item.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    output = _text(item.get("aggregated_output"))
    return [
        start,
        ProviderEvent(
            kind="command_output",
            call_id=call_id,
            tool="shell",
            command=command,
            text=output,
            exit_code=exit_code,
        ),
        ProviderEvent(
            kind="tool_finished",
            tool="shell",
            call_id=call_id,
            ok=status == "completed" and exit_code == 0,
            text=output,
            exit_code=exit_code,
            metadata={**meta, "status": status},
        ),
    ]


def _file_change(phase: str, item: dict[str, Any], meta: dict[str, str]) -> list[ProviderEvent]:
    """A ``file_change`` item: the edit's start, then its finish summing up the changes."""
    call_id = _text(item.get("id"))
    changes = item.get("changes")
    listed = [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []
    start = ProviderEvent(
        kind="tool_started",
        tool="file_change",
        call_id=call_id,
        input=clip_input({"changes": listed}),
        metadata=meta,
    )
    if phase != "item.completed":
        return _opening(phase, start)
    status = _text(item.get("status"))
    summary = ", ".join(f"{_text(c.get('kind'))} {_text(c.get('path'))}" for c in listed)
    return [
        start,
        ProviderEvent(
            kind="tool_finished",
            tool="file_change",
            call_id=call_id,
            ok=status == "completed",
            text=summary,
            metadata={**meta, "status": status},
        ),
    ]


def _tool_call(phase: str, item: dict[str, Any], meta: dict[str, str]) -> list[ProviderEvent]:
    """An ``mcp_tool_call`` or ``web_search`` item: the call's start, then its finish with the result."""
    call_id = _text(item.get("id"))
    if item.get("type") == "mcp_tool_call":
        tool = f"mcp:{_text(item.get('server'))}.{_text(item.get('tool'))}"
        args = item.get("arguments")
    else:
        tool, args = "web_search", {"query": item.get("query")}
    start = ProviderEvent(
        kind="tool_started", tool=tool, call_id=call_id, input=clip_input(args), metadata=meta
    )
    if phase != "item.completed":
        return _opening(phase, start)
    status = _text(item.get("status"))
    return [
        start,
        ProviderEvent(
            kind="tool_finished",
            tool=tool,
            call_id=call_id,
            ok=status in ("completed", "") and not item.get("error"),
            text=_mcp_result(item),
            metadata={**meta, "status": status},
        ),
    ]


def _item(phase: str, item: dict[str, Any]) -> list[ProviderEvent]:
    """One ``item.*`` event to normalized events, by the item's type."""
    kind = item.get("type")
    meta = {"native": _text(kind)}
    match kind:
        case "agent_message":
            done = phase == "item.completed"
            return [ProviderEvent(kind="assistant_text", text=_text(item.get("text")))] if done else []
        case "command_execution":
            return _command(phase, item, meta)
        case "file_change":
            return _file_change(phase, item, meta)
        case "mcp_tool_call" | "web_search":
            return _tool_call(phase, item, meta)
    # reasoning, todo_list, error items (warnings the turn goes on after), anything newer
    return []


def normalize(native: dict[str, Any]) -> list[ProviderEvent]:
    """One ``codex exec --json`` event to normalized events (pure)."""
    match native.get("type"):
        case "thread.started":
            return [
                ProviderEvent(
                    kind="iteration_started", metadata={"thread_id": _text(native.get("thread_id"))}
                )
            ]
        case "item.started" | "item.updated" | "item.completed" as phase:
            item = native.get("item")
            return _item(phase, item) if isinstance(item, dict) else []
        case "turn.completed":
            return [ProviderEvent(kind="iteration_finished", metadata=usage_metadata(native.get("usage")))]
        case "turn.failed" | "error" as kind:
            error = native.get("error")
            message = _text(error.get("message")) if isinstance(error, dict) else _text(native.get("message"))
            message = message or f"codex reported {kind}"
            return [
                ProviderEvent(
                    kind="error", text=message, metadata={"failure": classify(message), "native": kind}
                )
            ]
    return []


FLAVOR: Final = CliFlavor(
    key="codex",
    default_command="codex",
    login=CODEX,
    build=build,
    normalize=normalize,
    capabilities=ProviderCapabilities(
        streaming=True,
        tool_calls=True,
        sandbox_control=True,
        approval_modes=["never"],
        max_context_hint=272_000,
    ),
)


def create(settings: ProviderSettings, context: ProviderContext) -> CliProvider:
    """The registry's factory."""
    return CliProvider(FLAVOR, settings, context)
