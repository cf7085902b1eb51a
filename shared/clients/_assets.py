"""The asset loader's client: skills, commands, workflows, the skill graph, asset tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jidocode.shared.envelope import new_id
from jidocode.shared.events.assets import (
    AssetDocument,
    AssetItems,
    AssetReport,
    AssetType,
    GetAsset,
    GetDiagnostics,
    GraphQuery,
    GraphResult,
    ListAssets,
    ReloadAssets,
    SearchAssets,
)
from jidocode.shared.events.tools import ListTools, RunTool, ToolCallMeta, ToolCatalog, ToolResult

from ._base import Ext, ProjectScoped

__all__ = ["AssetsClient"]


class AssetsClient(ProjectScoped):
    """``jido.assets.<p>.<verb>`` of one project."""

    service = "asset_loader"

    async def get(
        self, kind: AssetType, name: str, *, timeout: float | None = None, **ext: Ext
    ) -> AssetDocument:
        return await self._scoped("get", GetAsset(kind=kind, name=name), timeout=timeout, **ext)

    async def list(
        self, kind: AssetType | None = None, *, timeout: float | None = None, **ext: Ext
    ) -> AssetItems:
        return await self._scoped("list", ListAssets(kind=kind), timeout=timeout, **ext)

    async def search(
        self,
        query: str,
        *,
        kind: AssetType | None = None,
        limit: int = 20,
        timeout: float | None = None,
        **ext: Ext,
    ) -> AssetItems:
        cmd = SearchAssets(query=query, kind=kind, limit=limit)
        return await self._scoped("search", cmd, timeout=timeout, **ext)

    async def reload(self, *, timeout: float | None = None, **ext: Ext) -> AssetReport:
        return await self._scoped("reload", ReloadAssets(), timeout=timeout, **ext)

    async def diagnostics(self, *, timeout: float | None = None, **ext: Ext) -> AssetReport:
        return await self._scoped("diagnostics", GetDiagnostics(), timeout=timeout, **ext)

    async def graph(self, query: GraphQuery, *, timeout: float | None = None, **ext: Ext) -> GraphResult:
        return await self._scoped("graph", query, timeout=timeout, **ext)

    async def tools(self, *, timeout: float | None = None, **ext: Ext) -> ToolCatalog:
        """The tools derived from assets (slash commands, workflows, skills, the graph)."""
        return await self._scoped("tools", ListTools(), timeout=timeout, **ext)

    async def call_tool(self, call: RunTool, *, timeout: float | None = None, **ext: Ext) -> ToolResult:
        """Run an asset tool; only the tool runner calls this, after authorizing the call."""
        return await self._scoped("call_tool", call, timeout=timeout, **ext)

    async def render_command(
        self,
        name: str,
        arguments: str | Sequence[str] | Mapping[str, Any] | None = None,
        *,
        conversation_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ToolResult:
        """Render the slash command ``name`` with ``arguments``: ``data`` is ``{command, prompt, model}``.

        The asset tool ``run_command`` through ``call_tool``. Rendering only reads the
        project's command files, so a user's client calls it directly: the tool runner
        authorizes what the model calls, and a command the user types is the user's own
        request. An unknown command is ``ok: false`` with ``error.type`` ``not_found``, a
        missing required argument ``invalid_input``.
        """
        args: dict[str, Any] = {"name": name}
        if arguments is not None:
            args["arguments"] = arguments if isinstance(arguments, str | Mapping) else list(arguments)
        meta = ToolCallMeta(request_id=new_id(), conversation_id=conversation_id)
        return await self.call_tool(RunTool(name="run_command", args=args, meta=meta), timeout=timeout, **ext)
