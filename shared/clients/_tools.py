"""The tool runner's client: run and cancel tool calls of one project."""

from __future__ import annotations

import time
from typing import Any

from jidocode.shared.events.mcp import ListMcpServers, McpServerList
from jidocode.shared.events.tools import (
    CancelTool,
    CheckpointDiff,
    CheckpointList,
    CheckpointRestored,
    DiffCheckpoint,
    ListCheckpoints,
    ListTools,
    RestoreCheckpoint,
    RunTool,
    ToolCallMeta,
    ToolCancelAccepted,
    ToolCatalog,
    ToolResult,
)

from ._base import Ext, ProjectScoped

__all__ = ["ToolsClient"]


class ToolsClient(ProjectScoped):
    """``jido.tools.<p>.<verb>`` of one project."""

    service = "tool_runner"

    async def run(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        meta: ToolCallMeta,
        timeout: float | None = None,
        wait: float | None = None,
        **ext: Ext,
    ) -> ToolResult:
        """Run one call under the project's policy; ``meta.request_id`` makes it idempotent.

        A tool that failed or was refused by the policy is a result with
        ``ok: false`` and its ``error``; a request the runner cannot take at all
        (unknown project, bad envelope, nobody serving) raises the typed error.
        """
        call = RunTool(name=name, args=args or {}, meta=meta)
        return await self.run_call(call, timeout=timeout, wait=wait, **ext)

    async def run_call(
        self, call: RunTool, *, timeout: float | None = None, wait: float | None = None, **ext: Ext
    ) -> ToolResult:
        """Run ``call`` within ``timeout`` seconds: that becomes its ``meta.deadline`` when sooner.

        ``wait`` (default: ``timeout``) bounds only this request's wait for the answer, not the
        call: a caller that hears nothing within it may send the same call again (same request id)
        while the call keeps its deadline (``RequestTimeout`` after ``wait``).
        """
        budget = timeout or self.timeout
        deadline = time.time() + budget
        if call.meta.deadline is None or call.meta.deadline > deadline:
            call = call.model_copy(update={"meta": call.meta.model_copy(update={"deadline": deadline})})
        return await self._scoped("run", call, timeout=min(budget, wait or budget), **ext)

    async def cancel(
        self,
        request_id: str,
        *,
        conversation_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ToolCancelAccepted:
        """Cancel call ``request_id`` of ``conversation_id`` (its owner; ``None``: a call outside
        any conversation). A cancel naming another conversation does not touch the call."""
        command = CancelTool(request_id=request_id, conversation_id=conversation_id)
        return await self._scoped("cancel", command, timeout=timeout, conversation_id=conversation_id, **ext)

    async def mcp_tools(
        self, *, include_hidden: bool = False, timeout: float | None = None, **ext: Ext
    ) -> ToolCatalog:
        """The tools of the project's MCP servers (``mcp__<server>__<tool>``), starting them as needed;
        without ``include_hidden``, those a deny rule names are left out."""
        return await self._scoped(
            "mcp_tools", ListTools(include_hidden=include_hidden), timeout=timeout, **ext
        )

    async def mcp_servers(self, *, timeout: float | None = None, **ext: Ext) -> McpServerList:
        """The project's MCP servers and their state on the replica that answers (starts none)."""
        return await self._scoped("mcp_servers", ListMcpServers(), timeout=timeout, **ext)

    async def checkpoints_list(
        self, conversation_id: str | None = None, *, timeout: float | None = None, **ext: Ext
    ) -> CheckpointList:
        """The project's checkpoints, oldest first (of ``conversation_id`` alone when given)."""
        command = ListCheckpoints(conversation_id=conversation_id)
        return await self._scoped("checkpoints_list", command, timeout=timeout, **ext)

    async def checkpoints_diff(
        self, checkpoint: str, *, timeout: float | None = None, **ext: Ext
    ) -> CheckpointDiff:
        """What restoring ``checkpoint`` (its id) would change, and which of those files somebody
        else than the agent changed since (``NotFound`` for an unknown id)."""
        return await self._scoped(
            "checkpoints_diff", DiffCheckpoint(checkpoint=checkpoint), timeout=timeout, **ext
        )

    async def checkpoints_restore(
        self,
        checkpoint: str,
        *,
        paths: list[str] | None = None,
        overwrite_user_changes: bool = False,
        timeout: float | None = None,
        **ext: Ext,
    ) -> CheckpointRestored:
        """Put the work tree back as ``checkpoint`` holds it (only ``paths`` when given): the paths
        restored, and those kept because somebody else changed them since (unless
        ``overwrite_user_changes``)."""
        command = RestoreCheckpoint(
            checkpoint=checkpoint, paths=paths, overwrite_user_changes=overwrite_user_changes
        )
        return await self._scoped("checkpoints_restore", command, timeout=timeout, **ext)
