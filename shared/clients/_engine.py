"""The engine's client: project lifecycle (``jido.engine.<verb>``)."""

from __future__ import annotations

from typing import Any

from jidocode.shared.events.engine import (
    ListProjects,
    ProjectInfo,
    ProjectList,
    ProjectLocation,
    StartProject,
    StopProject,
    WhereisProject,
)

from ._base import ClientBase, Ext

__all__ = ["EngineClient"]


class EngineClient(ClientBase):
    """Start, stop, list and locate projects."""

    service = "engine"

    async def start_project(
        self,
        root_path: str,
        *,
        data_dir: str = ".jido",
        opts: dict[str, Any] | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> ProjectInfo:
        """Start (or find) the project on ``root_path``: the same root always gives the same id."""
        cmd = StartProject(root_path=root_path, data_dir=data_dir, opts=opts or {})
        return await self._call("start_project", cmd, timeout=timeout, **ext)

    async def stop_project(self, project_id: str, *, timeout: float | None = None, **ext: Ext) -> ProjectInfo:
        return await self._call("stop_project", StopProject(project_id=project_id), timeout=timeout, **ext)

    async def list_projects(self, *, timeout: float | None = None, **ext: Ext) -> ProjectList:
        return await self._call("list_projects", ListProjects(), timeout=timeout, **ext)

    async def whereis_project(
        self, project_id: str, *, timeout: float | None = None, **ext: Ext
    ) -> ProjectLocation:
        return await self._call(
            "whereis_project", WhereisProject(project_id=project_id), timeout=timeout, **ext
        )
