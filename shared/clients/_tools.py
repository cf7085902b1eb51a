"""The tool runner's client: run and cancel tool calls of one project."""

from __future__ import annotations

from typing import Any

from jidocode.shared.events.tools import CancelTool, RunTool, ToolCallMeta, ToolCancelAccepted, ToolResult

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
        **ext: Ext,
    ) -> ToolResult:
        """Run one call under the project's policy; ``meta.request_id`` makes it idempotent.

        A tool that failed or was refused by the policy is a result with
        ``ok: false`` and its ``error``; a request the runner cannot take at all
        (unknown project, bad envelope, nobody serving) raises the typed error.
        """
        return await self.run_call(RunTool(name=name, args=args or {}, meta=meta), timeout=timeout, **ext)

    async def run_call(self, call: RunTool, *, timeout: float | None = None, **ext: Ext) -> ToolResult:
        return await self._scoped("run", call, timeout=timeout, **ext)

    async def cancel(
        self, request_id: str, *, timeout: float | None = None, **ext: Ext
    ) -> ToolCancelAccepted:
        return await self._scoped("cancel", CancelTool(request_id=request_id), timeout=timeout, **ext)
