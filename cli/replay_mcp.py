"""The MCP tools of a recording, served back during its replay (decision 0315).

A recorded conversation was offered the MCP tools of the servers the user had then (often in
their own global ``.mcp.json``), and its MCP calls were answered by those servers. A replay runs
in a home of its own: it must neither start the user's servers nor depend on them, and an MCP
answer (a time, a web page) would rarely come out the same twice anyway. So the replay's tool
runner gets :class:`RecordedMcp` in place of its :class:`McpHost`: per project copy, it lists the
MCP tools the recording was offered and answers each MCP call with the recorded result of the
same tool and arguments, in recorded order. Everything else of a call (the policy, approvals,
quotas) runs for real, as for the built-in tools.

The pure part: :func:`recorded_tools` and :func:`recorded_results` read them from the entries.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from jidocode.services.tool_runner.mcp.elicit import Asker
from jidocode.services.tool_runner.mcp.host import McpHost, ServerStatus
from jidocode.services.tool_runner.mcp.mapping import split_name
from jidocode.services.tool_runner.mcp.rules import mcp_exposed
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import (
    LlmCompleted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
)
from jidocode.shared.events.tools import ToolResult, ToolResultError, ToolSpec
from jidocode.shared.policy import Policy

__all__ = ["RECORDED_LAYER", "RecordedMcp", "call_key", "recorded_results", "recorded_tools"]

#: The layer and transport :meth:`RecordedMcp.status` names for a recorded server.
RECORDED_LAYER: Final = "recording"


def call_key(name: str, args: Mapping[str, Any]) -> tuple[str, str]:
    """What identifies a call among the recorded ones: its tool and its arguments (as JSON)."""
    return name, json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


def recorded_tools(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every MCP tool the recorded model was offered or called, in the order it was first
    offered (the model is offered them in that order again) (pure)."""
    names: dict[str, None] = {}
    for entry in entries:
        data = entry.get("data") or {}
        if entry.get("type") == LlmCompleted.TYPE:
            names.update(dict.fromkeys(str(n) for n in data.get("offered_tools") or []))
            names.update(
                dict.fromkeys(str(c.get("name")) for c in data.get("tool_calls") or [] if isinstance(c, dict))
            )
        elif entry.get("type") == ToolCallRequested.TYPE:
            names.update(dict.fromkeys([str(data.get("name"))]))
    return [n for n in names if split_name(n) is not None]


def recorded_results(entries: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[ToolResult]]:
    """The recorded result of each MCP call, by :func:`call_key`, in recorded order (pure).

    A completed call is the tool's data; a failed one, its error (the tool runner turned the
    server's answer into exactly these fields)."""
    args_of: dict[str, tuple[str, str]] = {}
    out: dict[tuple[str, str], list[ToolResult]] = {}
    for entry in entries:
        kind, data = entry.get("type"), entry.get("data") or {}
        name = str(data.get("name") or "")
        if split_name(name) is None:
            continue
        if kind == ToolCallRequested.TYPE:
            args = data.get("args")
            args_of[str(entry.get("id"))] = call_key(name, args if isinstance(args, dict) else {})
        elif kind in (ToolCallCompleted.TYPE, ToolCallFailed.TYPE):
            key = args_of.get(str(data.get("request_id")))
            if key is not None:
                out.setdefault(key, []).append(_result(kind == ToolCallCompleted.TYPE, data))
    return out


def _result(ok: bool, data: Mapping[str, Any]) -> ToolResult:
    if ok:
        return ToolResult(
            ok=True,
            data=data.get("data"),
            artifacts=list(data.get("artifacts") or []),
            logs=[str(line) for line in data.get("logs") or []],
        )
    return ToolResult(
        ok=False,
        error=ToolResultError(
            type=str(data.get("error_type") or "tool_error"),
            message=str(data.get("message") or ""),
            details=dict(data.get("details") or {}),
        ),
    )


def _spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"[recorded MCP tool] {name}: answered from the recording being replayed",
        input_schema={"type": "object"},
    )


class _Recorded:
    def __init__(self, tools: Sequence[str], results: dict[tuple[str, str], list[ToolResult]]) -> None:
        self.tools = tuple(tools)
        self.results = {key: deque(found) for key, found in results.items()}


class RecordedMcp(McpHost):
    """An :class:`McpHost` that starts no server: the recorded MCP tools of each project copy."""

    def __init__(self, *, jido_home: Path) -> None:
        super().__init__(jido_home=jido_home, start_timeout_s=1.0)
        self._recorded: dict[str, _Recorded] = {}

    def add(self, root: Path, entries: Sequence[Mapping[str, Any]]) -> None:
        """Serve the MCP tools of the recording ``entries`` to the project at ``root``."""
        self._recorded[os.path.realpath(root)] = _Recorded(recorded_tools(entries), recorded_results(entries))

    def _of(self, policy: Policy) -> _Recorded:
        return self._recorded.get(os.path.realpath(policy.root)) or _Recorded((), {})

    async def specs(
        self, project_id: str, policy: Policy, *, wait_s: float, include_hidden: bool = False
    ) -> list[ToolSpec]:
        return [_spec(n) for n in self._of(policy).tools if include_hidden or mcp_exposed(policy, n)]

    async def status(self, project_id: str, policy: Policy) -> tuple[list[ServerStatus], list[str]]:
        servers: dict[str, list[str]] = {}
        for name in self._of(policy).tools:
            parts = split_name(name)
            if parts is not None:
                servers.setdefault(parts[0], []).append(name)
        return [
            ServerStatus(
                name=server,
                layer=RECORDED_LAYER,
                transport=RECORDED_LAYER,
                state="ready",
                tools=tools,
                error="",
            )
            for server, tools in sorted(servers.items())
        ], []

    async def spec(self, project_id: str, policy: Policy, name: str, timeout_s: float) -> ToolSpec:
        if name not in self._of(policy).tools:
            raise NotFound(
                f"tool {name!r}: the recording being replayed was never offered it",
                details={"tool": name, "reason": "not_recorded"},
            )
        return _spec(name)

    async def call(
        self,
        project_id: str,
        policy: Policy,
        name: str,
        args: dict[str, Any],
        timeout_s: float,
        *,
        max_bytes: int = 0,
        ask: Asker | None = None,
    ) -> ToolResult:
        """The next recorded result of this tool with these arguments (a failed result when none is left;
        a replay asks nothing: ``ask`` is unused)."""
        left = self._of(policy).results.get(call_key(name, args))
        if not left:
            return ToolResult(
                ok=False,
                error=ToolResultError(
                    type="not_recorded",
                    message=f"the recording has no (further) result of {name} with these arguments",
                    details={"tool": name, "args": args},
                ),
            )
        return left.popleft()

    async def stop_project(self, project_id: str) -> None:
        return None

    async def close(self) -> None:
        return None

    def running(self, project_id: str) -> dict[str, str]:
        return {}
